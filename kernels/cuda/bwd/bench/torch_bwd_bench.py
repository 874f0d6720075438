"""torch_bwd_bench.py: PyTorch SDPA backward (flash and cudnn backends) on the same
grid as bwd_bench.c, measured in the same run.

bf16, B*S = 16384 tokens, hidden 2048 (H = 2048 / D), D in {64, 128},
S in {512 .. 16384}, causal off/on. For each backend: one forward, then
torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) timed with CUDA
events, 5 warm-up calls, median of REPS (default 30).
FLOPs = 2.5 * 4 * B * H * S * S * D, halved for causal.
Usage: python3 torch_bwd_bench.py [reps] [D-filter]
"""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F


def time_bwd(backend, B, H, S, D, causal, reps):
    torch.manual_seed(0)
    # SDPA layout [B, H, S, D]; made from [B, S, H, D] like the flashcheck grid
    q, k, v = (torch.rand(B, S, H, D, device="cuda", dtype=torch.bfloat16).mul_(2).sub_(1)
               .transpose(1, 2).requires_grad_() for _ in range(3))
    dout = torch.rand(B, S, H, D, device="cuda", dtype=torch.bfloat16).mul_(2).sub_(1).transpose(1, 2)
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        times = []
        for r in range(5 + reps):
            e0.record()
            torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
            e1.record()
            torch.cuda.synchronize()
            if r >= 5:
                times.append(e0.elapsed_time(e1))
    times.sort()
    return times[len(times) // 2]


def main():
    reps = max(20, int(sys.argv[1]) if len(sys.argv) > 1 else 30)
    dfilter = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    print(f"# torch {torch.__version__} cudnn {torch.backends.cudnn.version()} {torch.cuda.get_device_name()}")
    print(f"{'D':>4} {'S':>6} {'causal':>6} {'mode':<6} {'ms':>9} {'TFLOP/s':>9}")
    for D in (64, 128):
        if dfilter and D != dfilter:
            continue
        for S in (512, 1024, 2048, 4096, 8192, 16384):
            for causal in (0, 1):
                H, B = 2048 // D, 16384 // S
                flops = 2.5 * 4 * B * H * S * S * D / (2 if causal else 1)
                for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    try:
                        ms = time_bwd(be, B, H, S, D, causal, reps)
                        print(f"{D:4d} {S:6d} {causal:6d} {name:<6} {ms:9.3f} {flops / (ms * 1e-3) / 1e12:9.1f}",
                              flush=True)
                    except Exception as ex:  # a backend may reject a shape: say so, keep going
                        print(f"{D:4d} {S:6d} {causal:6d} {name:<6} failed: {type(ex).__name__}: {ex}"[:200],
                              flush=True)


if __name__ == "__main__":
    main()
