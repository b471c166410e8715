// torch.ops.tilelink.moe: the tensor-parallel MoE layer with sequence parallelism (MoeLayer) on
// torch tensors -- all-gather of the tokens + grouped GEMM (experts' fc1) -> activation -> grouped
// GEMM (fc2) + top-k weighted combine + reduce-scatter, every part overlapped.
//
// x_shard [T/P, H] bf16: this rank's tokens. topk_ids / topk_weights: the routing, as a router
// gives it -- [T/P, k] for this rank's own tokens or [T, k] for every token (the same on every
// rank; the op reads this rank's rows); the op all-gathers the routing itself; ids int32 or int64 (torch.topk's), weights fp32, bf16 or fp16
// (summed in fp32). The ids must be valid: each in [0, E), distinct within a token (as torch.topk
// gives); the device does not check them. w1 [E, 2 I/P or I/P, H] and w2 [E, H, I/P] bf16: this
// rank's slices of every expert's weights in nn.Linear's layout ("swiglu": the gate rows, then the
// up rows). Returns this rank's tokens [T/P, H] bf16:
//
//   out[t] = sum over ranks r of  sum over j of  weight[t][j] * act(x[t] w1_{e,r}^T) w2_{e,r}^T,  e = ids[t][j]
//
// with fp32 accumulation and reductions in a fixed order (the same bits call after call).
#include "torch_common.hpp"

namespace tilelink::torch_ops {
namespace {

struct MoeEntry {
  SymmetricBuffer x, recv;
  std::unique_ptr<MoeLayer> op;
};

// The routing tensor `t` (ids or weights: this rank's rows, shapes checked by the caller) on the
// group's device, as `dtype`, contiguous and 16-byte aligned (a copy when it is not).
at::Tensor routing_operand(const char* op, const char* name, const at::Tensor& t, const Group& g, at::ScalarType dtype) {
  TORCH_CHECK_VALUE(t.is_cuda(), op, ": argument '", name, "' is on ", t.device().str(),
                    ": expected a CUDA tensor on this rank's device");
  check_device(op, name, t, g);
  at::Tensor c = t.scalar_type() == dtype ? t.contiguous() : t.to(dtype).contiguous();
  if (reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 != 0) c = c.clone();  // an offset view
  return c;
}

at::Tensor moe(const at::Tensor& x_shard, const at::Tensor& topk_ids, const at::Tensor& topk_weights,
               const at::Tensor& w1, const at::Tensor& w2, const std::string& group_name,
               const std::string& activation) {
  constexpr const char* kOp = "tilelink.moe";
  return translated(kOp, [&] {
    std::lock_guard<std::mutex> lock(g_mutex);
    TORCH_CHECK_VALUE(activation == "swiglu" || activation == "gelu", kOp, ": argument 'activation' = '", activation,
                      "': expected 'swiglu' or 'gelu'");
    const bool swiglu = activation == "swiglu";
    check_matrix(kOp, "x_shard", x_shard);
    Group& g = group_of(kOp, group_name);
    check_device(kOp, "x_shard", x_shard, g);
    check_bf16(kOp, "w1", w1, 3, " (experts, 2 I/P or I/P, H)");
    check_device(kOp, "w1", w1, g);
    check_bf16(kOp, "w2", w2, 3, " (experts, H, I/P)");
    check_device(kOp, "w2", w2, g);
    const int64_t tpr = x_shard.size(0), hidden = x_shard.size(1), experts = w1.size(0), fc1_rows = w1.size(1);
    TORCH_CHECK_VALUE(tpr > 0 && hidden > 0, kOp, ": argument 'x_shard' has shape ", x_shard.sizes(),
                      ": expected no empty dimension");
    TORCH_CHECK_VALUE(hidden % 8 == 0, kOp, ": argument 'x_shard' has ", hidden,
                      " columns (H): expected a multiple of 8 (TMA needs 16-byte rows)");
    TORCH_CHECK_VALUE(experts > 0 && experts <= 1024, kOp, ": argument 'w1' has ", experts,
                      " experts (dimension 0): expected 1 to 1024");
    TORCH_CHECK_VALUE(w1.size(2) == hidden, kOp, ": argument 'w1' has shape ", w1.sizes(), ": expected [", experts,
                      ", ", swiglu ? "2 I/P" : "I/P", ", ", hidden, "] (x_shard's H columns)");
    TORCH_CHECK_VALUE(fc1_rows > 0 && (!swiglu || fc1_rows % 2 == 0), kOp, ": argument 'w1' has ", fc1_rows,
                      " rows per expert: expected ", swiglu ? "an even number (the gate rows, then the up rows)" : "at least one");
    const int64_t i_local = swiglu ? fc1_rows / 2 : fc1_rows;
    TORCH_CHECK_VALUE(i_local % 8 == 0, kOp, ": argument 'w1' has ", i_local, swiglu ? " gate rows" : " rows",
                      " per expert (I/P): expected a multiple of 8 (TMA needs 16-byte rows)");
    TORCH_CHECK_VALUE(w2.size(0) == experts && w2.size(1) == hidden && w2.size(2) == i_local, kOp,
                      ": argument 'w2' has shape ", w2.sizes(), ": expected [", experts, ", ", hidden, ", ", i_local,
                      "] (w1's experts, x_shard's H, I/P)");
    TORCH_CHECK_VALUE(topk_ids.defined() && topk_weights.defined(), kOp,
                      ": arguments 'topk_ids' and 'topk_weights': expected both defined");
    TORCH_CHECK_VALUE(topk_ids.scalar_type() == at::kInt || topk_ids.scalar_type() == at::kLong, kOp,
                      ": argument 'topk_ids' has dtype ", topk_ids.scalar_type(), ": expected torch.int32 or torch.int64");
    TORCH_CHECK_VALUE(at::isFloatingType(topk_weights.scalar_type()), kOp, ": argument 'topk_weights' has dtype ",
                      topk_weights.scalar_type(), ": expected a floating dtype (float32, bfloat16 or float16)");
    TORCH_CHECK_VALUE(topk_ids.dim() == 2, kOp, ": argument 'topk_ids' has ", topk_ids.dim(),
                      " dimensions: expected 2 (tokens, k)");
    const int64_t tokens = tpr * g.size, topk = topk_ids.size(1);
    TORCH_CHECK_VALUE(topk_ids.size(0) == tpr || topk_ids.size(0) == tokens, kOp, ": argument 'topk_ids' has ",
                      topk_ids.size(0), " rows: expected x_shard's ", tpr, " (this rank's tokens) or ", tokens,
                      " (every token of the group's ", g.size, " ranks)");
    TORCH_CHECK_VALUE(topk > 0 && topk <= experts, kOp, ": argument 'topk_ids' has ", topk,
                      " columns (k): expected 1 to the ", experts, " experts");
    TORCH_CHECK_VALUE(topk_weights.sizes() == topk_ids.sizes(), kOp, ": argument 'topk_weights' has shape ",
                      topk_weights.sizes(), ": expected topk_ids' ", topk_ids.sizes());
    TORCH_CHECK_VALUE(tokens * topk < (int64_t(1) << 31), kOp, ": arguments have ", tokens, " tokens x top-", topk,
                      ": expected fewer than 2^31 (token, expert) pairs");
    c10::cuda::CUDAGuard guard(g.device);
    const std::string shape = "(tokens per rank, hidden, intermediate / P, experts, top-k) = (" + std::to_string(tpr) +
                              ", " + std::to_string(hidden) + ", " + std::to_string(i_local) + ", " +
                              std::to_string(experts) + ", " + std::to_string(topk) + "), " + activation;
    const std::string key = std::string(kOp) + " " + shape;
    if (g.more.count(key) == 0) refuse_build_under_capture(kOp, g, shape);
    at::Tensor out = at::empty({tpr, hidden}, x_shard.options());  // first: the caller's next allocation
    // The layer takes x_shard where it is (MoeLayerArguments::x_source): copied into the gathered
    // tokens tile by tile under the all-gather, read in place at world 1.
    const at::Tensor x = aligned_rows(x_shard);
    // The layer always takes this rank's own tokens' routing and gathers the rest itself, so every
    // rank builds the same op (its heap and signals stay alike) whichever form each rank passed.
    const bool all = topk_ids.size(0) != tpr;
    at::Tensor ids = routing_operand(kOp, "topk_ids", all ? topk_ids.narrow(0, g.rank * tpr, tpr) : topk_ids, g, at::kInt);
    at::Tensor weights = routing_operand(kOp, "topk_weights",
                                         all ? topk_weights.narrow(0, g.rank * tpr, tpr) : topk_weights, g, at::kFloat);
    auto [it, fresh] = g.more.try_emplace(key);
    if (fresh) {
      try {
        auto e = std::make_shared<MoeEntry>();
        MoeLayerArguments args;
        args.tokens_per_rank = static_cast<uint32_t>(tpr);
        args.hidden = static_cast<uint32_t>(hidden);
        args.intermediate = static_cast<uint32_t>(i_local * g.size);
        args.experts = static_cast<uint32_t>(experts);
        args.topk = static_cast<uint32_t>(topk);
        args.routing = MoeRoutingScope::kOwnTokens;
        args.config.activation = swiglu ? MlpActivation::kSwiGlu : MlpActivation::kGelu;
        args.ids = own_entry<const int32_t*>(g, ids.data_ptr<int32_t>());
        args.weights = own_entry<const float*>(g, weights.data_ptr<float>());
        args.w1 = own_entry<const void*>(g, w1.data_ptr());
        args.w2 = own_entry<const void*>(g, w2.data_ptr());
        args.out = own_entry<void*>(g, out.data_ptr());
        args.x_source = own_entry<const void*>(g, x.data_ptr());
        e->x = g.heap->allocate(size_t(tokens) * hidden * 2);
        args.x = &e->x;
        if (g.size > 1) {
          e->recv = g.heap->allocate(size_t(tokens) * hidden * 2);
          args.recv = &e->recv;
        }
        e->op = std::make_unique<MoeLayer>(*g.world, *g.heap, *g.signals, args, "torch_moe");
        it->second = e;
      } catch (const std::exception& ex) {
        g.more.erase(it);
        build_failed(g, kOp, shape, g.built(), ex);
      }
    }
    MoeEntry& e = *static_cast<MoeEntry*>(it->second.get());
    e.op->set_operands(g.rank, ids.data_ptr<int32_t>(), weights.data_ptr<float>(), w1.data_ptr(), w2.data_ptr(),
                       out.data_ptr(), x.data_ptr());
    on_callers_stream(g, [&](cudaStream_t) { e.op->run(); });
    return out;
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tilelink, m) {
  m.def("moe(Tensor x_shard, Tensor topk_ids, Tensor topk_weights, Tensor w1, Tensor w2, str group_name, "
        "str activation=\"swiglu\") -> Tensor");
}
// CPU too: a CPU tensor reaches the argument check and gets its ValueError, not a dispatch error.
TORCH_LIBRARY_IMPL(tilelink, CUDA, m) { m.impl("moe", &moe); }
TORCH_LIBRARY_IMPL(tilelink, CPU, m) { m.impl("moe", &moe); }

}  // namespace tilelink::torch_ops
