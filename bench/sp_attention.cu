// Sequence-parallel attention on virtual ranks or one rank per GPU, in one table:
//
//   attention alone      SpAttention's kernel on K/V already gathered, no waits (T_attn)
//   all-gather alone     the op's K/V all-gather (T_ag)
//   ideal                max(T_attn, T_ag)
//   non-overlapped       the all-gather, then the kernel
//   ring attention       world steps: attend to the shard held while the copy engine passes it on
//                        to the next rank, merge partial outputs by LSE
//   tilelink fused       SpAttention::run
//   tilelink auto        SpAttention::run with method auto (the tune cache's method, else the estimate's)
//
// The fused, ring and auto outputs are checked once against the non-overlapped one (bf16 tolerance).
// With `dump`, the inputs and the fused outputs are written for bench/sdpa_check.py, which
// compares them with PyTorch's scaled_dot_product_attention on the device.
#include <cuda_bf16.h>

#include <fstream>
#include <string>
#include <vector>

#include "bench/sp_attention.hpp"
#include "bench/gemm_helpers.hpp"
#include "bench/harness.hpp"
#include "bench/random.hpp"
#include "bench/sp_attention_setup.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/attention/sp_attention.hpp"

namespace tilelink::bench {

namespace {

void write_file(const std::string& path, const void* device_ptr, size_t bytes) {
  std::vector<char> host(bytes);
  TL_CUDA_CHECK(cudaMemcpy(host.data(), device_ptr, bytes, cudaMemcpyDeviceToHost));
  std::ofstream out(path, std::ios::binary);
  out.write(host.data(), static_cast<std::streamsize>(bytes));
  if (!out) throw Error("bench sp_attention: cannot write '" + path + "'");
}

}  // namespace

Table bench_sp_attention(const SpAttentionBenchOptions& o) {
  const char* where = "bench_sp_attention";
  TL_REQUIRE(o.world >= 1, where, "world", o.world, ">= 1");
  TL_REQUIRE(o.seq % o.world == 0, where, "seq", o.seq, "a multiple of the world size");
  SpAttentionSetup setup(o);
  const int w = setup.w;
  const uint32_t spr = setup.spr;
  const size_t kv_bytes = setup.kv_bytes, q_elems = setup.q_elems, lse_elems = setup.lse_elems;
  World& world = setup.world;
  SymmetricHeap& heap = setup.heap;
  SignalSet& signals = setup.signals;
  const SpAttentionArguments& args = setup.args;
  std::vector<DeviceBuffer>&q = setup.q, &out = setup.out, &lse = setup.lse;
  std::vector<DeviceBuffer> out_base, out_ring, lse_base, lse_ring;
  for (int r = 0; r < w; ++r) {
    for (auto* v : {&out_base, &out_ring}) v->emplace_back(q_elems * 2, world.device(r));
    for (auto* v : {&lse_base, &lse_ring}) v->emplace_back(lse_elems * sizeof(float), world.device(r));
  }
  SpAttentionArguments main_args = args;  // the fused op (its run(); the baselines below run the others)
  main_args.config.method = OpMethod::kFused;
  SpAttention op(world, heap, signals, main_args, "bench.sp_attention");
  // The baselines write their own outputs: ops sharing the fused op's K/V buffer and kernels.
  SpAttentionArguments base_args = args, ring_args = args;
  for (int r = 0; r < w; ++r) {
    base_args.o[r] = out_base[r].get();
    base_args.lse[r] = lse_base[r].get<float>();
    ring_args.o[r] = out_ring[r].get();
    ring_args.lse[r] = lse_ring[r].get<float>();
  }
  SpAttention base(world, heap, signals, base_args, "bench.sp_attention.base");
  SpAttention ring(world, heap, signals, ring_args, "bench.sp_attention.ring");
  // The op as a caller leaves it (method auto): the tune cache's method, else its estimate's.
  SpAttention automatic(world, heap, signals, args, "bench.sp_attention.auto");
  world.synchronize();

  auto fused = [&] { op.run(); };
  auto non_overlapped = [&] { base.run_non_overlapped(); };
  auto ring_step = [&] { ring.run_ring(); };
  check_against(world, "bench sp_attention (fused)", fused, non_overlapped, out, out_base, q_elems);
  check_against(world, "bench sp_attention (ring)", ring_step, non_overlapped, out_ring, out_base, q_elems);
  auto auto_step = [&] { automatic.run(); };
  check_against(world, "bench sp_attention (auto)", auto_step, non_overlapped, out, out_base, q_elems);
  if (!o.dump.empty()) {
    op.run();
    world.synchronize();
    std::ofstream meta(o.dump + "/meta.txt");
    meta << w << ' ' << spr << ' ' << o.q_heads << ' ' << o.kv_heads << ' ' << o.head_dim << ' ' << int(o.causal)
         << ' ' << int(o.config.layout == SeqLayout::kZigZag) << '\n';
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      const std::string rank = std::to_string(r);
      write_file(o.dump + "/q" + rank + ".bin", q[r].get(), q_elems * 2);
      write_file(o.dump + "/o" + rank + ".bin", out[r].get(), q_elems * 2);
      write_file(o.dump + "/lse" + rank + ".bin", lse[r].get(), lse_elems * sizeof(float));
    }
    world.set_device(0);
    write_file(o.dump + "/kv.bin", setup.kv.data(0), kv_bytes);  // rank 0's gathered rows: every shard
    if (!meta) throw Error("bench sp_attention: cannot write '" + o.dump + "/meta.txt'");
  }

  bool gated = true;
  const std::vector<Stats> t = repeat_interleaved(
      world, o.timing.warmup, o.timing.iters,
      {[&] { base.run_attention_only(); }, [&] { op.all_gather().run(); }, non_overlapped, ring_step, fused,
       auto_step},
      &gated);
  const Stats &t_attn = t[0], &t_ag = t[1], &t_non = t[2], &t_ring = t[3], &t_fused = t[4];
  double flop = 0;
  for (int r = 0; r < w; ++r) flop += op.flops(r);
  const SpAttentionPlan& plan = op.plan();
  GemmOpTable result("sp_attention",
                     "SP attention forward, " + ranks_phrase(w) + ": seq=" + std::to_string(o.seq) + " (" +
                         std::to_string(spr) + " per rank, " +
                         (o.config.layout == SeqLayout::kZigZag ? "zig-zag" : "contiguous") + "), q_heads=" +
                         std::to_string(o.q_heads) + " kv_heads=" + std::to_string(o.kv_heads) +
                         " head_dim=" + std::to_string(o.head_dim) + (o.causal ? ", causal" : ", non-causal") +
                         (op.config().local_first ? ", local pass first" : "") + ", bf16",
                     flop, t_attn, t_non, t_ag);
  result.table.columns[5] = {"vs_attention_alone", "vs kernel alone", 3};
  result.row("attention alone, K/V gathered (T_attn)", t_attn);
  result.row(std::string("all-gather alone, ") + to_string(op.config().comm.resource) + " (T_ag)", t_ag);
  result.ideal_row("ideal max(T_attn, T_ag)");
  result.row("non-overlapped (all-gather, then attention)", t_non);
  result.row("ring attention (copy-engine ring, LSE merge)", t_ring);
  result.row("tilelink fused (SpAttention::run)", t_fused);
  result.row(std::string("tilelink auto (ran ") + to_string(automatic.method()) + ")", t[5]);
  Table& table = result.table;
  table.notes.push_back("config: K/V chunk " + std::to_string(plan.ag.map.comm_rows) + " tokens, " +
                        std::to_string(op.attention_ctas(0)) + " attention CTAs on rank 0 (" +
                        std::to_string(world.sm_budget(0)) + " SMs in its budget), items in sections of " +
                        std::to_string(plan.section_kv_heads) + " kv heads");
  if (!op.tuned_from().empty()) {
    table.notes.push_back("config from the tune cache " + op.tuned_from() + ": " + describe(op.config()));
  }
  table.notes.push_back("check: fused, ring and auto outputs of every rank equal the non-overlapped one within bf16 "
                        "tolerance");
  table.notes.push_back(std::string("method auto ran ") + to_string(automatic.method()) + ": " + automatic.method_why());
  table.notes.push_back("time = slowest rank's CUDA-event time per call; median (min, max) of " +
                        std::to_string(t_fused.samples) + " calls after " + std::to_string(o.timing.warmup) +
                        " warm-up calls, the variants interleaved call by call");
  table.notes.push_back("TFLOP/s = 4 d x (visible query-key pairs) x q_heads over all ranks / time (causal: about half "
                        "the pairs); vs kernel alone = T_attn / time");
  if (w > 1 && !ranks_on_gpus()) table.notes.push_back("virtual ranks share one GPU: peer copies are HBM -> HBM, not NVLink");
  if (!gated) table.notes.push_back("host enqueue time is included for some rows (a call blocked the host)");
  return table;
}

}  // namespace tilelink::bench
