// Standalone collectives built from the protocols: all-gather, reduce-scatter and all-reduce over a
// World.
// They are what the overlapped ops' communication halves are made of, and the GPU tests of the
// primitives at every world size. Arguments are validated before anything is launched.
#pragma once

#include <string>
#include <vector>

#include "tilelink/comm/all_gather.hpp"
#include "tilelink/comm/all_reduce.hpp"
#include "tilelink/comm/reduce_scatter.hpp"
#include "tilelink/runtime/device_buffer.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/trace_buffer.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink {

enum class CommResource : uint32_t {
  kSm = 0,          // k CTAs per rank run the protocol
  kCopyEngine = 1,  // cudaMemcpyAsync + stream memops on the rank's comm stream
};

enum class DataPath : uint32_t {
  kLdSt = 0,  // 16-byte vector loads/stores by every thread
  kBulk = 1,  // TMA bulk copies (cp.async.bulk) through shared memory
};

const char* to_string(CommResource v);
const char* to_string(DataPath v);
const char* to_string(AgMethod v);
const char* to_string(RsMethod v);
const char* to_string(CommOrder v);

struct AllGatherConfig {
  CommResource resource = CommResource::kSm;
  AgMethod method = AgMethod::kPull;
  DataPath path = DataPath::kLdSt;
  CommOrder order = CommOrder::kFullMesh;
  uint32_t comm_rows = 128;    // rows per communication tile (signal granularity)
  uint32_t num_blocks = 0;     // SM path: CTAs per rank; 0 = min(work items, SM budget), which
                               // leaves no room for a concurrent consumer: set it when overlapping
  uint32_t threads = 512;      // SM path: threads per CTA
};

struct AllGatherArguments {
  // world * rows_per_rank rows of row_bytes each, contiguous, in the heap. Each rank's own rows
  // must be in place before run().
  const SymmetricBuffer* gathered = nullptr;
  size_t gathered_offset = 0;  // bytes into `gathered` where the tensor starts (16-byte aligned)
  uint32_t rows_per_rank = 0;
  uint32_t row_bytes = 0;
  AllGatherConfig config;
  // Per rank, or empty: the rank's own rows_per_rank rows on its device, row_bytes apart (16-byte
  // aligned), anywhere -- a framework's tensor outside the heap. Each call then copies them into
  // the rank's own rows of `gathered` itself, as its first work, one communication tile at a time,
  // each tile's channel set once it has landed, so the rank's consumers start on the first tile
  // instead of after a copy of the whole shard. On SMs, pulling peers too, and pushing ranks send
  // their own tiles straight from here; the copy engine's peers start after its last own tile (its
  // entry-barrier arrival follows the copies; its tiles are large: auto_comm_rows). The copy engine's
  // copies within a device run on SMs (all_gather_policy::check_own_rows_room). Empty: the own rows
  // are in place before run(). set_own_rows repoints it per call.
  std::vector<const void*> own_rows;
};

class AllGather {
 public:
  // Validates (throws InvalidArgument with the reason) and claims a signal slice named `name`.
  AllGather(const World& world, SymmetricHeap& heap, SignalSet& signals,
            const AllGatherArguments& args, const std::string& name = "all_gather");

  // "" if `args` can run on `world`, else why not (argument, value, expectation).
  static std::string can_implement(const World& world, const SymmetricHeap& heap,
                                   const AllGatherArguments& args);


  // Enqueues one call on every rank's comm stream, ordered after all work enqueued so far on the
  // rank's compute stream (consumers of the previous call finish before this call overwrites
  // their input). Returns the call's epoch. A consumer kernel of rank r waits on
  // signals().device_view(r) with all_gather_wait_rows; run concurrently with the SM path, its
  // grid must fit in sm_budget(r) - num_blocks() so that every rank's blocks stay resident.
  uint64_t run();

  // run() in parts, for an op that launches its consumer first: begin_call() starts a call and
  // returns its epoch; announce(rank) and transfer(rank) then enqueue the rank's part on its comm
  // stream with no ordering of their own (the caller orders them after the previous call's
  // consumers: run() does that with World::comm_after_compute first). A process that drives
  // several ranks must announce every rank before it enqueues any rank's transfer: the copy
  // engine's transfer waits on its peers' announcements on their streams, and a stream left
  // waiting on work the host has not enqueued yet blocks the host once its queue is full (see
  // all_gather_stream_announce). The SM path announces nothing; its transfer is the kernel.
  uint64_t begin_call() { return slice_.begin_call(); }
  void announce(int rank);
  void transfer(int rank);

  // Built with own_rows: where `rank`'s own rows are for the calls enqueued from now on (read by
  // the host at each call; nothing is rebuilt). Throws InvalidArgument on a null or misaligned
  // pointer, or when the all-gather was built without own_rows.
  void set_own_rows(int rank, const void* rows);
  bool has_own_rows() const { return !args_.own_rows.empty(); }

  // One call under a consumer: per rank, the comm stream is ordered after the previous call's
  // consumers, launch(rank, epoch) enqueues the consumer on the compute stream and the rank's
  // announcement; every rank's transfer; the compute stream is joined after it. Returns the epoch.
  // The copy-engine path launches the consumer first (it runs on what is already there while the
  // host still enqueues one copy and one memop per tile), except for the announcement of own_rows
  // (announce_first()). The SM path launches its kernel first: see producer_first().
  template <class Launch>
  uint64_t run_under(Launch&& launch) {
    const uint64_t epoch = begin_call();
    for (int r : world_->local_ranks()) enqueue_before_consumers(r);
    for (int r : world_->local_ranks()) {
      world_->set_device(r);  // launch() enqueues on the rank's own device (one process, several GPUs)
      wait_started(r, world_->compute_stream(r));
      launch(r, epoch);
      enqueue_after_consumers(r);
    }
    enqueue_transfers_last();
    for (int r : world_->local_ranks()) world_->compute_after_comm(r);
    return epoch;
  }

  // The enqueue order of a call under consumers that spin on its channels, in three steps; every
  // caller that builds its own call (run_under, MoeAgGroupGemm) takes them, so the rule lives here:
  // 1. enqueue_before_consumers(r) for every local rank, before any rank's consumer: the comm
  //    stream ordered after the previous call's consumers, then the work that needs SMs and must
  //    not queue behind a spinning consumer -- the SM path's transfer (producer_first()), the
  //    copy engine's announcement of own_rows (announce_first());
  // 2. per rank: wait_started(r, consumer stream), the rank's consumers, enqueue_after_consumers(r)
  //    (the announcement where it did not go first: the copy engine's, behind its consumer, which
  //    runs on what is already there meanwhile);
  // 3. enqueue_transfers_last(): every local rank's transfer where it did not go first (every
  //    rank's announcement is enqueued before any rank's transfer: announce() says why).
  void enqueue_before_consumers(int rank);
  void enqueue_after_consumers(int rank);
  void enqueue_transfers_last();

  // Whether the transfer is a kernel that needs SMs (the SM path), and so must be enqueued before
  // any consumer that spins on its channels -- every rank's, as each rank's all-gather waits on its
  // peers'. A kernel launched behind a resident kernel that waits for it may not get SMs even where
  // the two grids fit side by side: under MPS a client at 25 % of an H100 saw its all-gather stay
  // unscheduled behind its FP8 AG+GEMM's clusters (4 processes, intermittent; MoE's gather stage
  // behind its grouped GEMM, every time). The all-gather kernel itself waits only for its peers'
  // all-gather kernels, so once it runs it completes.
  // This orders the host's enqueue. The comm stream's first command waits on the compute stream's
  // earlier work (comm_after_compute); when that work is still running, both launches become ready
  // at once and the hardware picks: 4 torch processes on one H100 under MPS had their AG+GEMM's
  // GEMM take the client's SMs and the all-gather never run (docs/DESIGN-NOTES.md). wait_started
  // closes the race.
  bool producer_first() const { return args_.config.resource == CommResource::kSm; }
  // Whether the copy engine's announcement needs SMs: with own_rows it copies the rank's rows
  // within its device, and such copies run on SMs (all_gather_policy::check_own_rows_room), and
  // its entry-barrier arrival -- which every peer's transfer waits for -- follows them on the comm
  // stream. Enqueued behind the consumer that spins on those rows, the copy may never be
  // dispatched under MPS (gpu_process_4, ProcessAgGemm ce_source: every rank's GEMM timed out
  // with "rank r had not entered this call"), as the SM all-gather behind its consumer was. So the
  // announcement goes first and the consumer waits for it (wait_started).
  bool announce_first() const {
    return args_.config.resource == CommResource::kCopyEngine && !args_.own_rows.empty();
  }
  // `stream` (the consumer's, before its launch) waits until the all-gather's SM work of this
  // call on `rank` can no longer be kept from the SMs by the consumer. SM path: every block of the
  // rank's all-gather kernel is running (AllGatherPlan::started_channel), so the consumer is
  // dispatched only beside a wholly resident all-gather; the transfer must be enqueued first. Copy
  // engine with own_rows (announce_first): the rank's own entry-barrier arrival, which follows its
  // own rows' copies, has landed in its memory; the announcement must be enqueued first. The copy
  // engine without own_rows needs no SMs before its peers' copies and waits for nothing here.
  void wait_started(int rank, cudaStream_t stream) const;

  const AllGatherPlan& plan() const { return plan_; }
  const SignalSlice& signals() const { return slice_; }
  uint32_t num_blocks() const { return num_blocks_; }

  // The SM path's blocks record their waits, copies and notifies into `trace` on every later
  // call (nullptr: off). The copy-engine path records nothing: its copies are not SM work (their
  // arrival shows as the consumers' waits ending).
  void set_trace(const TraceBuffer* trace) { trace_ = trace; }

 private:
  TraceView trace_view(int rank) const;
  const void* own_rows(int rank) const;  // nullptr: in place

  const World* world_;
  SymmetricHeap* heap_;
  AllGatherArguments args_;
  AllGatherPlan plan_;
  SignalSlice slice_;
  std::vector<void*> gathered_;  // per rank
  uint32_t num_blocks_ = 0;
  const TraceBuffer* trace_ = nullptr;
};

struct ReduceScatterConfig {
  RsMethod method = RsMethod::kPush;
  DataPath path = DataPath::kLdSt;
  uint32_t comm_rows = 64;
  uint32_t num_blocks = 0;  // CTAs per rank; 0 = min(chunks, SM budget)
  uint32_t threads = 512;
};

struct ReduceScatterArguments {
  // world * rows_per_rank rows of `cols` floats on every rank, in the heap.
  const SymmetricBuffer* partial = nullptr;
  // Per rank: rows_per_rank * cols floats of device memory on that rank's device.
  std::vector<float*> out;
  uint32_t rows_per_rank = 0;
  uint32_t cols = 0;
  ReduceScatterConfig config;
};

class ReduceScatter {
 public:
  ReduceScatter(const World& world, SymmetricHeap& heap, SignalSet& signals,
                const ReduceScatterArguments& args, const std::string& name = "reduce_scatter");
  static std::string can_implement(const World& world, const SymmetricHeap& heap,
                                   const ReduceScatterArguments& args);
  uint64_t run();

  const ReduceScatterPlan& plan() const { return plan_; }
  const SignalSlice& signals() const { return slice_; }

 private:
  const World* world_;
  SymmetricHeap* heap_;
  ReduceScatterArguments args_;
  ReduceScatterPlan plan_;
  SymmetricBuffer recv_;
  SignalSlice slice_;
  std::vector<DeviceBuffer> queues_;  // per rank: the kernel's work counter (zero between calls)
  uint32_t num_blocks_ = 0;
};

// ---- all-reduce (comm/all_reduce.hpp) ----------------------------------------------------------------

enum class AllReduceMethod : uint32_t {
  kAuto = 0,     // one-shot for small buffers (latency), two-shot for large ones (bandwidth)
  kOneShot = 1,
  kTwoShot = 2,
};
const char* to_string(AllReduceMethod v);

struct AllReduceConfig {
  AllReduceMethod method = AllReduceMethod::kAuto;
  DataPath path = DataPath::kLdSt;
  uint32_t comm_rows = 0;   // rows per chunk; 0 = two chunks per CTA of the SM budget (at least four
                            // per rank), at most 128 rows
  uint32_t num_blocks = 0;  // CTAs per rank; 0 = min(chunks, SM budget)
  uint32_t threads = 512;
};

struct AllReduceArguments {
  // rows x cols floats on every rank, in the heap: the rank's partial (in place before run()), and
  // where every rank gets the sum over ranks (in rank order 0..P-1, fp32: bit-identical everywhere).
  const SymmetricBuffer* partial = nullptr;
  const SymmetricBuffer* out = nullptr;
  uint32_t rows = 0;  // any positive count
  uint32_t cols = 0;  // a multiple of 4
  AllReduceConfig config;
};

class AllReduce {
 public:
  // Validates (InvalidArgument naming the argument; nothing launched), resolves the method and the
  // chunking, allocates the staging slots (world x rows x cols floats) and claims a signal slice.
  AllReduce(const World& world, SymmetricHeap& heap, SignalSet& signals, const AllReduceArguments& args,
            const std::string& name = "all_reduce");
  static std::string can_implement(const World& world, const SymmetricHeap& heap, const AllReduceArguments& args);
  // The method kAuto picks for `bytes` of partial per rank on `world` ranks: one-shot up to
  // kOneShotMaxBytes (or at two ranks, where both move the same), two-shot above. A rule of
  // thumb from the peers' custom all-reduces (vLLM, TensorRT-LLM), not yet measured here.
  static constexpr uint64_t kOneShotMaxBytes = 256 << 10;
  static ArMethod auto_method(int world, uint64_t bytes);
  // Enqueues one call on every local rank's comm stream, after its compute stream's work so far;
  // returns the epoch. The sum is complete on the comm stream (World::compute_after_comm joins it).
  uint64_t run();

  const AllReducePlan& plan() const { return plan_; }
  const SignalSlice& signals() const { return slice_; }
  uint32_t num_blocks() const { return num_blocks_; }

 private:
  const World* world_;
  SymmetricHeap* heap_;
  AllReduceArguments args_;
  AllReducePlan plan_;
  SymmetricBuffer recv_;
  SignalSlice slice_;
  std::vector<DeviceBuffer> queues_;  // per rank: the kernel's work counter (zero between calls)
  uint32_t num_blocks_ = 0;
};

}  // namespace tilelink
