#!/usr/bin/env python3
"""The GPU's measured ceilings for docs/cuda.md (issue 16, point 4): device-to-device copy
bandwidth and a BF16 GEMM through cuBLAS(Lt), both through PyTorch's CUDA runtime, timed
with CUDA events (mean of 10 after 3 warm-ups). Prints one JSON object. Needs torch with
CUDA; exits 4 (skipped) without it or without a device."""
import json
import sys

try:
    import torch
except ImportError:
    print("SKIPPED: no torch")
    sys.exit(4)
if not torch.cuda.is_available():
    print("SKIPPED: no CUDA device")
    sys.exit(4)


def timed(fn, reps=10, warm=3):
    for _ in range(warm):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / 1000.0 / reps


props = torch.cuda.get_device_properties(0)
result = {"gpu": props.name, "sms": props.multi_processor_count, "memory_gib": round(props.total_memory / 2**30, 1)}

n = 1 << 30  # 4 GiB of float32 per buffer: far past the L2
src = torch.empty(n, dtype=torch.float32, device="cuda").uniform_()
dst = torch.empty_like(src)
seconds = timed(lambda: dst.copy_(src))
result["copy_gb_s"] = round(2 * src.numel() * 4 / seconds / 1e9, 1)  # bytes read + written
del src, dst

m = 8192
a = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
b = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
seconds = timed(lambda: a @ b)
result["bf16_gemm_tflops"] = round(2 * m**3 / seconds / 1e12, 1)
print(json.dumps(result))
