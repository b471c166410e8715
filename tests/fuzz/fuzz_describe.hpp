// A draw in words, for the fuzzer's reports and replays (fuzz_space.hpp).
#pragma once

#include <sstream>
#include <string>

#include "fuzz_draws.hpp"

namespace tilelink::fuzz {

// ---- descriptions ----------------------------------------------------------------------------------
// Every field of a draw, "name=value" separated by spaces: a failure's report says what ran.

namespace detail {

template <class E>
std::string enum_name(E v, uint32_t count, const char* (*name)(E)) {
  return static_cast<uint32_t>(v) < count ? name(v) : std::to_string(static_cast<uint32_t>(v));
}
inline const char* granularity_name(SignalGranularity g) { return to_string(g); }
inline const char* scatter_name(GemmRsScatter s) { return to_string(s); }
inline const char* reducer_name(GemmRsReducer r) { return to_string(r); }
inline const char* push_notify_name(GemmRsPushNotify n) { return to_string(n); }
inline const char* activation_name(MlpActivation a) { return to_string(a); }

inline std::string describe(const AllGatherConfig& c) {
  std::ostringstream os;
  os << "resource=" << to_string(c.resource) << " method=" << to_string(c.method) << " path=" << to_string(c.path)
     << " order=" << to_string(c.order) << " comm_rows=" << c.comm_rows << " num_blocks=" << c.num_blocks
     << " threads=" << c.threads;
  return os.str();
}
inline std::string describe(const AgGemmConfig& c, const char* prefix) {
  std::ostringstream os;
  os << prefix << "comm{" << describe(c.comm) << "} " << prefix << "gemm_sms=" << c.gemm_sms << " " << prefix
     << "swizzle=" << c.swizzle << " " << prefix << "kernel='" << c.kernel << "' " << prefix
     << "use_tune_cache=" << c.use_tune_cache;
  return os.str();
}
inline std::string describe(const GemmRsConfig& c, const char* prefix) {
  std::ostringstream os;
  os << prefix << "scatter=" << enum_name(c.scatter, 4, scatter_name) << " " << prefix
     << "granularity=" << enum_name(c.granularity, 3, granularity_name) << " " << prefix
     << "reduce_blocks=" << c.reduce_blocks << " " << prefix << "gemm_sms=" << c.gemm_sms << " " << prefix
     << "swizzle=" << c.swizzle << " " << prefix << "reducer=" << enum_name(c.reducer, 3, reducer_name) << " "
     << prefix << "push_notify=" << enum_name(c.push_notify, 2, push_notify_name) << " " << prefix
     << "use_tune_cache=" << c.use_tune_cache;
  return os.str();
}
inline std::string describe(const MoeAgGroupGemmConfig& c, const char* prefix) {
  std::ostringstream os;
  os << prefix << "comm{" << describe(c.comm) << "} " << prefix << "gather_blocks=" << c.gather_blocks << " " << prefix
     << "gemm_sms=" << c.gemm_sms << " " << prefix << "swizzle=" << c.swizzle << " " << prefix << "kernel='"
     << c.kernel << "'";
  return os.str();
}
inline std::string describe(const MoeGemmRsConfig& c, const char* prefix) {
  std::ostringstream os;
  os << prefix << "comm_rows=" << c.comm_rows << " " << prefix << "combine_blocks=" << c.combine_blocks << " "
     << prefix << "gemm_sms=" << c.gemm_sms << " " << prefix << "swizzle=" << c.swizzle << " " << prefix
     << "weight_sweeps="
     << (c.weight_sweeps == MoeGemmRsConfig::kTokenOrder ? std::string("token_order") : std::to_string(c.weight_sweeps))
     << " " << prefix << "kernel='" << c.kernel << "' " << prefix << "combine=" << static_cast<uint32_t>(c.combine);
  return os.str();
}

}  // namespace detail

inline std::string describe(const AllGatherDraw& d) {
  std::ostringstream os;
  os << "world=" << d.world << " rows_per_rank=" << d.args.rows_per_rank << " row_bytes=" << d.args.row_bytes
     << " gathered_offset=" << d.args.gathered_offset << " " << detail::describe(d.args.config);
  return os.str();
}

inline std::string describe(const ReduceScatterDraw& d) {
  std::ostringstream os;
  os << "world=" << d.world << " rows_per_rank=" << d.args.rows_per_rank << " cols=" << d.args.cols
     << " method=" << to_string(d.args.config.method) << " path=" << to_string(d.args.config.path)
     << " comm_rows=" << d.args.config.comm_rows << " num_blocks=" << d.args.config.num_blocks
     << " threads=" << d.args.config.threads;
  return os.str();
}

inline std::string describe(const AgGemmDraw& d) {
  std::ostringstream os;
  os << "world=" << d.world << " m_per_rank=" << d.args.m_per_rank << " n=" << d.args.n << " k=" << d.args.k
     << " a_offset=" << d.args.a_offset << " b_layout=" << to_string(d.args.b_layout)
     << " from_source=" << d.from_source << " " << detail::describe(d.args.config, "");
  return os.str();
}

inline std::string describe(const GemmRsDraw& d) {
  std::ostringstream os;
  os << "world=" << d.world << " m=" << d.args.m << " n=" << d.args.n << " k=" << d.args.k << " recv=" << d.with_recv << " "
     << detail::describe(d.args.config, "");
  return os.str();
}

inline std::string describe(const MlpDraw& d) {
  std::ostringstream os;
  os << "world=" << d.world << " m=" << d.args.m << " hidden=" << d.args.hidden << " intermediate=" << d.args.intermediate
     << " recv=" << d.with_recv << " from_source=" << d.from_source
     << " activation=" << detail::enum_name(d.args.config.activation, 2, detail::activation_name) << " "
     << detail::describe(d.args.config.fc1, "fc1.") << " " << detail::describe(d.args.config.fc2, "fc2.");
  return os.str();
}

inline std::string describe(const MoeAgDraw& d) {
  std::ostringstream os;
  os << "world=" << d.world << " tokens_per_rank=" << d.args.tokens_per_rank << " hidden=" << d.args.hidden << " n=" << d.args.n
     << " experts=" << d.args.experts << " topk=" << d.args.topk << " x_offset=" << d.args.x_offset
     << " routing=" << to_string(d.routing) << " from_source=" << d.from_source << " "
     << detail::describe(d.args.config, "");
  return os.str();
}

inline std::string describe(const MoeRsDraw& d) {
  std::ostringstream os;
  os << "world=" << d.world << " tokens_per_rank=" << d.args.tokens_per_rank << " n=" << d.args.n << " k=" << d.args.k
     << " experts=" << d.args.experts << " topk=" << d.args.topk << " routing=" << to_string(d.routing) << " "
     << detail::describe(d.args.config, "");
  return os.str();
}

inline std::string describe(const MoeLayerDraw& d) {
  std::ostringstream os;
  os << "world=" << d.world << " tokens_per_rank=" << d.args.tokens_per_rank << " hidden=" << d.args.hidden
     << " intermediate=" << d.args.intermediate << " experts=" << d.args.experts << " topk=" << d.args.topk
     << " x_offset=" << d.args.x_offset << " routing=" << to_string(d.routing) << " from_source=" << d.from_source
     << " activation=" << detail::enum_name(d.args.config.activation, 2, detail::activation_name) << " "
     << detail::describe(d.args.config.part1, "part1.") << " " << detail::describe(d.args.config.part2, "part2.")
     << " use_tune_cache=" << d.args.config.use_tune_cache;
  return os.str();
}

inline std::string describe(const SpAttentionDraw& d) {
  std::ostringstream os;
  os << "world=" << d.world << " seq_per_rank=" << d.args.seq_per_rank << " q_heads=" << d.args.q_heads
     << " kv_heads=" << d.args.kv_heads << " head_dim=" << d.args.head_dim << " causal=" << d.args.causal
     << " kv_offset=" << d.args.kv_offset << " comm{" << detail::describe(d.args.config.comm) << "}"
     << " layout=" << to_string(d.args.config.layout) << " local_first=" << d.args.config.local_first
     << " attention_sms=" << d.args.config.attention_sms << " section_kv_heads=" << d.args.config.section_kv_heads
     << " use_tune_cache=" << d.args.config.use_tune_cache;
  return os.str();
}


}  // namespace tilelink::fuzz
