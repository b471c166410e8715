// The tool's commands, the way the CUTLASS profiler lays out its operations: main.cpp holds the
// table of registrations, each op's file (tool_<op>.cpp) registers that op's subcommands of the
// verbs -- bench, tune, trace, plan -- with what runs them, and main runs the one given.
#pragma once

#include <CLI/CLI.hpp>

#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tools/options.hpp"

namespace tilelink::tool {

// A leaf command (`tilelink bench ag_gemm`): its parser and what runs it.
struct Command {
  CLI::App* app = nullptr;
  // Runs the parsed command; `line` is the command line as typed (the JSON files' meta), empty
  // for a command that needs no GPU. Returns the exit status.
  std::function<int(const std::string& line)> run;
  // Whether the parsed command needs a GPU (plan never does, tune not with --dry-run).
  std::function<bool()> needs_gpu = [] { return true; };
  // Its --seed, drawn (Seed::resolve) before it runs on a GPU; none when value is null.
  Seed seed;
};

// What the registrations add their commands to.
class Tool {
 public:
  explicit Tool(CLI::App& app) : app_(&app) {}

  CLI::App& app() { return *app_; }
  // A command directly under the tool (`tilelink info`).
  Command& add(const std::string& name, const std::string& help);
  // A command under a verb ("bench", "tune", "trace", "plan"); the verb's own subcommand is made
  // on first use, in the order of the help.
  Command& add(const std::string& verb, const std::string& name, const std::string& help);

  // After parsing: the command given, or nullptr (then usage() says what to write).
  const Command* parsed() const;
  // The help of the verb given without a command, or of the tool.
  std::string usage() const;

 private:
  CLI::App* verb(const std::string& name);

  CLI::App* app_;
  std::vector<std::pair<std::string, CLI::App*>> verbs_;
  std::deque<Command> commands_;  // stable addresses: the registrations keep references
};

// Each registration, register_<name>(Tool&), is defined by its file tool_<name>.cpp and listed
// once in main.cpp's table (TILELINK_TOOL_REGISTRATIONS), which also declares it.

}  // namespace tilelink::tool
