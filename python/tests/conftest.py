import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def gpu_present() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() > 0


requires_gpu = pytest.mark.skipif(
    not os.environ.get("TILELINK_FORCE_GPU_TESTS") and not gpu_present(),
    reason="no CUDA GPU here: TileLink's operators run on a Hopper GPU (the GPU tests run there)",
)
