#include "tilelink/runtime/world.hpp"

#include "core/driver.hpp"
#include "runtime/nvshmem_backend.hpp"
#include "runtime/torchrun_store.hpp"
#include "runtime/world_barrier.hpp"
#include "runtime/world_transport.hpp"
#include "tilelink/runtime/device_buffer.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdlib>
#include <string>
#include <thread>

namespace tilelink {

struct World::Impl {
  WorldMode mode = WorldMode::kVirtual;
  Transport transport = Transport::kLoadStore;
  std::vector<int> devices;  // per rank (-1: a rank of another process)
  std::vector<int> local;    // the ranks this process drives
  std::vector<int> sm_budget;
  std::vector<int> num_sms;
  std::vector<cudaStream_t> compute;
  std::vector<cudaStream_t> comm;
  std::vector<cudaEvent_t> compute_done;
  std::vector<cudaEvent_t> comm_done;
  std::vector<cudaStream_t> watch;  // per rank (shared by ranks of one device): stall diagnostics
  std::unique_ptr<ErrorChannel> errors;
  // Process worlds: World::barrier's slot arrays (NVSHMEM symmetric memory, one word per rank), the
  // device table of every rank's array, and the count of barriers this process has entered.
  uint64_t* barrier_slots = nullptr;
  uint64_t** barrier_peers = nullptr;
  uint64_t barrier_passes = 0;
  SignalView barrier_view;  // the slots as the barrier kernel sees them (its own bound)
  bool maps_every_peer = true;  // nvshmem_ptr mapped every peer's slots into this process

  // Under put_signal no peer is reached by load/store: the barrier's table keeps this rank's own
  // slots only (the heap and signal sets do the same), so a stray peer access faults at once.
  void unmap_barrier_peers(int rank, int size) {
    std::vector<uint64_t*> peers(static_cast<size_t>(size), nullptr);
    peers[static_cast<size_t>(rank)] = barrier_slots;
    TL_CUDA_CHECK(cudaMemcpy(barrier_peers, peers.data(), sizeof(uint64_t*) * peers.size(), cudaMemcpyHostToDevice));
  }

  // The first local rank on `r`'s device (it owns the device's watch stream).
  int first_on_device(int r) const {
    for (int l : local) {
      if (devices[static_cast<size_t>(l)] == devices[static_cast<size_t>(r)]) return l;
    }
    return r;
  }

  // Streams and events of the local ranks; the entries of other processes' ranks stay null.
  void create_streams() {
    const size_t n = devices.size();
    compute.assign(n, nullptr);
    comm.assign(n, nullptr);
    compute_done.assign(n, nullptr);
    comm_done.assign(n, nullptr);
    watch.assign(n, nullptr);
    for (int r : local) {
      TL_CUDA_CHECK(cudaSetDevice(devices[r]));
      int least = 0, greatest = 0;
      TL_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      TL_CUDA_CHECK(cudaStreamCreateWithPriority(&compute[r], cudaStreamNonBlocking, least));
      TL_CUDA_CHECK(cudaStreamCreateWithPriority(&comm[r], cudaStreamNonBlocking, greatest));
      TL_CUDA_CHECK(cudaEventCreateWithFlags(&compute_done[r], cudaEventDisableTiming));
      TL_CUDA_CHECK(cudaEventCreateWithFlags(&comm_done[r], cudaEventDisableTiming));
    }
    // Made now, not during a stall: a stream created then could land on a blocked queue.
    for (int r : local) {
      const int first = first_on_device(r);
      if (first < r) {
        watch[r] = watch[first];
        continue;
      }
      TL_CUDA_CHECK(cudaSetDevice(devices[r]));
      TL_CUDA_CHECK(cudaStreamCreateWithFlags(&watch[r], cudaStreamNonBlocking));
    }
  }

  ~Impl() {
    // Destructors do not throw; after a trap these calls fail and there is nothing to do.
    for (int r : local) {
      if (static_cast<size_t>(r) >= compute.size()) continue;
      cudaSetDevice(devices[r]);
      if (compute[r] != nullptr) cudaStreamDestroy(compute[r]);
      if (comm[r] != nullptr) cudaStreamDestroy(comm[r]);
      if (compute_done[r] != nullptr) cudaEventDestroy(compute_done[r]);
      if (comm_done[r] != nullptr) cudaEventDestroy(comm_done[r]);
      if (watch[r] != nullptr && first_on_device(r) == r) cudaStreamDestroy(watch[r]);
    }
    if (barrier_peers != nullptr) cudaFree(barrier_peers);
    // barrier_slots stays allocated (world-size words) until the process exits, like NVSHMEM
    // itself: nvshmem_free is collective, and a World destroyed after a barrier timed out, or at
    // the exit of a process whose peer died, would wait there for ranks that will never come.
  }

  // World::barrier's state (process worlds; collective: the same allocation in every process).
  void create_barrier(int rank, int size, int device, uint64_t timeout_ns) {
    const size_t bytes = sizeof(uint64_t) * static_cast<size_t>(size);
    barrier_slots = static_cast<uint64_t*>(
        detail::nvshmem::malloc(bytes, "World::barrier's slots (rank " + std::to_string(rank) + ")"));
    TL_CUDA_CHECK(cudaMemset(barrier_slots, 0, bytes));
    std::vector<uint64_t*> peers(static_cast<size_t>(size));
    for (int p = 0; p < size; ++p) {
      peers[p] = static_cast<uint64_t*>(p == rank ? barrier_slots : detail::nvshmem::peer_pointer(barrier_slots, p));
      maps_every_peer = maps_every_peer && peers[p] != nullptr;
    }
    barrier_peers = static_cast<uint64_t**>(device_malloc(
        sizeof(uint64_t*) * static_cast<size_t>(size), device, "World::barrier's peer table (rank " + std::to_string(rank) + ")"));
    TL_CUDA_CHECK(cudaMemcpy(barrier_peers, peers.data(), sizeof(uint64_t*) * peers.size(), cudaMemcpyHostToDevice));
    barrier_view.peer_channels = barrier_peers;
    barrier_view.local_channels = barrier_slots;
    barrier_view.epoch = 1;
    barrier_view.num_channels = static_cast<uint32_t>(size);
    barrier_view.rank = rank;
    barrier_view.world = size;
    barrier_view.scope = MemScope::kSys;
    barrier_view.op_id = errors->register_op("World::barrier");
    barrier_view.errors = errors->view();
    barrier_view.errors.timeout_ns = timeout_ns;
    // Every rank's slots are zero before any rank arrives (NVSHMEM's own barrier, once).
    TL_CUDA_CHECK(cudaDeviceSynchronize());
    detail::nvshmem::barrier_all();
  }
};

namespace {

uint64_t timeout_from_env(uint64_t fallback, const char* variable = "TILELINK_WAIT_TIMEOUT_MS") {
  if (const char* ms = std::getenv(variable)) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(ms, &end, 10);
    TL_REQUIRE(end != ms && *end == '\0', "World", variable, ms, "a whole number of milliseconds");
    return v * 1'000'000ull;
  }
  return fallback;
}

constexpr int kMaxHardwareQueues = 32;
constexpr int kDefaultHardwareQueues = 8;

bool primary_context_active(int device) {
  using DeviceGet = CUresult (*)(CUdevice*, int);
  using PrimaryCtxGetState = CUresult (*)(CUdevice, unsigned int*, int*);
  static const auto device_get = detail::driver_entry_point<DeviceGet>("cuDeviceGet");
  static const auto get_state = detail::driver_entry_point<PrimaryCtxGetState>("cuDevicePrimaryCtxGetState");
  CUdevice dev{};
  TL_CU_CHECK(device_get(&dev, device));
  unsigned int flags = 0;
  int active = 0;
  TL_CU_CHECK(get_state(dev, &flags, &active));
  return active != 0;
}

// The hardware queues a context created now gets, given the environment.
int hardware_queues() {
  const char* env = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (env == nullptr) return kDefaultHardwareQueues;
  const int q = std::atoi(env);
  return q < 1 ? kDefaultHardwareQueues : std::min(q, kMaxHardwareQueues);
}

// `streams` streams of one World on `device` each need a queue of their own (see world.hpp).
void require_hardware_queues(const char* where, int device, int streams, int ranks_on_device) {
  configure_cuda_environment();
  const bool context_exists = primary_context_active(device);
  const int queues = context_exists && std::getenv("CUDA_DEVICE_MAX_CONNECTIONS") == nullptr
                         ? kDefaultHardwareQueues
                         : hardware_queues();
  if (streams <= queues) return;
  detail::throw_invalid_argument(
      where, "world_size", ranks_on_device,
      "at most " + std::to_string((queues - 1) / 2) + " ranks on device " + std::to_string(device) +
          ": each rank's two streams and the world's watch stream need a hardware queue of their " +
          "own, and the device has " + std::to_string(queues) +
          " (CUDA_DEVICE_MAX_CONNECTIONS; set it to at most 32 before the first CUDA call, e.g. " +
          "with tilelink::configure_cuda_environment())");
}

int device_count() {
  int n = 0;
  TL_CUDA_CHECK(cudaGetDeviceCount(&n));
  return n;
}

}  // namespace

void configure_cuda_environment() { setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0); }

World::World(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
World::World(World&&) noexcept = default;
World& World::operator=(World&&) noexcept = default;
World::~World() = default;

World World::virtual_ranks(int world_size, int device, WorldOptions options) {
  detail::require_load_store("World::virtual_ranks", options);
  TL_REQUIRE(world_size >= 1 && world_size <= kMaxWorldSize, "World::virtual_ranks", "world_size",
             world_size, "1 to " + std::to_string(kMaxWorldSize) + " ranks");
  const int count = device_count();
  TL_REQUIRE(device >= 0 && device < count, "World::virtual_ranks", "device", device,
             "a device in [0, " + std::to_string(count) + ")");
  int sms = 0;
  TL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  TL_REQUIRE(world_size <= sms, "World::virtual_ranks", "world_size", world_size,
             "at most one rank per SM (" + std::to_string(sms) + " SMs)");
  require_hardware_queues("World::virtual_ranks", device, hardware_queues_needed(world_size), world_size);

  auto w = std::make_unique<Impl>();
  w->mode = WorldMode::kVirtual;
  w->devices.assign(world_size, device);
  w->num_sms.assign(world_size, sms);
  // Equal budgets that fit together: every rank's persistent kernel can be resident at once.
  w->sm_budget.assign(world_size, sms / world_size);
  for (int r = 0; r < world_size; ++r) w->local.push_back(r);
  w->create_streams();
  w->errors = std::make_unique<ErrorChannel>(device, timeout_from_env(options.wait_timeout_ns));
  return World(std::move(w));
}

World World::multi_gpu(const std::vector<int>& devices, WorldOptions options) {
  detail::require_load_store("World::multi_gpu", options);
  const int n = static_cast<int>(devices.size());
  TL_REQUIRE(n >= 1 && n <= kMaxWorldSize, "World::multi_gpu", "devices.size()", n,
             "1 to " + std::to_string(kMaxWorldSize) + " devices");
  const int count = device_count();
  for (int i = 0; i < n; ++i) {
    TL_REQUIRE(devices[i] >= 0 && devices[i] < count, "World::multi_gpu", "devices[i]", devices[i],
               "a device in [0, " + std::to_string(count) + ")");
    for (int j = 0; j < i; ++j) {
      TL_REQUIRE(devices[i] != devices[j], "World::multi_gpu", "devices[i]", devices[i],
                 "distinct devices (use virtual_ranks for several ranks on one GPU)");
    }
  }
  for (int d : devices) require_hardware_queues("World::multi_gpu", d, hardware_queues_needed(1), 1);
  auto w = std::make_unique<Impl>();
  w->mode = WorldMode::kMultiGpu;
  w->devices = devices;
  for (int i = 0; i < n; ++i) {
    int sms = 0;
    TL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, devices[i]));
    w->num_sms.push_back(sms);
    w->sm_budget.push_back(sms);
    TL_CUDA_CHECK(cudaSetDevice(devices[i]));
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      int can = 0;
      TL_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, devices[i], devices[j]));
      if (!can) {
        throw Error("World::multi_gpu: device " + std::to_string(devices[i]) +
                    " cannot access device " + std::to_string(devices[j]) + " (no peer access)");
      }
      const cudaError_t st = cudaDeviceEnablePeerAccess(devices[j], 0);
      if (st == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();  // clear the non-sticky error
      } else {
        TL_CUDA_CHECK(st);
      }
    }
  }
  for (int r = 0; r < n; ++r) w->local.push_back(r);
  w->create_streams();
  w->errors = std::make_unique<ErrorChannel>(devices[0], timeout_from_env(options.wait_timeout_ns));
  return World(std::move(w));
}

World World::process(const ProcessRank& me, const UniqueId& id, WorldOptions options) {
  TL_REQUIRE(me.size >= 1 && me.size <= kMaxWorldSize, "World::process", "size", me.size,
             "1 to " + std::to_string(kMaxWorldSize) + " ranks");
  TL_REQUIRE(me.rank >= 0 && me.rank < me.size, "World::process", "rank", me.rank,
             "a rank in [0, " + std::to_string(me.size) + ")");
  const int count = device_count();
  TL_REQUIRE(me.device >= 0 && me.device < count, "World::process", "device", me.device,
             "a device in [0, " + std::to_string(count) + ")");
  require_hardware_queues("World::process", me.device, hardware_queues_needed(1), 1);
  TL_CUDA_CHECK(cudaSetDevice(me.device));
  const Transport requested = detail::transport_from_env(options.transport);  // a bad value: before any collective step
  detail::nvshmem::init(me.rank, me.size, id);

  int sms = 0;
  TL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, me.device));
  // Under MPS the process may use only its active-thread share of the SMs, and the device already
  // reports that share as its SM count (measured on the H200: 8 ranks at 12% each were left 1 SM
  // when the share was applied a second time), so the reported count is the budget: persistent
  // kernels sized to it stay resident next to their peers'.
  // Every process's count, gathered (one word each), so that choices read any rank's alike.
  const std::vector<uint64_t> counts =
      detail::nvshmem::all_gather_word(static_cast<uint64_t>(sms), "World::process's SM counts");
  auto w = std::make_unique<Impl>();
  w->mode = WorldMode::kProcess;
  w->devices.assign(me.size, -1);
  w->devices[me.rank] = me.device;
  for (uint64_t c : counts) w->num_sms.push_back(static_cast<int>(c));
  w->sm_budget = w->num_sms;
  w->local = {me.rank};
  w->create_streams();
  w->errors = std::make_unique<ErrorChannel>(me.device, timeout_from_env(options.wait_timeout_ns));
  w->create_barrier(me.rank, me.size, me.device, timeout_from_env(options.barrier_timeout_ns, "TILELINK_BARRIER_TIMEOUT_MS"));
  w->transport = detail::decide_transport(me.rank, requested, w->maps_every_peer);
  if (w->transport == Transport::kPutSignal) w->unmap_barrier_peers(me.rank, me.size);
  World world(std::move(w));
  detail::preload_world_barrier(world);
  return world;
}

namespace {

int env_int(const char* name, int lo, int hi) {
  const char* v = std::getenv(name);
  TL_REQUIRE(v != nullptr, "World::from_launcher", name, "unset",
             "set by the launcher (torchrun or `tilelink launch`)");
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  TL_REQUIRE(end != v && *end == '\0' && x >= lo && x <= hi, "World::from_launcher", name, std::string(v),
             "a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int>(x);
}

}  // namespace

World World::from_launcher(WorldOptions options) {
  const int size = env_int("WORLD_SIZE", 1, kMaxWorldSize);
  const int rank = env_int("RANK", 0, size - 1);
  const int local_rank = env_int("LOCAL_RANK", 0, kMaxWorldSize - 1);
  const char* hex = std::getenv("TILELINK_UNIQUE_ID");
  TL_REQUIRE(hex != nullptr || detail::under_torchrun(), "World::from_launcher", "TILELINK_UNIQUE_ID", "unset",
             "the NVSHMEM unique id as 256 hex digits (`tilelink launch` sets it), or torchrun's MASTER_ADDR and "
             "MASTER_PORT (rank 0 then hands the id over torchrun's store); from Python, tilelink.init() passes it "
             "over torch.distributed");
  // Every input checked before CUDA.
  const UniqueId id = hex != nullptr ? UniqueId::from_hex(hex, "World::from_launcher")
                                     : detail::unique_id_from_torch_store(rank, size);
  return process(ProcessRank{rank, size, local_rank % device_count()}, id, options);
}

std::string UniqueId::to_hex() const {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

UniqueId UniqueId::from_hex(const std::string& hex, const char* where) {
  auto nibble = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  UniqueId id;
  bool ok = hex.size() == 2 * id.bytes.size();
  for (size_t i = 0; ok && i < id.bytes.size(); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    ok = hi >= 0 && lo >= 0;
    id.bytes[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  TL_REQUIRE(ok, where, "unique id", hex.size() > 16 ? hex.substr(0, 16) + "..." : hex,
             std::to_string(2 * id.bytes.size()) + " hex digits");
  return id;
}

int World::size() const { return static_cast<int>(impl_->devices.size()); }
WorldMode World::mode() const { return impl_->mode; }
Transport World::transport() const { return impl_->transport; }
const std::vector<int>& World::local_ranks() const { return impl_->local; }
bool World::is_local(int rank) const {
  return std::find(impl_->local.begin(), impl_->local.end(), rank) != impl_->local.end();
}
void World::barrier() const {
  if (impl_->mode != WorldMode::kProcess) return;
  // This process's own streams first: a bounded wait that timed out traps, and NVSHMEM's barrier
  // would then meet the sticky error and exit the process naming only itself; synchronize() turns
  // it into the waiter's TimeoutError (op, rank, tile, channel).
  synchronize();
  // A bounded barrier of our own (NVSHMEM's host barrier cannot be bounded): a rank that never
  // arrives ends in a TimeoutError naming it, not in a hang.
  const int me = impl_->local.front();
  set_device(me);
  detail::launch_world_barrier(impl_->barrier_view, impl_->barrier_passes + 1, impl_->transport, impl_->compute[me]);
  ++impl_->barrier_passes;  // only once the arrival is enqueued: every process counts alike
  synchronize();
}
MemScope World::scope() const {
  return impl_->mode == WorldMode::kVirtual ? MemScope::kGpu : MemScope::kSys;
}
int World::device(int rank) const {
  check_local_rank(rank, "World::device");
  return impl_->devices[rank];
}
std::string World::check_extra_streams(int per_rank, const std::string& what) const {
  for (int r : local_ranks()) {
    const int device = impl_->devices[static_cast<size_t>(r)];
    if (impl_->first_on_device(r) < r) continue;  // device already checked
    const int ranks = static_cast<int>(std::count(impl_->devices.begin(), impl_->devices.end(), device));
    // The context exists (the world made its streams): its queue count is the one it was made with.
    const int queues = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS") == nullptr ? kDefaultHardwareQueues : hardware_queues();
    const int streams = hardware_queues_needed(ranks, per_rank);
    if (streams > queues) {
      return what + " adds " + std::to_string(per_rank) + " stream(s) per rank: " + std::to_string(ranks) +
             " ranks on device " + std::to_string(device) + " then need " + std::to_string(streams) +
             " hardware queues (" + std::to_string(2 + per_rank) + " streams per rank and the watch stream), and the " +
             "device has " + std::to_string(queues) + " (CUDA_DEVICE_MAX_CONNECTIONS): expected at most " +
             std::to_string((queues - 1) / (2 + per_rank)) + " ranks per device";
    }
  }
  return "";
}

int World::sm_budget(int rank) const {
  check_rank(rank, "World::sm_budget");
  return impl_->sm_budget[rank];
}
int World::tightest_rank() const {
  const std::vector<int>& b = impl_->sm_budget;
  return static_cast<int>(std::min_element(b.begin(), b.end()) - b.begin());
}
int World::tightest_budget() const { return sm_budget(tightest_rank()); }
uint64_t World::l2_share(int rank) const {
  check_rank(rank, "World::l2_share");
  int l2 = 0;
  // Another process's rank: the same kind of GPU as this one's (World::process assumes so).
  const int dev = impl_->devices[static_cast<size_t>(is_local(rank) ? rank : impl_->local.front())];
  TL_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  const int sharing = mode() == WorldMode::kVirtual ? size() : 1;
  return static_cast<uint64_t>(l2) / static_cast<uint64_t>(sharing);
}
int World::num_sms(int rank) const {
  check_rank(rank, "World::num_sms");
  return impl_->num_sms[rank];
}
cudaStream_t World::compute_stream(int rank) const {
  check_local_rank(rank, "World::compute_stream");
  return impl_->compute[rank];
}
cudaStream_t World::comm_stream(int rank) const {
  check_local_rank(rank, "World::comm_stream");
  return impl_->comm[rank];
}
ErrorChannel& World::errors() const { return *impl_->errors; }
cudaStream_t World::watch_stream(int rank) const {
  check_local_rank(rank, "World::watch_stream");
  return impl_->watch[rank];
}

void preload_kernel(const void* kernel) {
  cudaFuncAttributes attributes{};
  TL_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
}

void World::preload_kernel(const void* kernel) const {
  for (int r : local_ranks()) {
    set_device(r);
    tilelink::preload_kernel(kernel);
  }
}

void World::comm_after_compute(int rank) const {
  set_device(rank);
  TL_CUDA_CHECK(cudaEventRecord(impl_->compute_done[rank], impl_->compute[rank]));
  TL_CUDA_CHECK(cudaStreamWaitEvent(impl_->comm[rank], impl_->compute_done[rank], 0));
}

void World::compute_after_comm(int rank) const {
  set_device(rank);
  TL_CUDA_CHECK(cudaEventRecord(impl_->comm_done[rank], impl_->comm[rank]));
  TL_CUDA_CHECK(cudaStreamWaitEvent(impl_->compute[rank], impl_->comm_done[rank], 0));
}

void World::check_rank(int rank, const char* where) const {
  TL_REQUIRE(rank >= 0 && rank < size(), where, "rank", rank,
             "a rank in [0, " + std::to_string(size()) + ")");
}

void World::check_local_rank(int rank, const char* where) const {
  check_rank(rank, where);
  if (!is_local(rank)) {
    detail::throw_invalid_argument(where, "rank", rank,
                                   "a rank this process drives (" + std::to_string(local_ranks().front()) +
                                       "); the others belong to their own processes");
  }
}

void World::set_device(int rank) const {
  check_local_rank(rank, "World::set_device");
  TL_CUDA_CHECK(cudaSetDevice(impl_->devices[rank]));
}

namespace {

uint64_t read_u64(const World& world, int rank, const uint64_t* address) {
  world.set_device(rank);
  uint64_t value = 0;
  TL_CUDA_CHECK(cudaMemcpyAsync(&value, address, sizeof(value), cudaMemcpyDefault, world.watch_stream(rank)));
  TL_CUDA_CHECK(cudaStreamSynchronize(world.watch_stream(rank)));
  return value;
}

void write_u64(const World& world, int rank, uint64_t* address, uint64_t value) {
  world.set_device(rank);
  TL_CUDA_CHECK(cudaMemcpyAsync(address, &value, sizeof(value), cudaMemcpyDefault, world.watch_stream(rank)));
  TL_CUDA_CHECK(cudaStreamSynchronize(world.watch_stream(rank)));
}

// The first registered rank_wait on `stream` whose channel has not reached its value: the
// stream's waits complete in order, so that is where the stream stands if it is held by one.
// Each channel is read once.
std::optional<std::pair<StreamWaitRecord, uint64_t>> first_unsatisfied(const World& world, int rank,
                                                                 cudaStream_t stream) {
  std::vector<std::pair<const uint64_t*, uint64_t>> observed;
  for (const StreamWaitRecord& w : world.errors().stream_waits(stream)) {
    auto it = std::find_if(observed.begin(), observed.end(), [&](auto& o) { return o.first == w.address; });
    if (it == observed.end()) {
      observed.emplace_back(w.address, read_u64(world, rank, w.address));
      it = observed.end() - 1;
    }
    if (!epoch_reached(it->second, w.expected)) return std::make_pair(w, it->second);
  }
  return std::nullopt;
}

// Reports a stalled rank_wait: the stream is released first (the channel is set to the expected
// value) so that the process can tear down, then TimeoutError is thrown.
[[noreturn]] void report_stall(const World& world, int rank, const StreamWaitRecord& w, uint64_t observed,
                               uint64_t elapsed_ns) {
  write_u64(world, rank, const_cast<uint64_t*>(w.address), w.expected);
  world.errors().clear_stream_waits();
  ErrorRecord rec{};
  rec.state = ErrorRecord::kValid;
  rec.kind = WaitKind::kRankWait;
  rec.op_id = w.op_id;
  rec.rank = w.rank;
  rec.block = -1;
  rec.tile = -1;
  rec.channel = w.channel;
  rec.peer = w.rank;
  rec.expected = w.expected;
  rec.observed = observed;
  rec.elapsed_ns = elapsed_ns;
  world.errors().throw_timeout(rec);
}

}  // namespace

void World::synchronize() const {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const uint64_t timeout = impl_->errors->timeout_ns();
  uint64_t next_check = timeout;
  for (int r : local_ranks()) {
    for (cudaStream_t s : {impl_->comm[r], impl_->compute[r]}) {
      const uint64_t* suspect_address = nullptr;  // the first unsatisfied wait at the last check
      uint64_t suspect_expected = 0;
      for (;;) {
        const cudaError_t st = cudaStreamQuery(s);
        if (st == cudaSuccess) break;
        if (st != cudaErrorNotReady) {
          if (impl_->errors->has_device_error()) impl_->errors->throw_timeout(impl_->errors->device_record());
          TL_CUDA_CHECK(st);
        }
        const uint64_t elapsed = static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
        // Device waits bound themselves (they trap); stream memop waits need the host. A wait is
        // reported when it is still the stream's first unsatisfied one a whole timeout later.
        if (timeout != 0 && elapsed > next_check) {
          const auto now = first_unsatisfied(*this, r, s);
          if (now && now->first.address == suspect_address && now->first.expected == suspect_expected) {
            report_stall(*this, r, now->first, now->second, elapsed);
          }
          suspect_address = now ? now->first.address : nullptr;
          suspect_expected = now ? now->first.expected : 0;
          next_check = elapsed + timeout;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }
  impl_->errors->clear_stream_waits();
}

}  // namespace tilelink
