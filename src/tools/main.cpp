// tilelink: device information, benchmarks, tuning, traces and plans of TileLink's ops.
//
//   tilelink info                        devices, SMs, world mode, SM budget per rank
//   tilelink bench <op>                  time an op against its baselines on the GPUs present
//   tilelink tune <op> [--dry-run]       search an op's design space; store the best in the tune cache
//   tilelink trace <op>                  record one call's per-tile device timeline on every rank
//   tilelink plan <op>                   predict an op's timeline from a cost model (no GPU needed)
//
// Every command and option: docs/TOOL.md (generated from the help). Each op's commands live in
// its own file (tool_<op>.cpp), registered by the table below; the options they share, in
// options.hpp.
//
// Exit status: 0 success; 1 a benchmark, check or CUDA failure (message on stderr); 2 no CUDA GPU;
// 64 a bad command line.
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>
#include <string>

#include "bench/harness.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/runtime/world.hpp"
#include "tools/command.hpp"

#ifndef TILELINK_VERSION
#define TILELINK_VERSION "unknown"
#endif

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitNoGpu = 2;
constexpr int kExitUsage = 64;

}  // namespace

// The commands, in the order of the help: the tool's own, then one registration per op's file
// (tool_<name>.cpp defines register_<name>). An op's commands are one line here.
#define TILELINK_TOOL_REGISTRATIONS(X) \
  X(info)                              \
  X(launch)                            \
  X(collectives)                       \
  X(ag_gemm)                           \
  X(gemm_rs)                           \
  X(gemm_ar)                           \
  X(mlp)                               \
  X(moe)                               \
  X(sp_attention)

namespace tilelink::tool {
#define TILELINK_DECLARE_REGISTRATION(name) void register_##name(Tool& tool);
TILELINK_TOOL_REGISTRATIONS(TILELINK_DECLARE_REGISTRATION)
}  // namespace tilelink::tool

namespace {

#define TILELINK_REGISTRATION(name) tilelink::tool::register_##name,
constexpr void (*kRegistrations[])(tilelink::tool::Tool&) = {TILELINK_TOOL_REGISTRATIONS(TILELINK_REGISTRATION)};

int run(const tilelink::tool::Command& command, const std::string& line) {
  try {
    return command.run(line);
  } catch (const tilelink::TimeoutError& e) {
    std::cerr << "tilelink: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "tilelink: error: " << e.what() << "\n";
  }
  return kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"TileLink: tile-centric compute/communication overlap. Device information and benchmarks "
               "(virtual ranks on one GPU, or one rank per GPU with TILELINK_RANKS=gpus).",
               "tilelink"};
  app.set_version_flag("--version", TILELINK_VERSION);
  app.require_subcommand(0, 1);  // none: usage error below; unknown words: CLI11's "not expected"
  app.footer("Exit status: 0 ok, 1 failure, 2 no CUDA GPU, 64 bad command line.");
  tilelink::tool::Tool tool(app);
  for (auto registration : kRegistrations) registration(tool);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  const tilelink::tool::Command* command = tool.parsed();
  if (command == nullptr) {
    std::cerr << tool.usage() << "tilelink: a command is required\n";
    return kExitUsage;
  }
  // Commands without a GPU make no CUDA call and leave the environment as the user gave it: `launch`
  // hands it to its ranks, and under MPS a rank must not inherit this process's 32 hardware queues.
  if (!command->needs_gpu()) return run(*command, "");
  tilelink::configure_cuda_environment();  // before any CUDA call

  std::string line = "tilelink";
  for (int i = 1; i < argc; ++i) line += std::string(" ") + argv[i];
  if (tilelink::bench::cuda_device_count() == 0) {
    std::cerr << "tilelink: no CUDA GPU found; benchmarks need one\n";
    return kExitNoGpu;
  }
  command->seed.resolve();
  return run(*command, line);
}
