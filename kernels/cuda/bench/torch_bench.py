"""torch_bench.py: the PyTorch side of kernels/cuda/bench/bench.c (run by it, same grid and flags).

Times PyTorch's SDPA FLASH_ATTENTION and CUDNN_ATTENTION backends (each selected alone with
torch.nn.attention.sdpa_kernel) on the bench's shapes: B = tokens / S, H = hidden / D, tensors made
as [B, S, H, D] and transposed to [B, H, S, D] views (the BSHD memory layout of bench.c), causal
top-left, uniform inputs in [-1, 1). Forward: scaled_dot_product_attention; backward:
torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) after one forward. Two timings, CUDA
events, median of --iters after --warmup, inputs rotating between two sets like bench.c:
  call     events around the call and a torch.cuda.synchronize() (torch returns before the GPU is
           done; bench.c's calls synchronize inside), the stream idle before it;
  kernels  the call queued behind torch.cuda._sleep (about --spin-us), so host dispatch is hidden.
Output: one line per (pass, D, S, causal, dtype, backend): "pass D S causal dtype backend call_ms
kernel_ms" (a backend that rejects a shape prints a comment line instead).
"""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def ints(s):
    return [int(x) for x in s.split(",")]


def time_one(fn, warmup, iters, spin_cycles):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    call, kern = [], []
    for it in range(-warmup, iters):
        for mode in (0, 1):
            x = (it + warmup) & 1
            torch.cuda.synchronize()
            if mode:
                torch.cuda._sleep(spin_cycles)
            e0.record()
            fn(x)
            if not mode:
                torch.cuda.synchronize()
            e1.record()
            e1.synchronize()
            if it >= 0:
                (kern if mode else call).append(e0.elapsed_time(e1))
    return statistics.median(call), statistics.median(kern)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pass", dest="passes", default="both", choices=["fwd", "bwd", "both"])
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--s", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--dtype", default="bf16,fp16")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--spin-us", type=int, default=300)
    a = ap.parse_args()
    clock_khz = torch.cuda.get_device_properties(0).clock_rate if hasattr(torch.cuda.get_device_properties(0), "clock_rate") else 1980000
    spin_cycles = int(a.spin_us * clock_khz / 1000)
    print(f"# torch {torch.__version__} cudnn {torch.backends.cudnn.version()} {torch.cuda.get_device_name()}",
          flush=True)
    backends = (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))
    passes = ["fwd", "bwd"] if a.passes == "both" else [a.passes]
    for dname in a.dtype.split(","):
        dtype = torch.bfloat16 if dname == "bf16" else torch.float16
        for pas in passes:
            for d in ints(a.d):
                for causal in ints(a.causal):
                    for s in ints(a.s):
                        b, h = a.tokens // s, a.hidden // d
                        gen = torch.Generator(device="cuda").manual_seed(s * 1000 + d)
                        def mk(grad):
                            t = torch.rand(b, s, h, d, device="cuda", dtype=dtype, generator=gen).mul_(2).sub_(1)
                            t = t.transpose(1, 2)
                            return t.requires_grad_() if grad else t
                        sets = [[mk(pas == "bwd") for _ in range(3)] + [mk(False)] for _ in range(2)]
                        for name, be in backends:
                            try:
                                with sdpa_kernel([be]):
                                    if pas == "fwd":
                                        def fn(x):
                                            q, k, v, _ = sets[x]
                                            F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                                    else:
                                        outs = [F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                                                for q, k, v, _ in sets]
                                        def fn(x):
                                            q, k, v, do = sets[x]
                                            torch.autograd.grad(outs[x], (q, k, v), do, retain_graph=True)
                                    call, kern = time_one(fn, a.warmup, a.iters, spin_cycles)
                                print(f"{pas} {d} {s} {causal} {dname} {name} {call:.4f} {kern:.4f}", flush=True)
                            except Exception as ex:  # a backend may reject a shape: say so, keep going
                                print(f"# {pas} {d} {s} {causal} {dname} {name} failed: {type(ex).__name__}: {ex}"[:200],
                                      flush=True)
                        del sets
                        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
