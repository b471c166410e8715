// TileLink's FP8 PyTorch operators (issue 22), on torch tensors over a tilelink.init() group:
//
//   quantize_weight(weight, scaling="row") -> (weight_e4m3, weight_scale)
//       An N x K bf16 weight (nn.Linear's layout) as torch.float8_e4m3fn and its fp32 scales:
//       tensor [1], row [N] (one per output channel), block [ceil(N/128), K/128] (DeepSeek-V3's
//       weight_scale_inv layout) -- scale = amax / 448, value = e4m3(x / scale), saturated.
//   ag_gemm_fp8(x_shard, weight, weight_scale, group_name, scaling="row") -> [M, N] bf16
//       The column-parallel linear layer in e4m3: the op quantises this rank's bf16 rows on send
//       (per token with row scaling, per 1 x 128 block with block scaling), the all-gather moves
//       the packed e4m3 rows with their scales, the GEMM multiplies them by the e4m3 weight.
//       Tensor scaling is refused (one scale for every rank's tokens would need a collective
//       amax first).
//   gemm_rs_fp8(x, weight, weight_scale, group_name, scaling="row") -> [M/P, N] bf16
//       The row-parallel linear layer in e4m3: the op quantises this rank's bf16 x (tensor scaling:
//       with its own scale), multiplies by the e4m3 weight, and reduce-scatters the bf16 partials
//       in fp32 in rank order.
//
// K must be a multiple of 16 (of 128 with block scaling). As the bf16 operators: the first call of
// a shape builds the op (collective), later calls may be captured in a CUDA graph; bad input raises
// ValueError naming the argument, before any launch.
#include "torch_common.hpp"

#include "tilelink/ops/common/fp8_quantize.hpp"

namespace tilelink::torch_ops {
namespace {

Fp8Scaling parse_scaling(const char* op, const std::string& s) {
  if (s == "tensor") return Fp8Scaling::kTensor;
  if (s == "row") return Fp8Scaling::kRow;
  if (s == "block") return Fp8Scaling::kBlock;
  TORCH_CHECK_VALUE(false, op, ": argument 'scaling' = '", s, "': expected 'tensor', 'row' or 'block'");
  return Fp8Scaling::kRow;
}

// The e4m3 weight (N x K, x's K) and its scales on the group's device; K's FP8 extent.
void check_fp8_weight(const char* op, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& scale,
                      Fp8Scaling scaling, const Group& g) {
  TORCH_CHECK_VALUE(weight.defined() && weight.is_cuda(), op, ": argument 'weight' is ",
                    weight.defined() ? "on " + weight.device().str() : std::string("undefined"),
                    ": expected a CUDA tensor on this rank's device");
  TORCH_CHECK_VALUE(weight.scalar_type() == at::kFloat8_e4m3fn, op, ": argument 'weight' has dtype ",
                    weight.scalar_type(), ": expected torch.float8_e4m3fn (tilelink.quantize_weight gives it)");
  TORCH_CHECK_VALUE(weight.dim() == 2 && weight.is_contiguous(), op, ": argument 'weight' has shape ", weight.sizes(),
                    weight.is_contiguous() ? "" : " (not contiguous)", ": expected a contiguous N x K matrix");
  TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(weight.data_ptr()) % 16 == 0, op,
                    ": argument 'weight' starts at a pointer not 16-byte aligned: expected 16-byte alignment (TMA)");
  check_device(op, "weight", weight, g);
  const int64_t n = weight.size(0), k = weight.size(1);
  TORCH_CHECK_VALUE(k == x.size(1), op, ": argument 'weight' has ", k, " columns: expected x's ", x.size(1),
                    " (weight is N x K, nn.Linear's layout)");
  TORCH_CHECK_VALUE(n > 0 && n % 8 == 0, op, ": argument 'weight' has ", n,
                    " rows (N): expected a positive multiple of 8 (TMA needs 16-byte rows of the output)");
  if (std::string e = check_fp8_extents(static_cast<uint32_t>(k), scaling); !e.empty()) {
    TORCH_CHECK_VALUE(false, op, ": ", e);
  }
  const int64_t want = static_cast<int64_t>(fp8_b_scales(static_cast<uint32_t>(n), static_cast<uint32_t>(k), scaling));
  TORCH_CHECK_VALUE(scale.defined() && scale.is_cuda() && scale.scalar_type() == at::kFloat && scale.is_contiguous(), op,
                    ": argument 'weight_scale': expected a contiguous torch.float32 CUDA tensor");
  check_device(op, "weight_scale", scale, g);
  TORCH_CHECK_VALUE(scale.numel() == want, op, ": argument 'weight_scale' has ", scale.numel(), " elements: expected ",
                    want, " for ", to_string(scaling), " scaling of a ", n, " x ", k,
                    " weight (tensor 1, row N, block ceil(N/128) x K/128)");
  TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(scale.data_ptr()) % 16 == 0, op,
                    ": argument 'weight_scale' starts at a pointer not 16-byte aligned: expected 16-byte alignment");
}

std::tuple<at::Tensor, at::Tensor> quantize_weight(const at::Tensor& weight, const std::string& scaling_name) {
  constexpr const char* kOp = "tilelink.quantize_weight";
  return translated(kOp, [&] {
    const Fp8Scaling scaling = parse_scaling(kOp, scaling_name);
    check_matrix(kOp, "weight", weight);
    const int64_t n = weight.size(0), k = weight.size(1);
    TORCH_CHECK_VALUE(n > 0 && k > 0, kOp, ": argument 'weight' has shape ", weight.sizes(), ": expected no empty dimension");
    if (std::string e = check_fp8_extents(static_cast<uint32_t>(k), scaling); !e.empty()) {
      TORCH_CHECK_VALUE(false, kOp, ": ", e);
    }
    c10::cuda::CUDAGuard guard(weight.device());
    at::Tensor w8 = at::empty({n, k}, weight.options().dtype(at::kFloat8_e4m3fn));
    std::vector<int64_t> scale_shape;
    if (scaling == Fp8Scaling::kTensor) scale_shape = {1};
    if (scaling == Fp8Scaling::kRow) scale_shape = {n};
    if (scaling == Fp8Scaling::kBlock) scale_shape = {(n + kFp8BlockN - 1) / kFp8BlockN, k / kFp8BlockK};
    at::Tensor scale = at::empty(scale_shape, weight.options().dtype(at::kFloat));
    quantize_weight_e4m3(weight.data_ptr(), static_cast<uint32_t>(n), static_cast<uint32_t>(k), scaling, w8.data_ptr(),
                         scale.data_ptr<float>(), at::cuda::getCurrentCUDAStream(weight.get_device()).stream());
    return std::make_tuple(w8, scale);
  });
}

struct AgFp8 {
  SymmetricBuffer gathered;
  std::unique_ptr<AgGemm> op;
};

at::Tensor ag_gemm_fp8(const at::Tensor& x_shard, const at::Tensor& weight, const at::Tensor& weight_scale,
                       const std::string& group_name, const std::string& scaling_name) {
  constexpr const char* kOp = "tilelink.ag_gemm_fp8";
  return translated(kOp, [&] {
    std::lock_guard<std::mutex> lock(g_mutex);
    const Fp8Scaling scaling = parse_scaling(kOp, scaling_name);
    TORCH_CHECK_VALUE(scaling != Fp8Scaling::kTensor, kOp,
                      ": argument 'scaling' = 'tensor': the op quantises each rank's rows on send, and one scale for "
                      "every rank's tokens would need their amax first; expected 'row' or 'block'");
    check_matrix(kOp, "x_shard", x_shard);
    Group& g = group_of(kOp, group_name);
    check_device(kOp, "x_shard", x_shard, g);
    check_fp8_weight(kOp, x_shard, weight, weight_scale, scaling, g);
    const int64_t m_per_rank = x_shard.size(0), k = x_shard.size(1), n = weight.size(0);
    TORCH_CHECK_VALUE(m_per_rank > 0 && m_per_rank * g.size < (int64_t(1) << 31), kOp, ": argument 'x_shard' has ",
                      m_per_rank, " rows: expected 1 to 2^31 / ", g.size, " ranks");
    c10::cuda::CUDAGuard guard(g.device);
    const std::string shape = "(m_per_rank, n, k) = (" + std::to_string(m_per_rank) + ", " + std::to_string(n) + ", " +
                              std::to_string(k) + "), " + to_string(scaling) + " scaling";
    const std::string key = std::string(kOp) + " " + shape;
    if (g.more.count(key) == 0) refuse_build_under_capture(kOp, g, shape);
    at::Tensor out = at::empty({m_per_rank * g.size, n}, x_shard.options());
    auto [it, fresh] = g.more.try_emplace(key);
    if (fresh) {
      try {
        auto e = std::make_shared<AgFp8>();
        AgGemmArguments args;
        args.m_per_rank = static_cast<uint32_t>(m_per_rank);
        args.n = static_cast<uint32_t>(n);
        args.k = static_cast<uint32_t>(k);
        args.dtype = DType::kE4m3;
        args.scaling = scaling;
        args.b = own_entry<const void*>(g, weight.data_ptr());
        args.b_scale = own_entry<const float*>(g, weight_scale.data_ptr<float>());
        args.c = own_entry<void*>(g, out.data_ptr());
        args.a_source = own_entry<const void*>(g, x_shard.data_ptr());
        e->gathered = g.heap->allocate(size_t(m_per_rank) * g.size * fp8_row_pitch(static_cast<uint32_t>(k), scaling));
        args.a = &e->gathered;
        e->op = std::make_unique<AgGemm>(*g.world, *g.heap, *g.signals, args, "torch_ag_gemm_fp8");
        it->second = e;
      } catch (const std::exception& ex) {
        g.more.erase(it);
        build_failed(g, kOp, shape, g.built(), ex);
      }
    }
    AgFp8& e = *static_cast<AgFp8*>(it->second.get());
    e.op->set_operands(g.rank, weight.data_ptr(), weight_scale.data_ptr<float>(), out.data_ptr(), x_shard.data_ptr());
    on_callers_stream(g, [&](cudaStream_t) { e.op->run(); });  // it quantises x_shard first, on its stream
    return out;
  });
}

struct RsFp8 {
  SymmetricBuffer partial, recv;
  std::unique_ptr<GemmRs> op;
};

at::Tensor gemm_rs_fp8(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_scale,
                       const std::string& group_name, const std::string& scaling_name) {
  constexpr const char* kOp = "tilelink.gemm_rs_fp8";
  return translated(kOp, [&] {
    std::lock_guard<std::mutex> lock(g_mutex);
    const Fp8Scaling scaling = parse_scaling(kOp, scaling_name);
    check_matrix(kOp, "x", x);
    Group& g = group_of(kOp, group_name);
    check_device(kOp, "x", x, g);
    check_fp8_weight(kOp, x, weight, weight_scale, scaling, g);
    const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
    TORCH_CHECK_VALUE(m > 0 && m % g.size == 0 && m < (int64_t(1) << 31), kOp, ": argument 'x' has ", m,
                      " rows: expected a positive multiple of the group's ", g.size,
                      " ranks (equal output blocks, as reduce_scatter_tensor)");
    c10::cuda::CUDAGuard guard(g.device);
    const std::string shape = "(m, n, k) = (" + std::to_string(m) + ", " + std::to_string(n) + ", " +
                              std::to_string(k) + "), " + to_string(scaling) + " scaling";
    const std::string key = std::string(kOp) + " " + shape;
    if (g.more.count(key) == 0) refuse_build_under_capture(kOp, g, shape);
    at::Tensor out = at::empty({m / g.size, n}, x.options());
    auto [it, fresh] = g.more.try_emplace(key);
    if (fresh) {
      try {
        auto e = std::make_shared<RsFp8>();
        GemmRsArguments args;
        args.m = static_cast<uint32_t>(m);
        args.n = static_cast<uint32_t>(n);
        args.k = static_cast<uint32_t>(k);
        args.dtype = DType::kE4m3;
        args.scaling = scaling;
        const bool needs_recv = process_scatter(g, args.config);
        args.a_source = own_entry<const void*>(g, x.data_ptr());
        args.b = own_entry<const void*>(g, weight.data_ptr());
        args.b_scale = own_entry<const float*>(g, weight_scale.data_ptr<float>());
        args.out = own_entry<void*>(g, out.data_ptr());
        e->partial = g.heap->allocate(size_t(m) * n * 2);
        args.partial = &e->partial;
        if (needs_recv) {
          e->recv = g.heap->allocate(size_t(m) * n * 2);
          args.recv = &e->recv;
        }
        e->op = std::make_unique<GemmRs>(*g.world, *g.heap, *g.signals, args, "torch_gemm_rs_fp8");
        it->second = e;
      } catch (const std::exception& ex) {
        g.more.erase(it);
        build_failed(g, kOp, shape, g.built(), ex);
      }
    }
    RsFp8& e = *static_cast<RsFp8*>(it->second.get());
    e.op->set_operands(g.rank, x.data_ptr(), nullptr, weight.data_ptr(), weight_scale.data_ptr<float>(), out.data_ptr());
    on_callers_stream(g, [&](cudaStream_t) { e.op->run(); });  // it quantises x first, on its stream
    return out;
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tilelink, m) {
  m.def("quantize_weight(Tensor weight, str scaling=\"row\") -> (Tensor, Tensor)");
  m.def("ag_gemm_fp8(Tensor x_shard, Tensor weight, Tensor weight_scale, str group_name, str scaling=\"row\") -> Tensor");
  m.def("gemm_rs_fp8(Tensor x, Tensor weight, Tensor weight_scale, str group_name, str scaling=\"row\") -> Tensor");
}
// CPU too: a CPU tensor reaches the argument check and gets its ValueError, not a dispatch error.
TORCH_LIBRARY_IMPL(tilelink, CUDA, m) {
  m.impl("quantize_weight", &quantize_weight);
  m.impl("ag_gemm_fp8", &ag_gemm_fp8);
  m.impl("gemm_rs_fp8", &gemm_rs_fp8);
}
TORCH_LIBRARY_IMPL(tilelink, CPU, m) {
  m.impl("quantize_weight", &quantize_weight);
  m.impl("ag_gemm_fp8", &ag_gemm_fp8);
  m.impl("gemm_rs_fp8", &gemm_rs_fp8);
}

}  // namespace tilelink::torch_ops
