// Lookup of an op's compiled kernel configurations by name (the *ConfigInfo tables of the sm90
// kernels): "" picks the first (the default); and the making of an op's kernel pair.
#pragma once

#include <string>
#include <vector>

namespace tilelink::detail {

template <class Info>
const Info* find_config(const std::vector<Info>& configs, const std::string& name) {
  if (name.empty()) return &configs.front();
  for (const Info& c : configs) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

template <class Info>
std::vector<std::string> config_names(const std::vector<Info>& configs) {
  std::vector<std::string> names;
  for (const Info& c : configs) names.emplace_back(c.name);
  return names;
}

// "argument 'config.kernel' = '<name>': expected one of '<a>', '<b>'".
template <class Info>
std::string unknown_config(const std::vector<Info>& configs, const std::string& name) {
  std::string names;
  for (const Info& c : configs) names += (names.empty() ? "'" : ", '") + std::string(c.name) + "'";
  return "argument 'config.kernel' = '" + name + "': expected one of " + names;
}

// An op's two kernels of `rank`'s problem: the fused one, whose producer waits on the
// communication (p.wait = true), and its plain twin (the same GEMM without waits, for the
// baselines). Stored at index `rank`; the entries of ranks other processes drive stay empty. Both
// or neither: if making either throws, the stored pair is unchanged.
template <class Info, class Problem, class Kernels>
void make_fused_and_plain(const Info& kernel, Problem p, Kernels& fused, Kernels& plain, int rank) {
  const size_t r = static_cast<size_t>(rank);
  p.wait = true;
  auto made_fused = kernel.make(p);
  p.wait = false;
  auto made_plain = kernel.make(p);
  if (fused.size() <= r) fused.resize(r + 1);
  if (plain.size() <= r) plain.resize(r + 1);
  fused[r] = std::move(made_fused);
  plain[r] = std::move(made_plain);
}

}  // namespace tilelink::detail
