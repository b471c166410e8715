#include "tilelink/ops/attention/sp_attention_config.hpp"

#include "ops/common/config_json.hpp"
#include "tilelink/ops/common/all_gather_config.hpp"

namespace tilelink {

std::string describe(const SpAttentionConfig& c) {
  auto num = [](uint32_t v) { return v == 0 ? std::string("auto") : std::to_string(v); };
  std::string s = "section heads " + num(c.section_kv_heads) + ", " + (c.local_first ? "local first" : "one pass") +
                  ", " + to_string(c.comm.resource) + " all-gather";
  if (c.comm.resource == CommResource::kSm) s += std::string(" ") + num(c.comm.num_blocks) + " CTAs";
  s += ", comm rows " + num(c.comm.comm_rows);
  if (c.attention_sms != 0) s += ", attention SMs " + std::to_string(c.attention_sms);
  if (c.method != OpMethod::kAuto) s += std::string(", method ") + to_string(c.method);
  return s;
}

bool is_automatic(const SpAttentionConfig& c) {
  const SpAttentionConfig d;
  return same_comm(c.comm, d.comm) && c.local_first == d.local_first && c.attention_sms == d.attention_sms &&
         c.section_kv_heads == d.section_kv_heads;
}

std::string to_config_json(const SpAttentionConfig& c) {
  return detail::json{{"comm", detail::all_gather_to_json(c.comm)},
                      {"local_first", c.local_first},
                      {"attention_sms", c.attention_sms},
                      {"section_kv_heads", c.section_kv_heads},
                      {"op_method", to_string(c.method)}}
      .dump();
}

void from_config_json(const std::string& json, const std::string& source, SpAttentionConfig& c) {
  c = detail::parse_config_json(json, source, "an SP attention configuration", [&](const detail::json& j) {
    SpAttentionConfig out;
    out.comm = detail::all_gather_from_json(j.at("comm"), source);
    out.local_first = j.at("local_first").get<bool>();
    out.attention_sms = j.at("attention_sms").get<uint32_t>();
    out.section_kv_heads = j.at("section_kv_heads").get<uint32_t>();
    out.method = detail::method_from_json(j, source);
    return out;
  });
}

}  // namespace tilelink
