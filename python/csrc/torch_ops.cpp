// TileLink's PyTorch operators: torch.ops.tilelink.{ag_gemm, gemm_rs, gemm_ar, gemm_ar_rmsnorm, mlp,
// sp_attention} here and moe (torch_moe.cpp) on torch tensors, over a
// process world (one process per rank, World::process) set up once per torch.distributed group by
// tilelink.init(). Loaded by the Python package (torch.ops.load_library); no pybind.
//
// A call runs on the caller's current stream as far as PyTorch can see: the op's streams wait for
// it (an event), and it waits for the op's compute stream at the end (an event); no host
// synchronisation. The first call of a shape in a group builds the op, which is collective (every
// rank of the group makes the same calls in the same order, as tensor parallelism does).
//
// Later calls may be captured in a CUDA graph (torch.cuda.graph) and replayed: the ops' signal
// slices then turn replayable (epoch 1 and a device reset barrier every call; see
// SignalSlice::begin_call), so a replay never passes on an earlier call's signals. The graph
// holds the tensors' addresses, as every captured op does.
//
// Bad input raises ValueError naming the argument, before any launch.
#include <cstring>

#include "torch_common.hpp"

namespace tilelink::torch_ops {
namespace {

at::Tensor unique_id() {
  return translated("tilelink._unique_id", [] {
    const UniqueId id = make_unique_id();
    at::Tensor t = at::empty({static_cast<int64_t>(id.bytes.size())}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(t.data_ptr(), id.bytes.data(), id.bytes.size());
    return t;
  });
}

void init(const at::Tensor& id_tensor, int64_t rank, int64_t world_size, int64_t device, const std::string& group_name,
          int64_t heap_bytes) {
  translated("tilelink.init", [&] {
    std::lock_guard<std::mutex> lock(g_mutex);
    TORCH_CHECK_VALUE(groups().count(group_name) == 0, "tilelink.init: group '", group_name,
                      "' is already initialised in this process");
    UniqueId id;
    TORCH_CHECK_VALUE(id_tensor.device().is_cpu() && id_tensor.scalar_type() == at::kByte &&
                          id_tensor.numel() == static_cast<int64_t>(id.bytes.size()),
                      "tilelink.init: argument 'unique_id': expected ", id.bytes.size(), " uint8 on the CPU");
    TORCH_CHECK_VALUE(heap_bytes > 0, "tilelink.init: argument 'heap_bytes' = ", heap_bytes, ": expected > 0");
    std::memcpy(id.bytes.data(), id_tensor.contiguous().data_ptr(), id.bytes.size());
    auto g = std::make_unique<Group>();
    g->rank = static_cast<int>(rank);
    g->size = static_cast<int>(world_size);
    g->device = static_cast<int>(device);
    c10::cuda::CUDAGuard guard(g->device);
    g->world = std::make_unique<World>(World::process(ProcessRank{g->rank, g->size, g->device}, id));
    g->heap = std::make_unique<SymmetricHeap>(*g->world, static_cast<size_t>(heap_bytes));
    g->signals = std::make_unique<SignalSet>(*g->heap, 1 << 16);
    TL_CUDA_CHECK(cudaEventCreateWithFlags(&g->caller_ready, cudaEventDisableTiming));
    TL_CUDA_CHECK(cudaEventCreateWithFlags(&g->op_done, cudaEventDisableTiming));
    groups()[group_name] = std::move(g);
  });
}

// Waits for this rank's TileLink work in the group (its streams). A wait that never completed --
// a rank that stopped calling, or never joined -- is raised as its TimeoutError (op, rank, tile,
// channel), where torch.cuda.synchronize would only see that a kernel trapped.
void synchronize(const std::string& group_name) {
  translated("tilelink.synchronize", [&] {
    Group* g = nullptr;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      g = &group_of("tilelink.synchronize", group_name);
    }
    // Waits without the lock (other threads' ops go on); groups are never destroyed.
    c10::cuda::CUDAGuard guard(g->device);
    g->world->synchronize();
  });
}

// How the group's world reaches its peers: "load_store" (every peer's memory mapped: one node) or
// "put_signal" (NVSHMEM's puts and signals: a group across nodes, or TILELINK_TRANSPORT=put_signal).
std::string transport(const std::string& group_name) {
  return translated("tilelink.transport", [&] {
    std::lock_guard<std::mutex> lock(g_mutex);
    return std::string(to_string(group_of("tilelink.transport", group_name).world->transport()));
  });
}

// x_shard: this rank's rows of A (M/P x K); weight: this rank's N x K slice (nn.Linear's layout).
// Returns the M x N product of the gathered A with the weight.
at::Tensor ag_gemm(const at::Tensor& x_shard, const at::Tensor& weight, const std::string& group_name) {
  constexpr const char* kOp = "tilelink.ag_gemm";
  return translated(kOp, [&] {
    std::lock_guard<std::mutex> lock(g_mutex);
    Group& g = checked_operands(kOp, "x_shard", x_shard, weight, group_name);
    const int64_t m_per_rank = x_shard.size(0), k = x_shard.size(1), n = weight.size(0);
    c10::cuda::CUDAGuard guard(g.device);
    const at::Tensor x = aligned_rows(x_shard);
    const std::string shape = "(m_per_rank, n, k) = (" + std::to_string(m_per_rank) + ", " + std::to_string(n) + ", " +
                              std::to_string(k) + ")";
    if (g.ag.count(Group::Shape{m_per_rank, n, k}) == 0) refuse_build_under_capture(kOp, g, shape);
    at::Tensor out = at::empty({m_per_rank * g.size, n}, x_shard.options());
    auto [it, fresh] = g.ag.try_emplace({m_per_rank, n, k});
    Group::Ag& e = it->second;
    if (fresh) {
      try {
        const size_t a_bytes = size_t(m_per_rank) * g.size * k * 2;
        AgGemmArguments args;
        args.m_per_rank = static_cast<uint32_t>(m_per_rank);
        args.n = static_cast<uint32_t>(n);
        args.k = static_cast<uint32_t>(k);
        args.b = own_entry<const void*>(g, weight.data_ptr());
        args.c = own_entry<void*>(g, out.data_ptr());
        args.a_source = own_entry<const void*>(g, x.data_ptr());
        e.gathered = g.heap->allocate(a_bytes);
        args.a = &e.gathered;
        e.op = std::make_unique<AgGemm>(*g.world, *g.heap, *g.signals, args, "torch_ag_gemm");
      } catch (const std::exception& ex) {
        g.ag.erase(it);
        build_failed(g, kOp, shape, g.built(), ex);
      }
    }
    // The op copies x into its symmetric rows itself, tile by tile under the GEMM (a_source).
    e.op->set_operands(g.rank, weight.data_ptr(), out.data_ptr(), x.data_ptr());
    on_callers_stream(g, [&](cudaStream_t) { e.op->run(); });
    return out;
  });
}

// x: this rank's M x K slice of the inner dimension; weight: N x K. Returns this rank's M/P rows of
// the sum over ranks of x @ weight^T.
at::Tensor gemm_rs(const at::Tensor& x, const at::Tensor& weight, const std::string& group_name) {
  constexpr const char* kOp = "tilelink.gemm_rs";
  return translated(kOp, [&] {
    std::lock_guard<std::mutex> lock(g_mutex);
    Group& g = checked_operands(kOp, "x", x, weight, group_name);
    const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
    TORCH_CHECK_VALUE(m > 0 && m % g.size == 0, kOp, ": argument 'x' has ", m, " rows: expected a positive multiple of the group's ",
                      g.size, " ranks (equal output blocks, as reduce_scatter_tensor)");
    c10::cuda::CUDAGuard guard(g.device);
    const std::string shape =
        "(m, n, k) = (" + std::to_string(m) + ", " + std::to_string(n) + ", " + std::to_string(k) + ")";
    if (g.rs.count(Group::Shape{m, n, k}) == 0) refuse_build_under_capture(kOp, g, shape);
    at::Tensor out = at::empty({m / g.size, n}, x.options());
    auto [it, fresh] = g.rs.try_emplace({m, n, k});
    Group::Rs& e = it->second;
    if (fresh) {
      try {
        GemmRsArguments args;
        args.m = static_cast<uint32_t>(m);
        args.n = static_cast<uint32_t>(n);
        args.k = static_cast<uint32_t>(k);
        const bool needs_recv = process_scatter(g, args.config);
        args.a = own_entry<const void*>(g, x.data_ptr());
        args.b = own_entry<const void*>(g, weight.data_ptr());
        args.out = own_entry<void*>(g, out.data_ptr());
        e.partial = g.heap->allocate(size_t(m) * n * 2);
        args.partial = &e.partial;
        if (needs_recv) {
          e.recv = g.heap->allocate(size_t(m) * n * 2);
          args.recv = &e.recv;
        }
        e.op = std::make_unique<GemmRs>(*g.world, *g.heap, *g.signals, args, "torch_gemm_rs");
      } catch (const std::exception& ex) {
        g.rs.erase(it);
        build_failed(g, kOp, shape, g.built(), ex);
      }
    }
    e.op->set_operands(g.rank, x.data_ptr(), weight.data_ptr(), out.data_ptr());
    on_callers_stream(g, [&](cudaStream_t) { e.op->run(); });
    return out;
  });
}

// x: this rank's M x K slice of the inner dimension (any M); weight: N x K. Returns the sum over
// ranks of x @ weight^T (M x N, the same bits on every rank): the row-parallel linear layer of
// decode with its all-reduce. With `residual` (M x N) and `norm_weight` (N): h = sum + residual and
// RMSNorm(h) * norm_weight, returned as (normed, h) -- the decode layer boundary.
std::tuple<at::Tensor, at::Tensor> gemm_ar_impl(const char* op_name, const at::Tensor& x, const at::Tensor& weight,
                                                const std::string& group_name, const at::Tensor* residual,
                                                const at::Tensor* norm_weight, double eps) {
  return translated(op_name, [&] {
    std::lock_guard<std::mutex> lock(g_mutex);
    Group& g = checked_operands(op_name, "x", x, weight, group_name);
    const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
    const bool norm = residual != nullptr;
    if (norm) {
      check_bf16(op_name, "residual", *residual, 2, " (M x N)");
      TORCH_CHECK_VALUE(residual->size(0) == m && residual->size(1) == n, op_name, ": argument 'residual' has shape ",
                        residual->sizes(), ": expected [", m, ", ", n, "] (x's rows, weight's rows)");
      check_bf16(op_name, "norm_weight", *norm_weight, 1, " (N)");
      TORCH_CHECK_VALUE(norm_weight->size(0) == n, op_name, ": argument 'norm_weight' has ", norm_weight->size(0),
                        " elements: expected weight's ", n, " rows");
      TORCH_CHECK_VALUE(eps > 0, op_name, ": argument 'eps' = ", eps, ": expected a positive value");
      check_device(op_name, "residual", *residual, g);
      check_device(op_name, "norm_weight", *norm_weight, g);
    }
    c10::cuda::CUDAGuard guard(g.device);
    const std::string shape = "(m, n, k) = (" + std::to_string(m) + ", " + std::to_string(n) + ", " +
                              std::to_string(k) + ")" + (norm ? " with RMSNorm" : "");
    const Group::ArShape key{m, n, k, norm};
    if (g.ar.count(key) == 0) refuse_build_under_capture(op_name, g, shape);
    at::Tensor out = at::empty({m, n}, x.options());
    at::Tensor h = norm ? at::empty({m, n}, x.options()) : at::Tensor();
    auto [it, fresh] = g.ar.try_emplace(key);
    if (fresh) {
      try {
        GemmArArguments args;
        args.m = static_cast<uint32_t>(m);
        args.n = static_cast<uint32_t>(n);
        args.k = static_cast<uint32_t>(k);
        args.a = own_entry<const void*>(g, x.data_ptr());
        args.b = own_entry<const void*>(g, weight.data_ptr());
        args.out = own_entry<void*>(g, out.data_ptr());
        if (norm) {
          args.residual = own_entry<const void*>(g, residual->data_ptr());
          args.residual_out = own_entry<void*>(g, h.data_ptr());
          args.norm_weight = own_entry<const void*>(g, norm_weight->data_ptr());
          args.eps = static_cast<float>(eps);
        }
        it->second = std::make_unique<GemmAr>(*g.world, *g.heap, *g.signals, args, "torch_gemm_ar");
      } catch (const std::exception& ex) {
        g.ar.erase(it);
        build_failed(g, op_name, shape, g.built(), ex);
      }
    }
    GemmAr& op = *it->second;
    op.set_operands(g.rank, x.data_ptr(), weight.data_ptr(), out.data_ptr(), norm ? residual->data_ptr() : nullptr,
                    norm ? h.data_ptr() : nullptr, norm ? norm_weight->data_ptr() : nullptr);
    on_callers_stream(g, [&](cudaStream_t) { op.run(); });
    return std::make_tuple(out, h);
  });
}

at::Tensor gemm_ar(const at::Tensor& x, const at::Tensor& weight, const std::string& group_name) {
  return std::get<0>(gemm_ar_impl("tilelink.gemm_ar", x, weight, group_name, nullptr, nullptr, 0.0));
}

std::tuple<at::Tensor, at::Tensor> gemm_ar_rmsnorm(const at::Tensor& x, const at::Tensor& weight,
                                                   const at::Tensor& residual, const at::Tensor& norm_weight,
                                                   const std::string& group_name, double eps) {
  return gemm_ar_impl("tilelink.gemm_ar_rmsnorm", x, weight, group_name, &residual, &norm_weight, eps);
}

// x_shard: this rank's M/P x H tokens; w1: this rank's fc1 rows, (2 I/P) x H for "swiglu" (the
// gate rows, then the up rows) or I/P x H for "gelu"; w2: this rank's fc2 slice, H x I/P (both in
// nn.Linear's layout). Returns this rank's M/P rows of sum_r act(allgather(x) w1_r^T) w2_r^T: the
// tensor-parallel MLP block with sequence parallelism (AG+GEMM -> activation -> GEMM+RS).
at::Tensor mlp(const at::Tensor& x_shard, const at::Tensor& w1, const at::Tensor& w2, const std::string& group_name,
               const std::string& activation) {
  constexpr const char* kOp = "tilelink.mlp";
  return translated(kOp, [&] {
    std::lock_guard<std::mutex> lock(g_mutex);
    TORCH_CHECK_VALUE(activation == "swiglu" || activation == "gelu", kOp, ": argument 'activation' = '", activation,
                      "': expected 'swiglu' or 'gelu'");
    const bool swiglu = activation == "swiglu";
    Group& g = checked_operands(kOp, "x_shard", x_shard, w1, group_name, "w1");
    check_matrix(kOp, "w2", w2);
    check_device(kOp, "w2", w2, g);
    const int64_t m_per_rank = x_shard.size(0), hidden = x_shard.size(1);
    // swiglu: w1 is the gate rows, then the up rows (a multiple of 8 rows: even).
    const int64_t i_local = swiglu ? w1.size(0) / 2 : w1.size(0);
    TORCH_CHECK_VALUE(w2.size(0) == hidden && w2.size(1) == i_local, kOp, ": argument 'w2' has shape ", w2.sizes(),
                      ": expected [", hidden, ", ", i_local, "] (H x I/P: x_shard's H columns, w1's ", i_local,
                      swiglu ? " up rows)" : " rows)");
    TORCH_CHECK_VALUE(i_local % 8 == 0, kOp, ": argument 'w2' has ", i_local,
                      " columns (I/P): expected a multiple of 8 (TMA needs 16-byte rows)");
    const int64_t m = m_per_rank * g.size;
    c10::cuda::CUDAGuard guard(g.device);
    const at::Tensor x = aligned_rows(x_shard);
    const Group::MlpShape key{m_per_rank, hidden, i_local, swiglu ? 0 : 1};
    const std::string shape = "(m_per_rank, hidden, intermediate / P) = (" + std::to_string(m_per_rank) + ", " +
                              std::to_string(hidden) + ", " + std::to_string(i_local) + "), " + activation;
    if (g.mlp.count(key) == 0) refuse_build_under_capture(kOp, g, shape);
    at::Tensor out = at::empty({m_per_rank, hidden}, x_shard.options());
    auto [it, fresh] = g.mlp.try_emplace(key);
    Group::MlpOp& e = it->second;
    if (fresh) {
      try {
        MlpArguments args;
        args.m = static_cast<uint32_t>(m);
        args.hidden = static_cast<uint32_t>(hidden);
        args.intermediate = static_cast<uint32_t>(i_local * g.size);
        args.config.activation = swiglu ? MlpActivation::kSwiGlu : MlpActivation::kGelu;
        const bool needs_recv = process_scatter(g, args.config.fc2);
        args.w1 = own_entry<const void*>(g, w1.data_ptr());
        args.w2 = own_entry<const void*>(g, w2.data_ptr());
        args.out = own_entry<void*>(g, out.data_ptr());
        args.x_source = own_entry<const void*>(g, x.data_ptr());
        e.x = g.heap->allocate(size_t(m) * hidden * 2);
        e.partial = g.heap->allocate(size_t(m) * hidden * 2);
        args.x = &e.x;
        args.partial = &e.partial;
        if (needs_recv) {
          e.recv = g.heap->allocate(size_t(m) * hidden * 2);
          args.recv = &e.recv;
        }
        e.op = std::make_unique<Mlp>(*g.world, *g.heap, *g.signals, args, "torch_mlp");
      } catch (const std::exception& ex) {
        g.mlp.erase(it);
        build_failed(g, kOp, shape, g.built(), ex);
      }
    }
    // fc1 copies x into its symmetric rows itself, tile by tile under its GEMM (x_source).
    e.op->set_operands(g.rank, w1.data_ptr(), w2.data_ptr(), out.data_ptr(), x.data_ptr());
    on_callers_stream(g, [&](cudaStream_t) { e.op->run(); });
    return out;
  });
}

// A 3-D (tokens x heads x head dim), contiguous bf16 CUDA tensor on the group's device.
void check_heads(const char* op, const char* name, const at::Tensor& t, const Group& g) {
  check_bf16(op, name, t, 3, " (tokens, heads, head_dim)");
  check_device(op, name, t, g);
}

// q: this rank's S/P x Hq x D queries; k, v: its S/P x Hkv x D keys and values, the sequence sharded
// by `layout` ("zigzag": rank r holds chunks r and 2P-1-r of 2P; "contiguous": chunk r of P).
// Returns this rank's O (S/P x Hq x D, bf16) and LSE (Hq x S/P, fp32, natural log) over every key
// of the sequence, the K/V all-gather overlapped with flash attention.
std::tuple<at::Tensor, at::Tensor> sp_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                const std::string& group_name, bool causal, const std::string& layout) {
  constexpr const char* kOp = "tilelink.sp_attention";
  return translated(kOp, [&] {
    std::lock_guard<std::mutex> lock(g_mutex);
    TORCH_CHECK_VALUE(layout == "zigzag" || layout == "contiguous", kOp, ": argument 'layout' = '", layout,
                      "': expected 'zigzag' or 'contiguous'");
    Group& g = group_of(kOp, group_name);
    check_heads(kOp, "q", q, g);
    check_heads(kOp, "k", k, g);
    check_heads(kOp, "v", v, g);
    TORCH_CHECK_VALUE(k.sizes() == v.sizes(), kOp, ": arguments 'k' and 'v' have shapes ", k.sizes(), " and ",
                      v.sizes(), ": expected the same");
    TORCH_CHECK_VALUE(q.size(0) == k.size(0) && q.size(2) == k.size(2), kOp, ": arguments 'q' and 'k' have shapes ",
                      q.sizes(), " and ", k.sizes(), ": expected the same tokens and head_dim");
    TORCH_CHECK_VALUE(k.size(1) > 0 && q.size(1) % k.size(1) == 0, kOp, ": argument 'q' has ", q.size(1),
                      " heads: expected a multiple of k's ", k.size(1), " (GQA)");
    const int64_t spr = q.size(0), q_heads = q.size(1), kv_heads = k.size(1), d = q.size(2);
    const bool zigzag = layout == "zigzag";
    c10::cuda::CUDAGuard guard(g.device);
    const Group::SpShape key{spr, q_heads, kv_heads, d, causal, zigzag};
    const std::string shape = "(tokens per rank, q heads, kv heads, head_dim) = (" + std::to_string(spr) + ", " +
                              std::to_string(q_heads) + ", " + std::to_string(kv_heads) + ", " + std::to_string(d) +
                              "), " + (causal ? "causal, " : "full, ") + layout;
    if (g.sp.count(key) == 0) refuse_build_under_capture(kOp, g, shape);
    at::Tensor o = at::empty_like(q);
    at::Tensor lse = at::empty({q_heads, spr}, q.options().dtype(at::kFloat));
    const size_t half_row = size_t(kv_heads) * d * 2;  // bytes of a token's K (or V)
    auto [it, fresh] = g.sp.try_emplace(key);
    Group::Sp& e = it->second;
    if (fresh) {
      try {
        SpAttentionArguments args;
        args.seq_per_rank = static_cast<uint32_t>(spr);
        args.q_heads = static_cast<uint32_t>(q_heads);
        args.kv_heads = static_cast<uint32_t>(kv_heads);
        args.head_dim = static_cast<uint32_t>(d);
        args.causal = causal;
        args.config.layout = zigzag ? SeqLayout::kZigZag : SeqLayout::kContiguous;
        args.q = own_entry<const void*>(g, q.data_ptr());
        args.o = own_entry<void*>(g, o.data_ptr());
        args.lse = own_entry<float*>(g, lse.data_ptr<float>());
        e.kv = g.heap->allocate(size_t(spr) * g.size * 2 * half_row);
        args.kv = &e.kv;
        e.op = std::make_unique<SpAttention>(*g.world, *g.heap, *g.signals, args, "torch_sp_attention");
      } catch (const std::exception& ex) {
        g.sp.erase(it);
        build_failed(g, kOp, shape, g.built(), ex);
      }
    }
    e.op->set_operands(g.rank, q.data_ptr(), o.data_ptr(), lse.data_ptr<float>());
    on_callers_stream(g, [&](cudaStream_t compute) {
      // This rank's K/V rows [K | V] into its slot of the gathered buffer.
      char* slot = static_cast<char*>(e.kv.data(g.rank)) + size_t(g.rank) * spr * 2 * half_row;
      TL_CUDA_CHECK(cudaMemcpy2DAsync(slot, 2 * half_row, k.data_ptr(), half_row, half_row, spr,
                                      cudaMemcpyDeviceToDevice, compute));
      TL_CUDA_CHECK(cudaMemcpy2DAsync(slot + half_row, 2 * half_row, v.data_ptr(), half_row, half_row, spr,
                                      cudaMemcpyDeviceToDevice, compute));
      e.op->run();
    });
    return std::make_tuple(o, lse);
  });
}

}  // namespace

TORCH_LIBRARY(tilelink, m) {
  m.def("_unique_id() -> Tensor");
  m.def("_init(Tensor unique_id, int rank, int world_size, int device, str group_name, int heap_bytes) -> ()");
  m.def("_synchronize(str group_name) -> ()");
  m.def("_transport(str group_name) -> str");
  m.def("ag_gemm(Tensor x_shard, Tensor weight, str group_name) -> Tensor");
  m.def("gemm_rs(Tensor x, Tensor weight, str group_name) -> Tensor");
  m.def("gemm_ar(Tensor x, Tensor weight, str group_name) -> Tensor");
  m.def("gemm_ar_rmsnorm(Tensor x, Tensor weight, Tensor residual, Tensor norm_weight, str group_name, "
        "float eps=1e-06) -> (Tensor, Tensor)");
  m.def("mlp(Tensor x_shard, Tensor w1, Tensor w2, str group_name, str activation=\"swiglu\") -> Tensor");
  m.def("sp_attention(Tensor q, Tensor k, Tensor v, str group_name, bool causal=True, str layout=\"zigzag\") "
        "-> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(tilelink, CompositeExplicitAutograd, m) {
  m.impl("_unique_id", &unique_id);
  m.impl("_init", &init);
  m.impl("_synchronize", &synchronize);
  m.impl("_transport", &transport);
}

// CPU too: a CPU tensor reaches the argument check and gets its ValueError, not a dispatch error.
TORCH_LIBRARY_IMPL(tilelink, CUDA, m) {
  m.impl("ag_gemm", &ag_gemm);
  m.impl("gemm_rs", &gemm_rs);
  m.impl("gemm_ar", &gemm_ar);
  m.impl("gemm_ar_rmsnorm", &gemm_ar_rmsnorm);
  m.impl("mlp", &mlp);
  m.impl("sp_attention", &sp_attention);
}
TORCH_LIBRARY_IMPL(tilelink, CPU, m) {
  m.impl("ag_gemm", &ag_gemm);
  m.impl("gemm_rs", &gemm_rs);
  m.impl("gemm_ar", &gemm_ar);
  m.impl("gemm_ar_rmsnorm", &gemm_ar_rmsnorm);
  m.impl("mlp", &mlp);
  m.impl("sp_attention", &sp_attention);
}

}  // namespace tilelink::torch_ops
