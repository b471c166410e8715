// tilelink_fuzz: random worlds, shapes and configurations of every op (fuzz_space.hpp) on virtual
// ranks of GPU 0, each either refused by can_implement with a reason or run and checked against
// the GPU suite's references (fuzz_harness.hpp). Prints the run's seed first, every failure with
// the command that replays its draw alone, and per op the draws, accepted draws, calls, refusals
// by reason and failures.
//
//   tilelink_fuzz [--op all|OP] [--calls N] [--seed S] [--repeat R] [--verbose]
//   tilelink_fuzz --replay DRAW_SEED --op OP [--repeat R]
//
// Draws go round the ops in turn (draw i of an op has seed draw_seed(S, op, i)) until N calls
// were made. Exit status: 0 no failure, 1 a failure (a CUDA error or a deadlock, which ends the
// CUDA context, also stops the run), 2 no GPU, 64 bad command line.
//
// The tune cache is off (every op runs the configuration drawn) and modules load lazily, as in
// an application: the ops preload the kernels that run next to a spinning one.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_harness.hpp"

namespace tilelink::fuzz {
namespace {

constexpr int kExitFailure = 1, kExitNoGpu = 2, kExitUsage = 64;

const char* const kUsage =
    "usage: tilelink_fuzz [--op all|all_gather|reduce_scatter|ag_gemm|gemm_rs|mlp|moe_ag|moe_rs|moe_layer|sp_attention]\n"
    "                     [--calls N (default 10000)] [--seed S (default: fresh, printed)]\n"
    "                     [--repeat R (calls per accepted draw, default 3)] [--verbose]\n"
    "       tilelink_fuzz --replay DRAW_SEED --op OP [--repeat R]   (one draw, as a failure printed it)\n";

struct Options {
  bool all_ops = true;
  Op op = Op::kAllGather;
  uint64_t calls = 10000;
  bool seeded = false;
  uint64_t seed = 0;
  int repeat = 3;
  bool replay = false;
  uint64_t replay_seed = 0;
  bool verbose = false;
};

bool parse_u64(const std::string& s, uint64_t* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *v = std::strtoull(s.c_str(), &end, 0);
  return errno == 0 && end != nullptr && *end == '\0' && s[0] != '-';
}

// "" or what is wrong with the command line.
std::string parse(int argc, char** argv, Options* o) {
  bool op_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string* v) {
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      return true;
    };
    std::string v;
    uint64_t n = 0;
    if (a == "--verbose") {
      o->verbose = true;
    } else if (a == "--op") {
      if (!value(&v)) return "--op needs a value";
      op_given = true;
      if (v == "all") {
        o->all_ops = true;
      } else if (parse_op(v, &o->op)) {
        o->all_ops = false;
      } else {
        return "--op '" + v + "': expected all or an op name";
      }
    } else if (a == "--calls") {
      if (!value(&v) || !parse_u64(v, &n) || n == 0) return "--calls: expected a positive count";
      o->calls = n;
    } else if (a == "--seed") {
      if (!value(&v) || !parse_u64(v, &o->seed)) return "--seed: expected an unsigned integer (decimal or 0x hex)";
      o->seeded = true;
    } else if (a == "--repeat") {
      if (!value(&v) || !parse_u64(v, &n) || n == 0 || n > 1000) return "--repeat: expected 1 to 1000 calls";
      o->repeat = static_cast<int>(n);
    } else if (a == "--replay") {
      if (!value(&v) || !parse_u64(v, &o->replay_seed)) return "--replay: expected a draw seed (as printed)";
      o->replay = true;
    } else {
      return "unknown argument '" + a + "'";
    }
  }
  if (o->replay && (!op_given || o->all_ops)) return "--replay needs --op with the draw's op";
  return "";
}

std::string hex(uint64_t x) {
  std::ostringstream os;
  os << "0x" << std::hex << x;
  return os.str();
}

// A refusal's reason with its numbers and pointers as N: refusals are counted by kind.
std::string reason_kind(const std::string& reason) {
  std::string out;
  for (size_t i = 0; i < reason.size(); ++i) {
    const char c = reason[i];
    if (c >= '0' && c <= '9') {
      if (reason.compare(i, 2, "0x") == 0) {
        while (i + 1 < reason.size() && std::isxdigit(static_cast<unsigned char>(reason[i + 1]))) ++i;
      }
      if (out.empty() || out.back() != 'N') out += 'N';
    } else {
      out += c;
    }
  }
  return out;
}

// Draws `op`'s draw of seed `ds` and runs it; *draw gets its description.
Outcome run_one(Harness& h, Op op, uint64_t ds, std::string* draw) {
  Rng rng(ds);
  const Space s = Space::gpu();
  auto go = [&](const auto& d) {
    *draw = describe(d);
    return run_draw(h, d, ds);
  };
  switch (op) {
    case Op::kAllGather: return go(draw_all_gather(rng, s));
    case Op::kReduceScatter: return go(draw_reduce_scatter(rng, s));
    case Op::kAgGemm: return go(draw_ag_gemm(rng, s));
    case Op::kGemmRs: return go(draw_gemm_rs(rng, s));
    case Op::kMlp: return go(draw_mlp(rng, s));
    case Op::kMoeAg: return go(draw_moe_ag(rng, s));
    case Op::kMoeRs: return go(draw_moe_rs(rng, s));
    case Op::kMoeLayer: return go(draw_moe_layer(rng, s));
    case Op::kSpAttention: return go(draw_sp_attention(rng, s));
  }
  return failure("unknown op", 0);
}

struct OpStats {
  uint64_t draws = 0, accepted = 0, calls = 0, failures = 0;
  std::map<std::string, uint64_t> refusals;  // by reason_kind
};

void print_failure(Op op, uint64_t index, uint64_t ds, const std::string& draw, const std::string& what, int repeat) {
  std::cout << "FAIL " << to_string(op) << " draw " << index << " (draw seed " << hex(ds) << "): " << what
            << "\n  draw: " << draw << "\n  replay: tilelink_fuzz --replay " << hex(ds) << " --op " << to_string(op)
            << " --repeat " << repeat << std::endl;
}

void print_summary(const std::vector<Op>& ops, const std::map<Op, OpStats>& stats, double seconds) {
  std::printf("\n%-15s %8s %9s %8s %8s %9s\n", "op", "draws", "accepted", "calls", "refused", "failures");
  uint64_t draws = 0, accepted = 0, calls = 0, refused = 0, failures = 0;
  for (Op op : ops) {
    const OpStats& s = stats.at(op);
    uint64_t r = 0;
    for (const auto& [why, n] : s.refusals) r += n;
    std::printf("%-15s %8llu %9llu %8llu %8llu %9llu\n", to_string(op), (unsigned long long)s.draws,
                (unsigned long long)s.accepted, (unsigned long long)s.calls, (unsigned long long)r,
                (unsigned long long)s.failures);
    draws += s.draws, accepted += s.accepted, calls += s.calls, refused += r, failures += s.failures;
  }
  std::printf("%-15s %8llu %9llu %8llu %8llu %9llu   (%.1f s)\n", "all", (unsigned long long)draws,
              (unsigned long long)accepted, (unsigned long long)calls, (unsigned long long)refused,
              (unsigned long long)failures, seconds);
  std::printf("\nrefusals by reason (top 5 per op; numbers shown as N):\n");
  for (Op op : ops) {
    std::vector<std::pair<uint64_t, std::string>> top;
    for (const auto& [why, n] : stats.at(op).refusals) top.emplace_back(n, why);
    std::sort(top.rbegin(), top.rend());
    for (size_t i = 0; i < top.size() && i < 5; ++i) {
      std::printf("  %-15s %6llu x %s\n", to_string(op), (unsigned long long)top[i].first, top[i].second.c_str());
    }
  }
  std::fflush(stdout);
}

int fuzz_main(int argc, char** argv) {
  Options o;
  if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << kUsage;
    return 0;
  }
  if (std::string e = parse(argc, argv, &o); !e.empty()) {
    std::cerr << "tilelink_fuzz: " << e << "\n" << kUsage;
    return kExitUsage;
  }
  setenv("TILELINK_TUNE_CACHE", "off", 1);  // the drawn configuration, never a tuned one
  configure_cuda_environment();            // a hardware queue per stream, before the context exists
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::cout << "tilelink_fuzz: no CUDA GPU found: skipped" << std::endl;
    return kExitNoGpu;
  }
  Harness h(o.repeat);

  if (o.replay) {
    std::string draw;
    const Outcome out = run_one(h, o.op, o.replay_seed, &draw);
    std::cout << to_string(o.op) << " draw seed " << hex(o.replay_seed) << ": " << draw << "\n";
    switch (out.kind) {
      case Outcome::kRefused: std::cout << "refused: " << out.text << std::endl; return 0;
      case Outcome::kPassed: std::cout << "passed: " << out.calls << " calls" << std::endl; return 0;
      case Outcome::kFailed: std::cout << "FAIL: " << out.text << std::endl; return kExitFailure;
    }
  }

  if (!o.seeded) o.seed = std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
  std::vector<Op> ops;
  if (o.all_ops) {
    ops.assign(std::begin(kAllOps), std::end(kAllOps));
  } else {
    ops.push_back(o.op);
  }
  std::cout << "tilelink_fuzz: seed " << hex(o.seed) << ", " << o.calls << " calls, " << o.repeat
            << " per accepted draw (this run again: tilelink_fuzz --seed " << hex(o.seed) << " --calls " << o.calls
            << " --repeat " << o.repeat << (o.all_ops ? "" : std::string(" --op ") + to_string(o.op)) << ")"
            << std::endl;

  std::map<Op, OpStats> stats;
  for (Op op : ops) stats[op];
  uint64_t calls = 0, failures = 0;
  // Every draw of an op refused would never reach the calls: a bound on the draws ends such a run.
  const uint64_t max_draws = 100 * o.calls + 1000;
  const auto start = std::chrono::steady_clock::now();
  bool stopped = false;
  for (uint64_t i = 0; calls < o.calls && i < max_draws && !stopped; ++i) {
    const Op op = ops[i % ops.size()];
    const uint64_t index = i / ops.size();
    const uint64_t ds = draw_seed(o.seed, op, index);
    OpStats& s = stats[op];
    ++s.draws;
    std::string draw;
    const auto t0 = std::chrono::steady_clock::now();
    Outcome out;
    try {
      out = run_one(h, op, ds, &draw);
    } catch (const std::exception& e) {
      // A CUDA error or a timeout: the context may be gone, nothing more can run.
      out = failure(std::string("exception (the run stops): ") + e.what(), 0);
      stopped = true;
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    s.calls += out.calls;
    calls += out.calls;
    switch (out.kind) {
      case Outcome::kRefused: ++s.refusals[reason_kind(out.text)]; break;
      case Outcome::kPassed: ++s.accepted; break;
      case Outcome::kFailed:
        if (out.accepted) ++s.accepted;
        ++s.failures;
        ++failures;
        print_failure(op, index, ds, draw, out.text, o.repeat);
        break;
    }
    if (o.verbose) {
      std::printf("%-14s draw %-6llu %s  %8.1f ms  %s%s%s\n", to_string(op), (unsigned long long)index, hex(ds).c_str(),
                  ms, out.kind == Outcome::kRefused ? "refused: " : out.kind == Outcome::kPassed ? "passed" : "FAILED",
                  out.kind == Outcome::kRefused ? out.text.c_str() : "",
                  out.kind == Outcome::kPassed ? (", " + std::to_string(out.calls) + " calls").c_str() : "");
      std::fflush(stdout);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  print_summary(ops, stats, seconds);
  if (calls < o.calls && !stopped) {
    std::cout << "tilelink_fuzz: only " << calls << " of " << o.calls << " calls after " << max_draws
              << " draws: nearly every draw was refused" << std::endl;
    return kExitFailure;
  }
  std::cout << (failures == 0 ? "tilelink_fuzz: no failure" : "tilelink_fuzz: " + std::to_string(failures) + " failure(s)")
            << (stopped ? " (the run stopped at the first exception)" : "") << std::endl;
  return failures == 0 ? 0 : kExitFailure;
}

}  // namespace
}  // namespace tilelink::fuzz

int main(int argc, char** argv) { return tilelink::fuzz::fuzz_main(argc, argv); }
