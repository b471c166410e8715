#include "tilelink/ops/ag_gemm/ag_gemm_config.hpp"

#include "ops/common/config_json.hpp"
#include "tilelink/ops/common/all_gather_config.hpp"

namespace tilelink {

std::string describe(const AgGemmConfig& c) {
  std::string s = "kernel " + (c.kernel.empty() ? std::string("default") : c.kernel) + ", swizzle " +
                  (c.swizzle == 0 ? std::string("auto") : std::to_string(c.swizzle)) + ", " +
                  to_string(c.comm.resource) + " " + to_string(c.comm.method) + " " + to_string(c.comm.order);
  if (c.comm.resource == CommResource::kSm) {
    s += std::string(" ") + to_string(c.comm.path) + " " +
         (c.comm.num_blocks == 0 ? std::string("auto") : std::to_string(c.comm.num_blocks)) + " CTAs";
  }
  s += ", comm rows " + (c.comm.comm_rows == 0 ? std::string("auto") : std::to_string(c.comm.comm_rows));
  if (c.gemm_sms != 0) s += ", GEMM SMs " + std::to_string(c.gemm_sms);
  if (c.method != OpMethod::kAuto) s += std::string(", method ") + to_string(c.method);
  return s;
}

bool is_automatic(const AgGemmConfig& c) {
  const AgGemmConfig d;
  return c.kernel == d.kernel && c.swizzle == d.swizzle && c.gemm_sms == d.gemm_sms && same_comm(c.comm, d.comm);
}

std::string to_config_json(const AgGemmConfig& c) {
  return detail::json{{"kernel", c.kernel},
                      {"swizzle", c.swizzle},
                      {"gemm_sms", c.gemm_sms},
                      {"op_method", to_string(c.method)},
                      {"comm", detail::all_gather_to_json(c.comm)}}
      .dump();
}

void from_config_json(const std::string& json, const std::string& source, AgGemmConfig& c) {
  c = detail::parse_config_json(json, source, "an AG+GEMM configuration", [&](const detail::json& j) {
    AgGemmConfig out;
    out.kernel = j.at("kernel").get<std::string>();
    out.swizzle = j.at("swizzle").get<uint32_t>();
    out.gemm_sms = j.at("gemm_sms").get<uint32_t>();
    out.method = detail::method_from_json(j, source);
    out.comm = detail::all_gather_from_json(j.at("comm"), source);
    return out;
  });
}

}  // namespace tilelink
