"""Fake (meta) implementations of TileLink's operators: output shapes for torch.compile and meta
tensors, from the group's size as torch.distributed knows it, with the same argument errors as the
real operators (ValueError naming the argument)."""
from __future__ import annotations

import torch


def _group_size(op: str, group_name: str) -> int:
    from torch.distributed.distributed_c10d import _resolve_process_group

    try:
        return _resolve_process_group(group_name).size()
    except Exception as e:  # unknown name
        raise ValueError(f"{op}: argument 'group_name' = {group_name!r}: expected a torch.distributed group's name") from e


def _check_matrix(op: str, name: str, t: torch.Tensor) -> None:
    if t.dtype != torch.bfloat16:
        raise ValueError(f"{op}: argument '{name}' has dtype {t.dtype}: expected torch.bfloat16")
    if t.dim() != 2:
        raise ValueError(f"{op}: argument '{name}' has {t.dim()} dimensions: expected 2")


def _check_operands(op: str, x_name: str, x: torch.Tensor, weight: torch.Tensor, group_name: str,
                    w_name: str = "weight") -> int:
    """The real operators' checks that shapes and dtypes can make; returns the group's size."""
    _check_matrix(op, x_name, x)
    _check_matrix(op, w_name, weight)
    if weight.shape[1] != x.shape[1]:
        raise ValueError(
            f"{op}: argument '{w_name}' has {weight.shape[1]} columns: expected {x_name}'s {x.shape[1]} "
            f"({w_name} is N x K, nn.Linear's layout)"
        )
    if min(x.shape[0], x.shape[1], weight.shape[0]) <= 0:
        raise ValueError(f"{op}: arguments '{x_name}' and '{w_name}' have shapes {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}: expected no empty dimension")
    if x.shape[1] % 8 != 0:
        raise ValueError(f"{op}: argument '{x_name}' has {x.shape[1]} columns (K): expected a multiple of 8 "
                         "(TMA needs 16-byte rows)")
    if weight.shape[0] % 8 != 0:
        raise ValueError(f"{op}: argument '{w_name}' has {weight.shape[0]} rows (N): expected a multiple of 8 "
                         "(TMA needs 16-byte rows of the output)")
    return _group_size(op, group_name)


@torch.library.register_fake("tilelink::ag_gemm")
def _ag_gemm_fake(x_shard: torch.Tensor, weight: torch.Tensor, group_name: str) -> torch.Tensor:
    size = _check_operands("tilelink.ag_gemm", "x_shard", x_shard, weight, group_name)
    return x_shard.new_empty((x_shard.shape[0] * size, weight.shape[0]))


@torch.library.register_fake("tilelink::gemm_rs")
def _gemm_rs_fake(x: torch.Tensor, weight: torch.Tensor, group_name: str) -> torch.Tensor:
    size = _check_operands("tilelink.gemm_rs", "x", x, weight, group_name)
    if x.shape[0] == 0 or x.shape[0] % size != 0:
        raise ValueError(f"tilelink.gemm_rs: argument 'x' has {x.shape[0]} rows: expected a positive multiple of the "
                         f"group's {size} ranks (equal output blocks, as reduce_scatter_tensor)")
    return x.new_empty((x.shape[0] // size, weight.shape[0]))


@torch.library.register_fake("tilelink::mlp")
def _mlp_fake(x_shard: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, group_name: str,
              activation: str = "swiglu") -> torch.Tensor:
    op = "tilelink.mlp"
    if activation not in ("swiglu", "gelu"):
        raise ValueError(f"{op}: argument 'activation' = {activation!r}: expected 'swiglu' or 'gelu'")
    size = _check_operands(op, "x_shard", x_shard, w1, group_name, "w1")
    _check_matrix(op, "w2", w2)
    swiglu = activation == "swiglu"  # w1: the gate rows, then the up rows (a multiple of 8: even)
    i_local = w1.shape[0] // 2 if swiglu else w1.shape[0]
    hidden = x_shard.shape[1]
    if tuple(w2.shape) != (hidden, i_local):
        raise ValueError(f"{op}: argument 'w2' has shape {tuple(w2.shape)}: expected [{hidden}, {i_local}] "
                         f"(H x I/P: x_shard's H columns, w1's {i_local} {'up ' if swiglu else ''}rows)")
    if i_local % 8 != 0:
        raise ValueError(f"{op}: argument 'w2' has {i_local} columns (I/P): expected a multiple of 8 "
                         "(TMA needs 16-byte rows)")
    del size
    return x_shard.new_empty((x_shard.shape[0], hidden))


@torch.library.register_fake("tilelink::gemm_ar")
def _gemm_ar_fake(x: torch.Tensor, weight: torch.Tensor, group_name: str) -> torch.Tensor:
    _check_operands("tilelink.gemm_ar", "x", x, weight, group_name)
    return x.new_empty((x.shape[0], weight.shape[0]))


@torch.library.register_fake("tilelink::gemm_ar_rmsnorm")
def _gemm_ar_rmsnorm_fake(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor,
                          group_name: str, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    op = "tilelink.gemm_ar_rmsnorm"
    _check_operands(op, "x", x, weight, group_name)
    m, n = x.shape[0], weight.shape[0]
    _check_matrix(op, "residual", residual)
    if tuple(residual.shape) != (m, n):
        raise ValueError(f"{op}: argument 'residual' has shape {list(residual.shape)}: expected [{m}, {n}] "
                         "(x's rows, weight's rows)")
    if norm_weight.dtype != torch.bfloat16:
        raise ValueError(f"{op}: argument 'norm_weight' has dtype {norm_weight.dtype}: expected torch.bfloat16")
    if norm_weight.dim() != 1 or norm_weight.shape[0] != n:
        raise ValueError(f"{op}: argument 'norm_weight' has shape {list(norm_weight.shape)}: expected [{n}] "
                         "(weight's rows)")
    if not eps > 0:
        raise ValueError(f"{op}: argument 'eps' = {eps}: expected a positive value")
    return x.new_empty((m, n)), x.new_empty((m, n))


def _check_heads(op: str, name: str, t: torch.Tensor) -> None:
    if t.dtype != torch.bfloat16:
        raise ValueError(f"{op}: argument '{name}' has dtype {t.dtype}: expected torch.bfloat16")
    if t.dim() != 3:
        raise ValueError(f"{op}: argument '{name}' has {t.dim()} dimensions: expected 3 (tokens, heads, head_dim)")


@torch.library.register_fake("tilelink::sp_attention")
def _sp_attention_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group_name: str, causal: bool = True,
                       layout: str = "zigzag") -> tuple[torch.Tensor, torch.Tensor]:
    op = "tilelink.sp_attention"
    if layout not in ("zigzag", "contiguous"):
        raise ValueError(f"{op}: argument 'layout' = {layout!r}: expected 'zigzag' or 'contiguous'")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_heads(op, name, t)
    if k.shape != v.shape:
        raise ValueError(f"{op}: arguments 'k' and 'v' have shapes {tuple(k.shape)} and {tuple(v.shape)}: "
                         "expected the same")
    if q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise ValueError(f"{op}: arguments 'q' and 'k' have shapes {tuple(q.shape)} and {tuple(k.shape)}: "
                         "expected the same tokens and head_dim")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"{op}: argument 'q' has {q.shape[1]} heads: expected a multiple of k's {k.shape[1]} (GQA)")
    _group_size(op, group_name)
    return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


@torch.library.register_fake("tilelink::moe")
def _moe_fake(x_shard: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w1: torch.Tensor,
              w2: torch.Tensor, group_name: str, activation: str = "swiglu") -> torch.Tensor:
    op = "tilelink.moe"
    if activation not in ("swiglu", "gelu"):
        raise ValueError(f"{op}: argument 'activation' = {activation!r}: expected 'swiglu' or 'gelu'")
    swiglu = activation == "swiglu"
    _check_matrix(op, "x_shard", x_shard)
    for name, w, dims in (("w1", w1, "experts, 2 I/P or I/P, H"), ("w2", w2, "experts, H, I/P")):
        if w.dtype != torch.bfloat16:
            raise ValueError(f"{op}: argument '{name}' has dtype {w.dtype}: expected torch.bfloat16")
        if w.dim() != 3:
            raise ValueError(f"{op}: argument '{name}' has {w.dim()} dimensions: expected 3 ({dims})")
    tpr, hidden = x_shard.shape
    experts, fc1_rows = w1.shape[0], w1.shape[1]
    if tpr <= 0 or hidden <= 0:
        raise ValueError(f"{op}: argument 'x_shard' has shape {tuple(x_shard.shape)}: expected no empty dimension")
    if hidden % 8 != 0:
        raise ValueError(f"{op}: argument 'x_shard' has {hidden} columns (H): expected a multiple of 8 "
                         "(TMA needs 16-byte rows)")
    if not 0 < experts <= 1024:
        raise ValueError(f"{op}: argument 'w1' has {experts} experts (dimension 0): expected 1 to 1024")
    if w1.shape[2] != hidden:
        raise ValueError(f"{op}: argument 'w1' has shape {list(w1.shape)}: expected [{experts}, "
                         f"{'2 I/P' if swiglu else 'I/P'}, {hidden}] (x_shard's H columns)")
    if fc1_rows <= 0 or (swiglu and fc1_rows % 2 != 0):
        raise ValueError(f"{op}: argument 'w1' has {fc1_rows} rows per expert: expected "
                         + ("an even number (the gate rows, then the up rows)" if swiglu else "at least one"))
    i_local = fc1_rows // 2 if swiglu else fc1_rows
    if i_local % 8 != 0:
        raise ValueError(f"{op}: argument 'w1' has {i_local} {'gate rows' if swiglu else 'rows'} per expert (I/P): "
                         "expected a multiple of 8 (TMA needs 16-byte rows)")
    if tuple(w2.shape) != (experts, hidden, i_local):
        raise ValueError(f"{op}: argument 'w2' has shape {list(w2.shape)}: expected [{experts}, {hidden}, {i_local}] "
                         "(w1's experts, x_shard's H, I/P)")
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{op}: argument 'topk_ids' has dtype {topk_ids.dtype}: expected torch.int32 or torch.int64")
    if not topk_weights.dtype.is_floating_point:
        raise ValueError(f"{op}: argument 'topk_weights' has dtype {topk_weights.dtype}: expected a floating dtype "
                         "(float32, bfloat16 or float16)")
    if topk_ids.dim() != 2:
        raise ValueError(f"{op}: argument 'topk_ids' has {topk_ids.dim()} dimensions: expected 2 (tokens, k)")
    size = _group_size(op, group_name)
    tokens, topk = tpr * size, topk_ids.shape[1]
    if topk_ids.shape[0] not in (tpr, tokens):
        raise ValueError(f"{op}: argument 'topk_ids' has {topk_ids.shape[0]} rows: expected x_shard's {tpr} (this "
                         f"rank's tokens) or {tokens} (every token of the group's {size} ranks)")
    if not 0 < topk <= experts:
        raise ValueError(f"{op}: argument 'topk_ids' has {topk} columns (k): expected 1 to the {experts} experts")
    if tokens * topk >= 1 << 31:
        raise ValueError(f"{op}: arguments have {tokens} tokens x top-{topk}: expected fewer than 2^31 (token, expert) "
                         "pairs")
    if tuple(topk_weights.shape) != tuple(topk_ids.shape):
        raise ValueError(f"{op}: argument 'topk_weights' has shape {list(topk_weights.shape)}: expected topk_ids' "
                         f"{list(topk_ids.shape)}")
    return x_shard.new_empty((tpr, hidden))


# ---- FP8 (issue 22): torch_fp8.cpp's operators -------------------------------------------------

_SCALINGS = ("tensor", "row", "block")


def _check_scaling(op: str, scaling: str) -> None:
    if scaling not in _SCALINGS:
        raise ValueError(f"{op}: argument 'scaling' = {scaling!r}: expected 'tensor', 'row' or 'block'")


def _check_fp8_k(op: str, k: int, scaling: str) -> None:
    step = 128 if scaling == "block" else 16
    if k % step != 0:
        raise ValueError(f"{op}: argument 'k' = {k}: expected a multiple of {step} "
                         + ("(whole 1 x 128 and 128 x 128 scale blocks)" if scaling == "block" else
                            "(TMA needs 16-byte rows of e4m3)"))


def _weight_scales(n: int, k: int, scaling: str) -> int:
    return 1 if scaling == "tensor" else n if scaling == "row" else -(-n // 128) * (k // 128)


def _check_fp8_weight(op: str, x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                      scaling: str) -> None:
    if weight.dtype != torch.float8_e4m3fn:
        raise ValueError(f"{op}: argument 'weight' has dtype {weight.dtype}: expected torch.float8_e4m3fn "
                         "(tilelink.quantize_weight gives it)")
    if weight.dim() != 2:
        raise ValueError(f"{op}: argument 'weight' has shape {list(weight.shape)}: expected a contiguous N x K matrix")
    n, k = weight.shape
    if k != x.shape[1]:
        raise ValueError(f"{op}: argument 'weight' has {k} columns: expected x's {x.shape[1]} (weight is N x K, "
                         "nn.Linear's layout)")
    if n <= 0 or n % 8 != 0:
        raise ValueError(f"{op}: argument 'weight' has {n} rows (N): expected a positive multiple of 8 (TMA needs "
                         "16-byte rows of the output)")
    _check_fp8_k(op, k, scaling)
    if weight_scale.dtype != torch.float32:
        raise ValueError(f"{op}: argument 'weight_scale': expected a contiguous torch.float32 CUDA tensor")
    want = _weight_scales(n, k, scaling)
    if weight_scale.numel() != want:
        raise ValueError(f"{op}: argument 'weight_scale' has {weight_scale.numel()} elements: expected {want} for "
                         f"{scaling} scaling of a {n} x {k} weight (tensor 1, row N, block ceil(N/128) x K/128)")


@torch.library.register_fake("tilelink::quantize_weight")
def _quantize_weight_fake(weight: torch.Tensor, scaling: str = "row") -> tuple[torch.Tensor, torch.Tensor]:
    op = "tilelink.quantize_weight"
    _check_scaling(op, scaling)
    _check_matrix(op, "weight", weight)
    n, k = weight.shape
    if n <= 0 or k <= 0:
        raise ValueError(f"{op}: argument 'weight' has shape {tuple(weight.shape)}: expected no empty dimension")
    _check_fp8_k(op, k, scaling)
    shape = (1,) if scaling == "tensor" else (n,) if scaling == "row" else (-(-n // 128), k // 128)
    return weight.new_empty((n, k), dtype=torch.float8_e4m3fn), weight.new_empty(shape, dtype=torch.float32)


@torch.library.register_fake("tilelink::ag_gemm_fp8")
def _ag_gemm_fp8_fake(x_shard: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, group_name: str,
                      scaling: str = "row") -> torch.Tensor:
    op = "tilelink.ag_gemm_fp8"
    _check_scaling(op, scaling)
    if scaling == "tensor":
        raise ValueError(f"{op}: argument 'scaling' = 'tensor': the op quantises each rank's rows on send, and one "
                         "scale for every rank's tokens would need their amax first; expected 'row' or 'block'")
    _check_matrix(op, "x_shard", x_shard)
    size = _group_size(op, group_name)
    _check_fp8_weight(op, x_shard, weight, weight_scale, scaling)
    return x_shard.new_empty((x_shard.shape[0] * size, weight.shape[0]))


@torch.library.register_fake("tilelink::gemm_rs_fp8")
def _gemm_rs_fp8_fake(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, group_name: str,
                      scaling: str = "row") -> torch.Tensor:
    op = "tilelink.gemm_rs_fp8"
    _check_scaling(op, scaling)
    _check_matrix(op, "x", x)
    size = _group_size(op, group_name)
    _check_fp8_weight(op, x, weight, weight_scale, scaling)
    if x.shape[0] <= 0 or x.shape[0] % size != 0:
        raise ValueError(f"{op}: argument 'x' has {x.shape[0]} rows: expected a positive multiple of the group's "
                         f"{size} ranks (equal output blocks, as reduce_scatter_tensor)")
    return x.new_empty((x.shape[0] // size, weight.shape[0]))
