// Text to enum, one way for every reader of a name: the tune cache's fields and the tool's
// options. An enum's names are its to_string's.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "tilelink/core/error.hpp"

namespace tilelink {

// The value among `values` whose to_string is `name`; else InvalidArgument
// "<what> = '<name>': expected one of 'a', 'b'" (`what` names the field or option).
template <class E>
E parse_enum(const std::string& name, const std::vector<E>& values, const std::string& what) {
  std::string expected;
  for (E e : values) {
    if (name == to_string(e)) return e;
    expected += (expected.empty() ? "'" : ", '") + std::string(to_string(e)) + "'";
  }
  throw InvalidArgument(what + " = '" + name + "': expected one of " + expected);
}

template <class E>
E parse_enum(const std::string& name, std::initializer_list<E> values, const std::string& what) {
  return parse_enum(name, std::vector<E>(values), what);
}

}  // namespace tilelink
