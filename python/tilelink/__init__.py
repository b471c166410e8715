"""TileLink's overlapped operators on torch tensors, one process per GPU (torchrun).

    import torch.distributed as dist, tilelink
    dist.init_process_group("nccl")
    group_name = tilelink.init()                      # once per group; collective
    y = torch.ops.tilelink.ag_gemm(x_shard, w, group_name)   # all-gather + GEMM
    z = torch.ops.tilelink.gemm_rs(h, w2, group_name)        # GEMM + reduce-scatter

Operators (bf16, 2-D, contiguous, on this rank's GPU; weights in nn.Linear's N x K layout):
  ag_gemm(x_shard [M/P, K], weight [N, K], group_name) -> [M, N]:
      the all-gathered x times weight^T, the gather overlapped with the GEMM.
  gemm_rs(x [M, K], weight [N, K], group_name) -> [M/P, N]:
      this rank's rows of the sum over ranks of x @ weight^T, the reduce-scatter overlapped.
  gemm_ar(x [M, K], weight [N, K], group_name) -> [M, N]:
      the sum over ranks of x @ weight^T on every rank (any M: decode's row-parallel linear),
      the all-reduce started per tile by the GEMM; the same bits on every rank.
  gemm_ar_rmsnorm(x [M, K], weight [N, K], residual [M, N], norm_weight [N], group_name,
                  eps=1e-6) -> (out [M, N], h [M, N]):
      the decode layer boundary after it: h = gemm_ar(x, weight) + residual, out = RMSNorm(h) * norm_weight.
  mlp(x_shard [M/P, H], w1 [2I/P or I/P, H], w2 [H, I/P], group_name, activation="swiglu") -> [M/P, H]:
      the tensor-parallel MLP block with sequence parallelism, AG+GEMM -> activation -> GEMM+RS;
      "swiglu": w1 is the gate rows, then the up rows, act = silu(gate) * up; "gelu": erf GELU.
  sp_attention(q [S/P, Hq, D], k [S/P, Hkv, D], v [S/P, Hkv, D], group_name, causal=True,
               layout="zigzag") -> (o [S/P, Hq, D], lse [Hq, S/P] fp32):
      sequence-parallel attention: this rank's queries over the whole sequence's keys, the K/V
      all-gather overlapped with flash attention; D 64 or 128, GQA; "zigzag": rank r holds chunks r
      and 2P-1-r of the sequence in 2P chunks, "contiguous": chunk r of P.
  moe(x_shard [T/P, H], topk_ids [T/P or T, k], topk_weights [T/P or T, k], w1 [E, 2I/P or I/P, H],
      w2 [E, H, I/P], group_name, activation="swiglu") -> [T/P, H]:
      the tensor-parallel MoE layer with sequence parallelism: all-gather + grouped GEMM -> activation
      -> grouped GEMM + top-k weighted combine + reduce-scatter, overlapped. The routing is a router's
      top-k (ids int32 or int64, valid and distinct per token; weights fp32, bf16 or fp16) for this
      rank's tokens (the op all-gathers it) or for every token (the same on every rank).
Each runs on the current CUDA stream (no host synchronisation); the first call of a shape in a
group builds the op and is collective, like the call itself.
"""
from __future__ import annotations

import os

import torch

__all__ = ["init", "synchronize", "ag_gemm", "gemm_rs", "gemm_ar", "gemm_ar_rmsnorm", "mlp", "moe", "sp_attention",
           "quantize_weight", "ag_gemm_fp8", "gemm_rs_fp8", "library_path"]

# NVLink multicast stays off (the project's rule), also for what torch starts in this process.
for _var, _value in (("NVSHMEM_DISABLE_NVLS", "1"), ("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")):
    os.environ.setdefault(_var, _value)


def library_path() -> str:
    """The operators' shared library: TILELINK_TORCH_LIBRARY, else the one installed with the package."""
    path = os.environ.get("TILELINK_TORCH_LIBRARY") or os.path.join(os.path.dirname(__file__), "_tilelink_torch.so")
    if not os.path.exists(path):
        raise ImportError(
            f"tilelink: the operators' library {path} does not exist: install the package "
            "(pip install --no-build-isolation .) or set TILELINK_TORCH_LIBRARY to a built _tilelink_torch.so"
        )
    return path


torch.ops.load_library(library_path())

from . import _fake  # noqa: E402,F401  (fake implementations: torch.compile, meta tensors)

_initialised: dict[str, tuple[int, ...]] = {}  # group name -> its members' global ranks


def init(group=None, heap_bytes: int = 1 << 30) -> str:
    """Sets up this process's rank of `group` (default: the world group) for TileLink's operators:
    NVSHMEM from a unique id that the group's rank 0 makes and broadcasts, a symmetric heap of
    `heap_bytes` per rank, signals. Collective over the group; once per group. Returns the group's
    name, the operators' `group_name` argument. The current CUDA device is this rank's GPU."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("tilelink.init: torch.distributed is not initialised: call dist.init_process_group first")
    if not torch.cuda.is_available():
        raise RuntimeError("tilelink.init: no CUDA device: TileLink's operators run on Hopper GPUs")
    if not isinstance(heap_bytes, int) or heap_bytes <= 0:
        raise ValueError(f"tilelink.init: argument 'heap_bytes' = {heap_bytes!r}: expected a positive int")
    group = group if group is not None else dist.group.WORLD
    name = group.group_name
    if name in _initialised:
        return name
    members = tuple(dist.get_process_group_ranks(group))
    # NVSHMEM is initialised once per process, for one set of processes: a second group over the
    # same processes shares it, a group over others cannot.
    for other, other_members in _initialised.items():
        if other_members != members:
            raise ValueError(
                f"tilelink.init: argument 'group' = {name!r} (ranks {list(members)}): this process already "
                f"initialised group {other!r} (ranks {list(other_members)}); TileLink serves one set of "
                "processes per process for now")
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    device = torch.cuda.current_device()
    uid = torch.ops.tilelink._unique_id() if rank == 0 else torch.empty(128, dtype=torch.uint8)
    # The group's own backend carries it (NCCL: from the GPU).
    carrier = uid.cuda() if dist.get_backend(group) == "nccl" else uid
    dist.broadcast(carrier, src=dist.get_global_rank(group, 0), group=group)
    torch.ops.tilelink._init(carrier.cpu(), rank, size, device, name, heap_bytes)
    _initialised[name] = members
    return name


def _group_name(op: str, group) -> str:
    """The name of `group` as the operators take it: a name as given, a ProcessGroup's own, or the
    world group's for None."""
    if isinstance(group, str):
        return group
    import torch.distributed as dist

    if group is None and not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(f"{op}: torch.distributed is not initialised and no group was given")
    return (group if group is not None else dist.group.WORLD).group_name


def synchronize(group=None) -> None:
    """Waits for this rank's TileLink work in `group` (default: the world group; its name works
    too). A wait that never completed -- a rank that stopped calling, died or never joined -- is
    raised as RuntimeError("...TimeoutError: ...") naming the op, rank, tile and channel, where
    torch.cuda.synchronize would only report that a kernel trapped. After a timeout the process's
    CUDA context is lost: the report is the point."""
    torch.ops.tilelink._synchronize(_group_name("tilelink.synchronize", group))


def transport(group=None) -> str:
    """How `group`'s ranks (default: the world group; its name works too) reach each other:
    "load_store" when every process maps every peer's GPU memory (one node), "put_signal" when the
    group spans nodes (NVSHMEM's puts and signals; TILELINK_TRANSPORT=put_signal forces it). The
    operators pick their communication paths by it."""
    return torch.ops.tilelink._transport(_group_name("tilelink.transport", group))


def ag_gemm(x_shard: torch.Tensor, weight: torch.Tensor, group_name: str) -> torch.Tensor:
    """torch.ops.tilelink.ag_gemm: all-gather x_shard over the group, times weight^T."""
    return torch.ops.tilelink.ag_gemm(x_shard, weight, group_name)


def gemm_rs(x: torch.Tensor, weight: torch.Tensor, group_name: str) -> torch.Tensor:
    """torch.ops.tilelink.gemm_rs: x @ weight^T summed over the group, this rank's rows."""
    return torch.ops.tilelink.gemm_rs(x, weight, group_name)


def gemm_ar(x: torch.Tensor, weight: torch.Tensor, group_name: str) -> torch.Tensor:
    """torch.ops.tilelink.gemm_ar: x @ weight^T summed over the group, on every rank."""
    return torch.ops.tilelink.gemm_ar(x, weight, group_name)


def gemm_ar_rmsnorm(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor,
                    group_name: str, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.ops.tilelink.gemm_ar_rmsnorm: (RMSNorm(h) * norm_weight, h) with h = gemm_ar(x, weight) + residual."""
    return torch.ops.tilelink.gemm_ar_rmsnorm(x, weight, residual, norm_weight, group_name, eps)


def mlp(x_shard: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, group_name: str,
        activation: str = "swiglu") -> torch.Tensor:
    """torch.ops.tilelink.mlp: the MLP block, AG+GEMM -> activation -> GEMM+RS, this rank's rows."""
    return torch.ops.tilelink.mlp(x_shard, w1, w2, group_name, activation)


def moe(x_shard: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w1: torch.Tensor,
        w2: torch.Tensor, group_name: str, activation: str = "swiglu") -> torch.Tensor:
    """torch.ops.tilelink.moe: the MoE layer, this rank's tokens combined over their top-k experts."""
    return torch.ops.tilelink.moe(x_shard, topk_ids, topk_weights, w1, w2, group_name, activation)


def sp_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group_name: str, causal: bool = True,
                 layout: str = "zigzag") -> tuple[torch.Tensor, torch.Tensor]:
    """torch.ops.tilelink.sp_attention: this rank's attention output and LSE over the whole sequence."""
    return torch.ops.tilelink.sp_attention(q, k, v, group_name, causal, layout)


def quantize_weight(weight: torch.Tensor, scaling: str = "row") -> tuple[torch.Tensor, torch.Tensor]:
    """torch.ops.tilelink.quantize_weight: an N x K bf16 weight as (torch.float8_e4m3fn, fp32 scales):
    tensor [1], row [N], block [ceil(N/128), K/128]."""
    return torch.ops.tilelink.quantize_weight(weight, scaling)


def ag_gemm_fp8(x_shard: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, group_name: str,
                scaling: str = "row") -> torch.Tensor:
    """torch.ops.tilelink.ag_gemm_fp8: ag_gemm with e4m3 operands; x_shard (bf16) is quantised on send."""
    return torch.ops.tilelink.ag_gemm_fp8(x_shard, weight, weight_scale, group_name, scaling)


def gemm_rs_fp8(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, group_name: str,
                scaling: str = "row") -> torch.Tensor:
    """torch.ops.tilelink.gemm_rs_fp8: gemm_rs with e4m3 operands; x (bf16) is quantised first."""
    return torch.ops.tilelink.gemm_rs_fp8(x, weight, weight_scale, group_name, scaling)
