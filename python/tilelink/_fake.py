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


def _check_operands(op: str, x_name: str, x: torch.Tensor, weight: torch.Tensor, group_name: str) -> int:
    """The real operators' checks that shapes and dtypes can make; returns the group's size."""
    _check_matrix(op, x_name, x)
    _check_matrix(op, "weight", weight)
    if weight.shape[1] != x.shape[1]:
        raise ValueError(
            f"{op}: argument 'weight' has {weight.shape[1]} columns: expected {x_name}'s {x.shape[1]} "
            "(weight is N x K, nn.Linear's layout)"
        )
    if min(x.shape[0], x.shape[1], weight.shape[0]) <= 0:
        raise ValueError(f"{op}: arguments '{x_name}' and 'weight' have shapes {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}: expected no empty dimension")
    if x.shape[1] % 8 != 0:
        raise ValueError(f"{op}: argument '{x_name}' has {x.shape[1]} columns (K): expected a multiple of 8 "
                         "(TMA needs 16-byte rows)")
    if weight.shape[0] % 8 != 0:
        raise ValueError(f"{op}: argument 'weight' has {weight.shape[0]} rows (N): expected a multiple of 8 "
                         "(TMA needs 16-byte rows of the output)")
    return _group_size(op, group_name)


@torch.library.register_fake("tilelink::ag_gemm")
def _ag_gemm_fake(x_shard: torch.Tensor, weight: torch.Tensor, group_name: str) -> torch.Tensor:
    size = _check_operands("tilelink.ag_gemm", "x_shard", x_shard, weight, group_name)
    return x_shard.new_empty((x_shard.shape[0] * size, weight.shape[0]))


@torch.library.register_fake("tilelink::gemm_rs")
def _gemm_rs_fake(x: torch.Tensor, weight: torch.Tensor, group_name: str) -> torch.Tensor:
    size = _check_operands("tilelink.gemm_rs", "x", x, weight, group_name)
    if x.shape[0] % (128 * size) != 0:
        raise ValueError(f"tilelink.gemm_rs: argument 'x' has {x.shape[0]} rows: expected a multiple of 128 x the "
                         f"group's {size} ranks (each rank's output block is whole 128-row GEMM tiles)")
    return x.new_empty((x.shape[0] // size, weight.shape[0]))
