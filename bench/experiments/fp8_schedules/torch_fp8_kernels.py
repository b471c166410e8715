# Which kernels cuBLASLt runs for torch._scaled_mm (tensor and row scales, fast accumulation off and on) at
# 8192^3, and their time: `python3 torch_fp8_kernels.py` on a GPU with torch.
import torch
from torch.profiler import profile, ProfilerActivity
m = n = k = 8192
a = (torch.randn(m, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
b = (torch.randn(n, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
cases = {
    "tensor": (torch.tensor(1.0, device="cuda"), torch.tensor(1.0, device="cuda")),
    "row": (torch.ones(m, 1, device="cuda"), torch.ones(1, n, device="cuda")),
}
for name, (sa, sb) in cases.items():
    for fast in (False, True):
        f = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
        try:
            for _ in range(3): f()
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(20): f()
            e1.record(); torch.cuda.synchronize()
            us = e0.elapsed_time(e1) * 1000 / 20
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                f(); torch.cuda.synchronize()
            names = sorted({e.name for e in p.events() if e.device_type.name == "CUDA"})
            print(f"{name} fast_accum={fast}: {us:.1f} us ({2*m*n*k/us/1e6:.0f} TFLOP/s); kernels: {names}")
        except Exception as ex:
            print(f"{name} fast_accum={fast}: {type(ex).__name__}: {ex}")
