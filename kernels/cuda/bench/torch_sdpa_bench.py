"""torch_sdpa_bench.py: forward TFLOP/s of PyTorch's SDPA backends on the standard grid.

Same shapes and FLOP count as flash_bench: B*S = 16k tokens, hidden 2048
(H = 2048 / D), D in {64, 128}, S in 512..16k, causal and not, bf16 and fp16;
FLOPs = 4*B*H*S*S*D, halved for causal. Backends: FLASH_ATTENTION (PyTorch's
vendored FlashAttention-2) and CUDNN_ATTENTION, each selected alone with
torch.nn.attention.sdpa_kernel. Tensors are made as [B, S, H, D] and
transposed to [B, H, S, D] views (the BSHD memory layout flash_bench uses).
Timing: CUDA events around each call, median of --iters runs after --warmup.

usage: python3 torch_sdpa_bench.py [--iters N] [--warmup N] [--d 64|128] [--s S] [--causal 0|1]
                                   [--dtype bf16|fp16] [--backend flash|cudnn] [--quick]
(--s, --causal, --dtype, --backend: run only the matching shapes / backend, e.g. under ncu)
"""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_backend(backend, q, k, v, causal, warmup, iters):
    with sdpa_kernel([backend]):
        for _ in range(warmup):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--d", type=int, default=0)
    ap.add_argument("--s", type=int, default=0)
    ap.add_argument("--causal", type=int, default=-1)
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default=None)
    ap.add_argument("--backend", choices=["flash", "cudnn"], default=None)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"median of {a.iters} runs after {a.warmup} warm-up")
    print("| D | S | causal | dtype | flash ms | flash TFLOP/s | cudnn ms | cudnn TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|")
    backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION]
    if a.backend == "flash":
        backends = backends[:1]
    elif a.backend == "cudnn":
        backends = backends[1:]
    for dtype in (torch.bfloat16, torch.float16):
        if a.dtype and (dtype == torch.bfloat16) != (a.dtype == "bf16"):
            continue
        for d in (64, 128):
            if a.d and d != a.d:
                continue
            for causal in (False, True):
                if a.causal >= 0 and causal != bool(a.causal):
                    continue
                for s in (512, 1024, 2048, 4096, 8192, 16384):
                    if a.quick and s not in (2048, 8192):
                        continue
                    if a.s and s != a.s:
                        continue
                    b, h = 16384 // s, 2048 // d
                    q, k, v = (torch.rand(b, s, h, d, device="cuda", dtype=dtype).mul_(2).sub_(1).transpose(1, 2)
                               for _ in range(3))
                    flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
                    row = []
                    for be in backends:
                        try:
                            ms = time_backend(be, q, k, v, causal, a.warmup, a.iters)
                            row += [f"{ms:.3f}", f"{flops / ms / 1e9:.1f}"]
                        except RuntimeError as e:
                            row += ["n/a", f"error: {str(e).splitlines()[0][:60]}"]
                    name = "bf16" if dtype == torch.bfloat16 else "fp16"
                    print(f"| {d} | {s} | {'yes' if causal else 'no'} | {name} | " + " | ".join(row) + " |", flush=True)
                    del q, k, v


if __name__ == "__main__":
    main()
