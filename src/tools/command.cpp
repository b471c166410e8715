#include "tools/command.hpp"


namespace tilelink::tool {
namespace {

struct Verb {
  const char* name;
  const char* help;
};

constexpr Verb kVerbs[] = {
    {"bench", "run benchmarks"},
    {"tune", "search an op's design space on the GPUs present and store the best config"},
    {"trace", "record an op's per-tile device timeline (%globaltimer) on every rank"},
    {"plan", "predict an op's timeline from a cost model (no GPU needed)"},
};

}  // namespace

Command& Tool::add(const std::string& name, const std::string& help) {
  commands_.push_back({});
  commands_.back().app = app_->add_subcommand(name, help);
  return commands_.back();
}

Command& Tool::add(const std::string& verb_name, const std::string& name, const std::string& help) {
  CLI::App* parent = verb(verb_name);
  commands_.push_back({});
  commands_.back().app = parent->add_subcommand(name, help);
  return commands_.back();
}

CLI::App* Tool::verb(const std::string& name) {
  for (const auto& [n, app] : verbs_) {
    if (n == name) return app;
  }
  for (const Verb& v : kVerbs) {
    if (name == v.name) {
      CLI::App* app = app_->add_subcommand(v.name, v.help);
      app->require_subcommand(0, 1);
      verbs_.emplace_back(name, app);
      return app;
    }
  }
  throw CLI::Error("tilelink", "unknown verb '" + name + "'");  // a registration's mistake
}

const Command* Tool::parsed() const {
  for (const Command& c : commands_) {
    if (c.app->parsed()) return &c;
  }
  return nullptr;
}

std::string Tool::usage() const {
  for (const auto& [name, app] : verbs_) {
    if (app->parsed()) return app->help("tilelink");
  }
  return app_->help();
}

}  // namespace tilelink::tool
