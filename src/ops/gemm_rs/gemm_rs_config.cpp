#include "tilelink/ops/gemm_rs/gemm_rs_config.hpp"

#include "ops/common/config_json.hpp"

namespace tilelink {

std::string describe(const GemmRsConfig& c) {
  auto num = [](uint32_t v) { return v == 0 ? std::string("auto") : std::to_string(v); };
  std::string s = std::string("scatter ") + to_string(c.scatter) + ", signal per " + to_string(c.granularity) +
                  ", reduction CTAs " + num(c.reduce_blocks) + ", swizzle " + num(c.swizzle);
  if (c.gemm_sms != 0) s += ", GEMM SMs " + std::to_string(c.gemm_sms);
  if (c.reducer != GemmRsReducer::kAuto) s += std::string(", reducer ") + to_string(c.reducer);
  if (c.push_notify != GemmRsPushNotify::kDeferred) s += std::string(", push notify ") + to_string(c.push_notify);
  if (c.method != OpMethod::kAuto) s += std::string(", method ") + to_string(c.method);
  if (c.engine != GemmRsEngine::kAuto) s += std::string(", engine ") + to_string(c.engine);
  if (!c.kernel.empty()) s += ", kernel " + c.kernel;
  return s;
}

bool is_automatic(const GemmRsConfig& c) {
  const GemmRsConfig d;
  return c.scatter == d.scatter && c.granularity == d.granularity && c.reduce_blocks == d.reduce_blocks &&
         c.gemm_sms == d.gemm_sms && c.swizzle == d.swizzle && c.reducer == d.reducer &&
         c.push_notify == d.push_notify && c.engine == d.engine && c.kernel == d.kernel;
}

std::string to_config_json(const GemmRsConfig& c) {
  return detail::json{{"scatter", to_string(c.scatter)},
                      {"granularity", to_string(c.granularity)},
                      {"reduce_blocks", c.reduce_blocks},
                      {"gemm_sms", c.gemm_sms},
                      {"swizzle", c.swizzle},
                      {"reducer", to_string(c.reducer)},
                      {"push_notify", to_string(c.push_notify)},
                      {"op_method", to_string(c.method)},
                      {"engine", to_string(c.engine)},
                      {"kernel", c.kernel}}
      .dump();
}

void from_config_json(const std::string& json, const std::string& source, GemmRsConfig& c) {
  c = detail::parse_config_json(json, source, "a GEMM+RS configuration", [&](const detail::json& j) {
    GemmRsConfig out;
    out.scatter = detail::enum_field(
        j, "scatter", {GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush, GemmRsScatter::kCopyEngine, GemmRsScatter::kAuto},
        source);
    out.granularity = detail::enum_field(
        j, "granularity", {SignalGranularity::kTile, SignalGranularity::kTileRow, SignalGranularity::kRank}, source);
    out.reduce_blocks = j.at("reduce_blocks").get<uint32_t>();
    out.gemm_sms = j.at("gemm_sms").get<uint32_t>();
    out.swizzle = j.at("swizzle").get<uint32_t>();
    if (j.contains("reducer")) {
      out.reducer = detail::enum_field(
          j, "reducer", {GemmRsReducer::kBlocks, GemmRsReducer::kEpilogue, GemmRsReducer::kAuto}, source);
    }
    if (j.contains("push_notify")) {
      out.push_notify =
          detail::enum_field(j, "push_notify", {GemmRsPushNotify::kDeferred, GemmRsPushNotify::kImmediate}, source);
    }
    out.method = detail::method_from_json(j, source);
    if (j.contains("engine")) {
      out.engine = detail::enum_field(
          j, "engine", {GemmRsEngine::kAuto, GemmRsEngine::kOwnerTiles, GemmRsEngine::kSmallM}, source);
    }
    if (j.contains("kernel")) out.kernel = j.at("kernel").get<std::string>();
    return out;
  });
}

}  // namespace tilelink
