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

--v3 --probs SPEC,SPEC,...: bench.c --v3's contract-v3 problems (SPEC = kind:B:Sq:Sk:Hq:Hkv:D:causal:page,
bench.c v3_probs), bf16, both timings: kind 0 (packed varlen, lengths v3_len, causal bottom-right
= top-left since Sq = Sk per sequence): aten._flash_attention_forward with cu_seqlens (FlashAttention-2
varlen) and aten._cudnn_attention_forward with cu_seqlens where this torch has it; kind 1 (paged prefill):
SDPA flash / cuDNN on the dense K/V of the same problem; kind 2 (decode, Sq = 1, no mask): SDPA flash /
cuDNN / efficient, enable_gqa when Hq != Hkv. Output: "v3 INDEX BACKEND kernel_ms call_ms".
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


def v3_len(b):
    return 256 + (b * 1103 + 517) % 3841  # bench.c v3_len


def v3_main(a, spin_cycles):
    print(f"# torch {torch.__version__} cudnn {torch.backends.cudnn.version()} {torch.cuda.get_device_name()}",
          flush=True)
    dt = torch.bfloat16
    for idx, spec in enumerate(a.probs.split(",")):
        kind, B, Sq, Sk, Hq, Hkv, D, causal, page = (int(x) for x in spec.split(":"))
        gen = torch.Generator(device="cuda").manual_seed(idx)

        def rnd(*shape):
            return torch.rand(*shape, device="cuda", dtype=dt, generator=gen).mul_(2).sub_(1)

        fns = {}
        if kind == 0:
            lens = [v3_len(b) for b in range(B)]
            cu = torch.tensor([0] + list(__import__("itertools").accumulate(lens)), device="cuda", dtype=torch.int32)
            tot, mx = int(cu[-1]), max(lens)
            sets = [(rnd(tot, Hq, D), rnd(tot, Hkv, D), rnd(tot, Hkv, D)) for _ in range(2)]

            def fa(x):
                q, k, v = sets[x]
                torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, mx, mx, 0.0, bool(causal), False)

            def cd(x):
                q, k, v = sets[x]
                torch.ops.aten._cudnn_attention_forward(q, k, v, None, cu, cu, mx, mx, True, 0.0, bool(causal))

            fns = {"flash": fa, "cudnn": cd}
            backends = ("flash", "cudnn")
        else:
            sets = [(rnd(B, Sq, Hq, D).transpose(1, 2), rnd(B, Sk, Hkv, D).transpose(1, 2),
                     rnd(B, Sk, Hkv, D).transpose(1, 2)) for _ in range(2)]
            gqa = Hq != Hkv
            bes = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                   "efficient": SDPBackend.EFFICIENT_ATTENTION}
            backends = ("flash", "cudnn") if kind == 1 else ("flash", "cudnn", "efficient")
            for name in backends:
                def f(x, be=bes[name]):
                    q, k, v = sets[x]
                    with sdpa_kernel([be]):
                        F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal) and kind == 1, enable_gqa=gqa)
                fns[name] = f
        for name in backends:
            try:
                call, kern = time_one(fns[name], a.warmup, a.iters, spin_cycles)
                print(f"v3 {idx} {name} {kern:.5f} {call:.5f}", flush=True)
            except Exception as ex:  # a backend may reject a problem: say so, keep going
                print(f"# v3 {idx} {spec} {name} failed: {type(ex).__name__}: {ex}"[:240], flush=True)
        del sets
        torch.cuda.empty_cache()


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
    ap.add_argument("--v3", action="store_true")
    ap.add_argument("--probs", default="")
    a = ap.parse_args()
    clock_khz = torch.cuda.get_device_properties(0).clock_rate if hasattr(torch.cuda.get_device_properties(0), "clock_rate") else 1980000
    spin_cycles = int(a.spin_us * clock_khz / 1000)
    if a.v3:
        v3_main(a, spin_cycles)
        return
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
