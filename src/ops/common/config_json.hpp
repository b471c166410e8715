// The ops' configurations as JSON (the tune cache's entries: to_config_json / from_config_json of
// each op's <op>_config.hpp): the pieces they share. Private to the library, as nlohmann-json is:
// include it from .cpp files only.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "tilelink/comm/collectives.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/common/op_method.hpp"
#include "tilelink/ops/common/parse_enum.hpp"

namespace tilelink::detail {

using nlohmann::json;

// The enum `field` of `j` by its name (to_string), one of `values`; else InvalidArgument naming
// `source`, the field and what was expected.
template <class E>
E enum_field(const json& j, const char* field, std::initializer_list<E> values, const std::string& source) {
  return parse_enum(j.at(field).get<std::string>(), values, source + ": field '" + field + "'");
}

// An op's method field, "op_method" (op_method.hpp); absent in entries written before the knob
// existed: auto.
inline OpMethod method_from_json(const json& j, const std::string& source) {
  if (!j.contains("op_method")) return OpMethod::kAuto;
  return enum_field(j, "op_method",
                    {OpMethod::kAuto, OpMethod::kFused, OpMethod::kDecomposed, OpMethod::kNonOverlapped}, source);
}

json all_gather_to_json(const AllGatherConfig& c);
AllGatherConfig all_gather_from_json(const json& j, const std::string& source);

// `parse(j)` of the JSON text `text`; a text that is not JSON, or lacks a field, is an
// InvalidArgument naming `source` and `what` the text should have been.
template <class Parse>
auto parse_config_json(const std::string& text, const std::string& source, const char* what, Parse&& parse) {
  try {
    return parse(json::parse(text));
  } catch (const json::exception& e) {
    throw InvalidArgument(source + ": not " + what + ": " + e.what());
  }
}

}  // namespace tilelink::detail
