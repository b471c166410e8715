#include "tilelink/ops/common/all_gather_config.hpp"

#include "ops/common/config_json.hpp"

namespace tilelink {

bool same_comm(const AllGatherConfig& a, const AllGatherConfig& b) {
  return a.resource == b.resource && a.method == b.method && a.path == b.path && a.order == b.order &&
         a.comm_rows == b.comm_rows && a.num_blocks == b.num_blocks && a.threads == b.threads;
}

namespace detail {

json all_gather_to_json(const AllGatherConfig& c) {
  return json{{"resource", to_string(c.resource)}, {"method", to_string(c.method)},
              {"path", to_string(c.path)},         {"order", to_string(c.order)},
              {"comm_rows", c.comm_rows},          {"num_blocks", c.num_blocks},
              {"threads", c.threads}};
}

AllGatherConfig all_gather_from_json(const json& j, const std::string& source) {
  AllGatherConfig c;
  c.resource = enum_field(j, "resource", {CommResource::kCopyEngine, CommResource::kSm}, source);
  c.method = enum_field(j, "method", {AgMethod::kPull, AgMethod::kPush}, source);
  c.path = enum_field(j, "path", {DataPath::kLdSt, DataPath::kBulk}, source);
  c.order = enum_field(j, "order", {CommOrder::kFullMesh, CommOrder::kRing}, source);
  c.comm_rows = j.at("comm_rows").get<uint32_t>();
  c.num_blocks = j.at("num_blocks").get<uint32_t>();
  c.threads = j.at("threads").get<uint32_t>();
  return c;
}

}  // namespace detail
}  // namespace tilelink
