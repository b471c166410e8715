#include "tilelink/ops/moe/moe_config.hpp"

#include "ops/common/config_json.hpp"
#include "tilelink/ops/common/all_gather_config.hpp"

namespace tilelink {

std::string describe(const MoeLayerConfig& c) {
  auto num = [](uint32_t v) { return v == 0 ? std::string("auto") : std::to_string(v); };
  auto kernel = [](const std::string& k) { return k.empty() ? std::string("default") : k; };
  const MoeAgGroupGemmConfig& a = c.part1;
  const MoeGemmRsConfig& b = c.part2;
  std::string s = "part 1: kernel " + kernel(a.kernel) + ", swizzle " + num(a.swizzle) + ", " +
                  to_string(a.comm.resource) + " all-gather";
  if (a.comm.resource == CommResource::kSm) s += std::string(" ") + num(a.comm.num_blocks) + " CTAs";
  s += ", comm rows " + num(a.comm.comm_rows) + ", gather CTAs " + num(a.gather_blocks);
  if (a.gemm_sms != 0) s += ", GEMM SMs " + std::to_string(a.gemm_sms);
  s += "; part 2: kernel " + kernel(b.kernel) + ", swizzle " + num(b.swizzle) + ", order " +
       (b.weight_sweeps == MoeGemmRsConfig::kTokenOrder ? std::string("token")
        : b.weight_sweeps == 0                          ? std::string("auto")
                                                        : std::to_string(b.weight_sweeps) + " sweeps") +
       ", comm rows " + num(b.comm_rows) + ", combine " + to_string(b.combine) + ", combine CTAs " +
       num(b.combine_blocks);
  if (b.gemm_sms != 0) s += ", GEMM SMs " + std::to_string(b.gemm_sms);
  if (a.method != OpMethod::kAuto || b.method != OpMethod::kAuto) {
    s += std::string("; methods ") + to_string(a.method) + ", " + to_string(b.method);
  }
  return s;
}

bool is_automatic(const MoeLayerConfig& c) {
  const MoeAgGroupGemmConfig a;
  const MoeGemmRsConfig b;
  return c.part1.kernel == a.kernel && c.part1.swizzle == a.swizzle && c.part1.gather_blocks == a.gather_blocks &&
         c.part1.gemm_sms == a.gemm_sms && same_comm(c.part1.comm, a.comm) && c.part2.kernel == b.kernel &&
         c.part2.swizzle == b.swizzle && c.part2.comm_rows == b.comm_rows &&
         c.part2.combine == b.combine && c.part2.combine_blocks == b.combine_blocks && c.part2.gemm_sms == b.gemm_sms &&
         c.part2.weight_sweeps == b.weight_sweeps;
}

std::string to_config_json(const MoeLayerConfig& c) {
  const MoeAgGroupGemmConfig& a = c.part1;
  const MoeGemmRsConfig& b = c.part2;
  return detail::json{{"part1",
                       {{"kernel", a.kernel},
                        {"swizzle", a.swizzle},
                        {"gather_blocks", a.gather_blocks},
                        {"gemm_sms", a.gemm_sms},
                        {"comm", detail::all_gather_to_json(a.comm)},
                        {"op_method", to_string(a.method)}}},
                      {"part2",
                       {{"kernel", b.kernel},
                        {"swizzle", b.swizzle},
                        {"comm_rows", b.comm_rows},
                        {"combine", to_string(b.combine)},
                        {"combine_blocks", b.combine_blocks},
                        {"gemm_sms", b.gemm_sms},
                        {"weight_sweeps", b.weight_sweeps},
                        {"op_method", to_string(b.method)}}}}
      .dump();
}

void from_config_json(const std::string& json, const std::string& source, MoeLayerConfig& c) {
  c = detail::parse_config_json(json, source, "a MoE layer configuration", [&](const detail::json& j) {
    MoeLayerConfig out;
    const detail::json& a = j.at("part1");
    out.part1.kernel = a.at("kernel").get<std::string>();
    out.part1.swizzle = a.at("swizzle").get<uint32_t>();
    out.part1.gather_blocks = a.at("gather_blocks").get<uint32_t>();
    out.part1.gemm_sms = a.at("gemm_sms").get<uint32_t>();
    out.part1.comm = detail::all_gather_from_json(a.at("comm"), source);
    out.part1.method = detail::method_from_json(a, source);
    const detail::json& b = j.at("part2");
    out.part2.kernel = b.at("kernel").get<std::string>();
    out.part2.swizzle = b.at("swizzle").get<uint32_t>();
    out.part2.comm_rows = b.at("comm_rows").get<uint32_t>();
    if (b.contains("combine")) {  // absent in entries written before it existed: auto
      out.part2.combine =
          detail::enum_field(b, "combine", {MoeCombine::kBlocks, MoeCombine::kEpilogue, MoeCombine::kAuto}, source);
    }
    out.part2.combine_blocks = b.at("combine_blocks").get<uint32_t>();
    out.part2.gemm_sms = b.at("gemm_sms").get<uint32_t>();
    out.part2.weight_sweeps = b.at("weight_sweeps").get<uint32_t>();
    out.part2.method = detail::method_from_json(b, source);
    return out;
  });
}

}  // namespace tilelink
