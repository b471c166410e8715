// `tilelink launch --nproc N [--mps] -- program args...`: one process per rank on this node, the
// way torchrun starts them, for C++ programs (the tool, the process test suite, a user's binary)
// that build their world with World::from_launcher(). It makes NVSHMEM's unique id (its bootstrap
// root lives in this process until the ranks exit) and hands every child RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE and TILELINK_UNIQUE_ID. With --mps it first starts a private MPS
// control daemon (its own pipe and log folders in a temporary folder; each child's
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / N), so that several ranks on one GPU run at once instead
// of time-slicing, and stops it at the end; the GPU's settings are not touched.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tilelink/core/error.hpp"
#include "tilelink/runtime/world.hpp"
#include "tools/command.hpp"

extern char** environ;

namespace tilelink::tool {
namespace {

struct LaunchOptions {
  int nproc = 2;
  bool mps = false;
  double grace_s = 30;
  std::vector<std::string> command;
};

// `argv` with `env` over this process's environment; returns the child's pid.
pid_t spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, int stdin_fd = -1,
            bool own_group = false) {
  std::map<std::string, std::string> all;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) all[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) all[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : all) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdin_fd >= 0) posix_spawn_file_actions_adddup2(&actions, stdin_fd, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (own_group) {
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
  }
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw Error("tilelink launch: cannot start '" + argv[0] + "': " + std::strerror(rc));
  return pid;
}

// A private MPS control daemon: run in the foreground as this process's child, in a process group
// of its own (the MPS server it starts joins it), so that it can always be stopped; asked to quit
// when this object goes, and killed with its group if it does not within 10 s.
class PrivateMps {
 public:
  explicit PrivateMps(int nproc) {
    char tmpl[] = "/tmp/tilelink-mps-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw Error(std::string("tilelink launch --mps: mkdtemp: ") + std::strerror(errno));
    dir_ = tmpl;
    std::filesystem::create_directories(dir_ / "pipe");
    std::filesystem::create_directories(dir_ / "log");
    env_["CUDA_MPS_PIPE_DIRECTORY"] = (dir_ / "pipe").string();
    env_["CUDA_MPS_LOG_DIRECTORY"] = (dir_ / "log").string();
    daemon_ = spawn({"nvidia-cuda-mps-control", "-f"}, env_, -1, /*own_group=*/true);
    // Ready once its control socket exists.
    for (int i = 0; i < 200 && !std::filesystem::exists(dir_ / "pipe" / "control"); ++i) {
      int status = 0;
      if (waitpid(daemon_, &status, WNOHANG) == daemon_) {
        daemon_ = 0;
        std::filesystem::remove_all(dir_);
        throw Error("tilelink launch --mps: 'nvidia-cuda-mps-control -f' exited at once (status " +
                    std::to_string(status) + "): is MPS available to this user on this GPU?");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!std::filesystem::exists(dir_ / "pipe" / "control")) {
      kill(-daemon_, SIGKILL);
      waitpid(daemon_, nullptr, 0);
      daemon_ = 0;
      std::filesystem::remove_all(dir_);
      throw Error("tilelink launch --mps: the MPS control daemon made no control socket in " +
                  (dir_ / "pipe").string() + " within 10 s; not starting the ranks without it");
    }
    if (std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == nullptr) {
      env_["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string(100 / nproc);
    }
    // A process world needs hardware_queues_needed(1) = 3 hardware queues per process (its rank's
    // two streams and the watch stream), and MPS clients share the server's: with CUDA's default of 8 (or the 32 that
    // configure_cuda_environment() asks for) per client, 4 or more clients fail context creation
    // with "out of memory" (measured on the H200, docs/PERF.md, 2026-12-04); with 3, 4 and 8
    // clients are created every time. The user's own setting wins.
    if (std::getenv("CUDA_DEVICE_MAX_CONNECTIONS") == nullptr) env_["CUDA_DEVICE_MAX_CONNECTIONS"] = std::to_string(hardware_queues_needed(1));
    const char* pct = std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    std::cerr << "tilelink launch: private MPS control daemon (pid " << daemon_ << ") in " << dir_.string()
              << ", active thread percentage " << (pct != nullptr ? pct : env_["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
              << " per rank\n";
  }
  ~PrivateMps() {
    if (daemon_ > 0) {
      // `echo quit | nvidia-cuda-mps-control`, with this daemon's pipe folder.
      int fds[2];
      if (pipe(fds) == 0) {
        try {
          const pid_t client = spawn({"nvidia-cuda-mps-control"}, env_, fds[0]);
          close(fds[0]);
          const char quit[] = "quit\n";
          if (write(fds[1], quit, sizeof(quit) - 1) < 0) std::cerr << "tilelink launch: could not ask MPS to quit\n";
          close(fds[1]);
          if (!exits_within(client, 10)) kill(client, SIGKILL), waitpid(client, nullptr, 0);
        } catch (const std::exception& e) {
          std::cerr << e.what() << "\n";
        }
      }
      if (!exits_within(daemon_, 10)) {
        std::cerr << "tilelink launch: the MPS control daemon did not quit within 10 s; killing its process group\n";
        kill(-daemon_, SIGKILL);
        waitpid(daemon_, nullptr, 0);
      }
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  const std::map<std::string, std::string>& env() const { return env_; }

 private:
  static bool exits_within(pid_t pid, int seconds) {
    for (int i = 0; i < seconds * 20; ++i) {
      if (waitpid(pid, nullptr, WNOHANG) == pid) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  std::filesystem::path dir_;
  std::map<std::string, std::string> env_;
  pid_t daemon_ = 0;
};

// SIGINT / SIGTERM / SIGHUP to the launcher (Ctrl-C, `timeout`): the wait loop stops the ranks and
// the MPS daemon instead of leaving them behind.
volatile sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

// Each rank runs in a process group of its own, so that stopping it reaches what it started too
// (a wrapper script's program). With `reap`, also waits for them (the launcher is about to return).
void stop_ranks(const std::map<pid_t, int>& rank_of, const std::string& why, bool reap) {
  for (const auto& [p, r] : rank_of) {
    std::cerr << "tilelink launch: stopping rank " << r << " (" << why << ")\n";
    kill(-p, SIGKILL);
  }
  if (reap) {
    for (const auto& [p, r] : rank_of) waitpid(p, nullptr, 0);
  }
}

int launch(const LaunchOptions& o) {
  TL_REQUIRE(!o.command.empty(), "tilelink launch", "command", "(none)", "a program to run after '--'");
  const std::string id = make_unique_id().to_hex();
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &action, nullptr);
  std::unique_ptr<PrivateMps> mps;
  if (o.mps) mps = std::make_unique<PrivateMps>(o.nproc);
  std::map<pid_t, int> rank_of;
  try {
    for (int r = 0; r < o.nproc; ++r) {
      std::map<std::string, std::string> env = mps ? mps->env() : std::map<std::string, std::string>{};
      env["RANK"] = env["LOCAL_RANK"] = std::to_string(r);
      env["WORLD_SIZE"] = env["LOCAL_WORLD_SIZE"] = std::to_string(o.nproc);
      env["TILELINK_UNIQUE_ID"] = id;
      rank_of[spawn(o.command, env, -1, /*own_group=*/true)] = r;
    }
  } catch (...) {
    stop_ranks(rank_of, "a later rank could not be started", true);
    throw;
  }
  // Wait for every rank. After the first failure the others get `grace_s` to report (their waits
  // time out naming what they waited for), then they are stopped.
  int first_failure = 0;
  std::chrono::steady_clock::time_point failed_at;
  while (!rank_of.empty()) {
    int status = 0;
    // Only the ranks (not the MPS daemon, also a child): poll each.
    pid_t pid = 0;
    for (const auto& [p, r] : rank_of) {
      if ((pid = waitpid(p, &status, WNOHANG)) != 0) break;
    }
    if (pid < 0) {
      stop_ranks(rank_of, std::string("waitpid failed: ") + std::strerror(errno), true);
      throw Error(std::string("tilelink launch: waitpid: ") + std::strerror(errno));
    }
    if (pid == 0 && g_stop_signal != 0) {
      stop_ranks(rank_of, "the launcher got signal " + std::to_string(g_stop_signal), true);
      return 128 + g_stop_signal;  // the MPS daemon is stopped as `mps` goes
    }
    if (pid == 0) {  // all still running
      if (first_failure != 0 &&
          std::chrono::steady_clock::now() - failed_at > std::chrono::duration<double>(o.grace_s)) {
        std::ostringstream why;
        why << o.grace_s << " s after a rank failed";
        stop_ranks(rank_of, why.str(), false);  // the wait loop reaps them
        failed_at = std::chrono::steady_clock::now() + std::chrono::hours(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const auto it = rank_of.find(pid);
    if (it == rank_of.end()) continue;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0) {
      std::cerr << "tilelink launch: rank " << it->second << " exited with " << code
                << (WIFSIGNALED(status) ? " (signal " + std::to_string(WTERMSIG(status)) + ")" : std::string()) << "\n";
      if (first_failure == 0) {
        first_failure = code;
        failed_at = std::chrono::steady_clock::now();
      }
    }
    rank_of.erase(it);
  }
  return first_failure;
}

}  // namespace

void register_launch(Tool& tool) {
  auto o = std::make_shared<LaunchOptions>();
  Command& c = tool.add("launch", "run a program as N ranks of a process world on this node (one process per rank)");
  c.app->add_option("--nproc", o->nproc, "processes (ranks) to start")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxWorldSize));
  c.app->add_flag("--mps", o->mps,
                  "start a private MPS control daemon first (several ranks on one GPU run at once), quit it after");
  c.app->add_option("--grace", o->grace_s, "seconds the other ranks get after one fails, before they are stopped")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  c.app->add_option("command", o->command, "the program and its arguments, after '--'")->required();
  c.needs_gpu = [] { return false; };
  c.run = [o](const std::string&) { return launch(*o); };
}

}  // namespace tilelink::tool
