// How an op applies the tune cache's configuration (runtime/tune_cache.hpp): one template for
// AgGemm, GemmRs, MoeLayer and SpAttention.
#pragma once

#include <optional>
#include <string>

#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/tune_cache.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {

// An op's arguments with the cache's configuration for `key_of()` in place of an all-automatic
// one, when the cache holds one (read by the op's from_config_json) and Op::can_implement accepts
// it; `keep(tuned, callers)` copies back what is the problem's, not a knob (the MoE activation,
// the attention's layout). `*from` names the cache file when it applied. Otherwise `a` itself.
// An entry that is not the op's configuration is an InvalidArgument naming the file and the key.
template <class Op, class Args, class KeyOf, class Keep>
Args with_tuned_config(const World& world, const SymmetricHeap& heap, const Args& a, KeyOf&& key_of, Keep&& keep,
                       std::string* from) {
  if (!a.config.use_tune_cache || !is_automatic(a.config)) return a;
  const TuneKey key = key_of();
  std::string path;
  const std::optional<TuneCache::Entry> entry = find_tuned(key, &path);
  if (!entry) return a;
  Args tuned = a;
  from_config_json(entry->config, "tune cache '" + path + "', entry '" + key.str() + "'", tuned.config);
  keep(tuned.config, a.config);
  tuned.config.use_tune_cache = false;
  if (!Op::can_implement(world, heap, tuned).empty()) return a;
  *from = path;
  return tuned;
}

}  // namespace tilelink::detail
