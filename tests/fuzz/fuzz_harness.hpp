// The GPU fuzzer's harness: what every op's runner (fuzz_<op>.cu) shares.
//
// A runner takes one draw (fuzz_space.hpp) and its seed, builds the op's Arguments on the world of
// the draw's size (virtual ranks on device 0), and asks the op's can_implement. A refusal must
// say what to change (refusal(): it names an argument, or a value and what was expected;
// otherwise the refusal itself is a failure). An accepted draw is built (an InvalidArgument from
// the constructor now is a failure) and called `repeat` times: fresh random inputs on calls 1 and
// 2, the same inputs after; before every call the outputs are poisoned with kPoison bytes and
// the rows a call must gather are NaN, so that a read before its wait or an element never written
// shows. After every call, world.synchronize() and a comparison with an independent reference
// (tests/gpu: cuBLAS, the host references, the attention reference kernel), computed once per
// set of inputs; on the calls that repeat the inputs, the ops that promise bit-identical results
// run after run (ReduceScatter, GemmRs, MoeGemmRs, MoeLayer) are compared bit for bit with the
// previous call instead.
//
// Any other exception (CudaError, TimeoutError: a deadlock ends the CUDA context) leaves the
// runner and stops the run (fuzz_main.cu).
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../gpu/cublas_ref.hpp"
#include "../gpu/gpu_test_util.hpp"
#include "fuzz_space.hpp"

namespace tilelink::fuzz {

// What one draw came to.
struct Outcome {
  enum Kind { kRefused, kPassed, kFailed };
  Kind kind = kPassed;
  std::string text;       // the refusal's reason, or what failed
  int calls = 0;          // op calls made
  bool accepted = true;   // can_implement accepted the draw
};

// A refusal must say what to change: name an argument ("argument '...'"), or give a named value
// and what was expected ("<name> = <value>: expected ...").
inline bool names_its_cause(const std::string& why) {
  if (why.find("argument '") != std::string::npos) return true;
  const size_t eq = why.find(" = ");
  return eq != std::string::npos && why.find(": expected", eq) != std::string::npos;
}

inline Outcome refusal(const std::string& why) {
  if (!names_its_cause(why)) {
    return {Outcome::kFailed, "unhelpful refusal (names no argument and no expected value): '" + why + "'", 0, false};
  }
  return {Outcome::kRefused, why, 0, false};
}

inline Outcome passed(int calls) { return {Outcome::kPassed, "", calls, true}; }

// A failure of an accepted draw after `calls` calls.
inline Outcome failure(const std::string& what, int calls) { return {Outcome::kFailed, what, calls, true}; }

// The worlds (one per size, built on first use and kept: a World, its heap and its signals are
// costly to make), a cuBLAS handle for the references, and the run's settings.
class Harness {
 public:
  // Per rank: the largest draw of Space::gpu() needs ~4 MiB of symmetric memory (SP attention's
  // K/V rows at 8 ranks) and ~5000 signal channels (the MoE layer's two parts, one-row tiles).
  static constexpr size_t kHeapBytesPerRank = 32u << 20;
  static constexpr uint32_t kChannels = 16384;

  explicit Harness(int repeat) : repeat_(repeat) {}

  int repeat() const { return repeat_; }

  test::TestWorld& world(int size) {
    std::unique_ptr<test::TestWorld>& w = worlds_[size];
    if (!w) w = std::make_unique<test::TestWorld>(size, kHeapBytesPerRank, kChannels);
    return *w;
  }

  const test::CublasHandle& cublas() {
    if (!cublas_) cublas_ = std::make_unique<test::CublasHandle>();
    return *cublas_;
  }

 private:
  int repeat_;
  std::map<int, std::unique_ptr<test::TestWorld>> worlds_;
  std::unique_ptr<test::CublasHandle> cublas_;
};

// ---- buffers and data -------------------------------------------------------------------------------

// Buffers of at least one 256-byte block: a draw with a zero extent still gets valid pointers,
// so that the op refuses the extent, not a null pointer the harness made.
inline SymmetricBuffer symmetric(test::TestWorld& env, size_t bytes) {
  return env.heap.allocate(bytes > 256 ? bytes : 256);
}
inline DeviceBuffer device_buffer(const test::TestWorld& env, int rank, size_t bytes) {
  return DeviceBuffer(bytes > 256 ? bytes : 256, env.world.device(rank));
}

// bf16 0xFFFF is NaN: rows a call must gather, so that a GEMM or an attention tile read before
// its rows arrived turns its results into NaN.
constexpr int kNanByte = 0xFF;
constexpr uint16_t kPoisonBf16 = uint16_t(test::kPoison) * 0x0101u;
constexpr uint32_t kPoisonF32 = uint32_t(test::kPoison) * 0x01010101u;

inline void fill(void* p, int byte, size_t bytes) {
  if (bytes > 0) TL_CUDA_CHECK(cudaMemset(p, byte, bytes));
  test::settle();
}

// Each rank's shard of the gathered rows, as a draw with from_source hands it over: in a buffer of
// its own outside the heap (the op's a_source / x_source), else written into the rank's rows.
class ShardSources {
 public:
  ShardSources(const test::TestWorld& env, bool from_source, size_t shard_bytes) {
    if (!from_source) return;
    for (int r = 0; r < env.world.size(); ++r) {
      buffers_.push_back(device_buffer(env, r, shard_bytes));
      pointers_.push_back(buffers_.back().get());
    }
  }
  // The op's argument: one pointer per rank, or empty (the shard in place).
  const std::vector<const void*>& pointers() const { return pointers_; }
  // Writes rank r's `bytes` of shard from `host` where the op reads them: its source buffer (the
  // heap's rows, `own_rows`, then stay NaN: the op must copy them) or `own_rows`.
  void put(int r, void* own_rows, const void* host, size_t bytes) {
    test::upload(buffers_.empty() ? own_rows : buffers_[static_cast<size_t>(r)].get(), host, bytes);
  }

 private:
  std::vector<DeviceBuffer> buffers_;
  std::vector<const void*> pointers_;
};

template <class T>
void upload_vector(void* dst, const std::vector<T>& v) {
  if (!v.empty()) test::upload(dst, v.data(), v.size() * sizeof(T));
}

// The data of one draw: reproducible from the draw's seed, independent of the generator's stream.
inline std::mt19937_64 data_rng(uint64_t draw_seed) { return std::mt19937_64(mix64(draw_seed ^ 0xDA7Aull)); }

inline uint16_t bits(__nv_bfloat16 x) {
  uint16_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}
inline uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}

// "" if every element of `got` (rows of `cols`) is within rel * scale + abs of `want`, where
// scale is |want| or, given, `scale`; else how many are not, the first one, and whether it was
// never written (poison) or NaN.
inline std::string compare_bf16(const std::vector<__nv_bfloat16>& got, const std::vector<float>& want,
                                const std::vector<float>* scale, float rel, float abs, size_t cols,
                                const std::string& what) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = __bfloat162float(got[i]);
    const float s = scale != nullptr ? (*scale)[i] : std::fabs(want[i]);
    if (bits(got[i]) == kPoisonBf16 || !(std::fabs(g - want[i]) <= rel * s + abs)) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return "";
  const float g = __bfloat162float(got[first]);
  return what + ": " + std::to_string(bad) + " of " + std::to_string(got.size()) + " elements off; first at row " +
         std::to_string(first / cols) + " col " + std::to_string(first % cols) + ": got " + std::to_string(g) +
         (bits(got[first]) == kPoisonBf16 ? " (poison: never written)" : std::isnan(g) ? " (NaN)" : "") +
         ", reference " + std::to_string(want[first]);
}

// "" if got[from..] still holds the poison (nothing was written past an output's rows), else
// where it first does not.
inline std::string check_poisoned(const std::vector<__nv_bfloat16>& got, size_t from, const std::string& what) {
  for (size_t i = from; i < got.size(); ++i) {
    if (bits(got[i]) != kPoisonBf16) return what + ": element " + std::to_string(i) + " was written";
  }
  return "";
}

// "" if a and b hold the same bytes, else where they first differ.
template <class T>
std::string compare_bits(const std::vector<T>& got, const std::vector<T>& previous, const std::string& what) {
  if (got.size() == previous.size() && std::memcmp(got.data(), previous.data(), got.size() * sizeof(T)) == 0) {
    return "";
  }
  size_t i = 0;
  while (i < got.size() && i < previous.size() && std::memcmp(&got[i], &previous[i], sizeof(T)) == 0) ++i;
  return what + ": same inputs as the previous call, different bits (first at element " + std::to_string(i) + ")";
}

inline std::vector<float> to_float(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = __bfloat162float(v[i]);
  return f;
}

// Whether call `call` (1-based) gets fresh inputs: the first two do, later ones repeat the last.
inline bool fresh_inputs(int call) { return call <= 2; }

inline std::string at_call(int call) { return "call " + std::to_string(call); }

// ---- the ops' runners (fuzz_collectives.cu, fuzz_gemm.cu, fuzz_moe.cu, fuzz_attention.cu) -------------

Outcome run_draw(Harness& h, const AllGatherDraw& d, uint64_t seed);
Outcome run_draw(Harness& h, const ReduceScatterDraw& d, uint64_t seed);
Outcome run_draw(Harness& h, const AgGemmDraw& d, uint64_t seed);
Outcome run_draw(Harness& h, const GemmRsDraw& d, uint64_t seed);
Outcome run_draw(Harness& h, const MlpDraw& d, uint64_t seed);
Outcome run_draw(Harness& h, const MoeAgDraw& d, uint64_t seed);
Outcome run_draw(Harness& h, const MoeRsDraw& d, uint64_t seed);
Outcome run_draw(Harness& h, const MoeLayerDraw& d, uint64_t seed);
Outcome run_draw(Harness& h, const SpAttentionDraw& d, uint64_t seed);

// Constructs an op after can_implement accepted; an InvalidArgument now is a failure (`error`).
template <class Op, class Args>
std::unique_ptr<Op> construct(test::TestWorld& env, const Args& args, const char* name, std::string* error) {
  try {
    return std::make_unique<Op>(env.world, env.heap, env.signals, args, name);
  } catch (const InvalidArgument& e) {
    *error = std::string("the constructor threw after can_implement accepted: ") + e.what();
    return nullptr;
  }
}

}  // namespace tilelink::fuzz
