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
cuDNN / efficient, enable_gqa when Hq != Hkv. Output: "v3 INDEX BACKEND kernel_ms call_ms". Kind 0 also: cudnn_seq
(cuDNN's dense SDPA once per sequence, on views of the packed tensors) and, as a comment line, the cuDNN
varlen call's kernels alone (torch.profiler) and its host time, which tell where its time goes.

--v3bwd --probs SPEC,...: bench.c bench_v3_bwd's varlen backward problems (kind 3), see v3bwd_main.
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


def v3_seqlen(sq, b):
    return 1 + (b * 1103 + 517) % sq if sq > 0 else v3_len(b)  # bench.c v3_seqlen


def gpu_ms_profiled(fn, reps=3):
    """GPU time of fn's kernels alone (torch.profiler, sum of device time over reps / reps) and the host
    time of one call before it returns (perf_counter, no synchronization): separates a host-side cost
    (e.g. a graph built per call) from the kernels' own time."""
    import time
    fn(0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn(0)
    host = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn(0)
        torch.cuda.synchronize()
    tot = 0.0
    for ev in prof.key_averages():
        tot += getattr(ev, "self_device_time_total", getattr(ev, "self_cuda_time_total", 0.0))
    return tot / 1e3 / reps, host


def varlen_sets(B, Sq, Hq, Hkv, D, dt, gen, grad=False):
    lens = [v3_seqlen(Sq, b) for b in range(B)]
    cu = torch.tensor([0] + list(__import__("itertools").accumulate(lens)), device="cuda", dtype=torch.int32)
    tot, mx = int(cu[-1]), max(lens)

    def rnd(*shape):
        return torch.rand(*shape, device="cuda", dtype=dt, generator=gen).mul_(2).sub_(1)

    sets = [[rnd(tot, Hq, D), rnd(tot, Hkv, D), rnd(tot, Hkv, D), rnd(tot, Hq, D)] for _ in range(2)]
    return lens, cu, tot, mx, sets


def cudnn_seq_views(lens, cu, t):
    """[1, H, L, D] views of each packed sequence of t ([tot, H, D])"""
    offs = [0]
    for L in lens:
        offs.append(offs[-1] + L)
    return [t[offs[b]:offs[b + 1]].unsqueeze(0).transpose(1, 2) for b in range(len(lens)) if lens[b] > 0]


def v3bwd_main(a, spin_cycles):
    """--v3bwd: the varlen backward problems of bench.c bench_v3_bwd (kind 3), bf16. Output:
    "v3bwd INDEX BACKEND kernel_ms"; flash = aten._flash_attention_backward with cu_seqlens after one
    aten._flash_attention_forward; cudnn = aten._cudnn_attention_backward with cu_seqlens after one
    aten._cudnn_attention_forward; cudnn_seq = cuDNN's dense SDPA backward (autograd.grad) once per
    sequence on views of the packed tensors."""
    print(f"# torch {torch.__version__} cudnn {torch.backends.cudnn.version()} {torch.cuda.get_device_name()}",
          flush=True)
    dt = torch.bfloat16
    for idx, spec in enumerate(a.probs.split(",")):
        kind, B, Sq, Sk, Hq, Hkv, D, causal, page = (int(x) for x in spec.split(":"))
        gen = torch.Generator(device="cuda").manual_seed(1000 + idx)
        lens, cu, tot, mx, sets = varlen_sets(B, Sq, Hq, Hkv, D, dt, gen)
        fns = {}
        try:
            fo = [torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, mx, mx, 0.0, bool(causal), False)
                  for q, k, v, _ in sets]

            def fa(x):
                q, k, v, do = sets[x]
                out, lse, rng, unused = fo[x][0], fo[x][1], fo[x][2], fo[x][3]
                torch.ops.aten._flash_attention_backward(do, q, k, v, out, lse, cu, cu, mx, mx, 0.0, bool(causal),
                                                         rng, unused)
            fns["flash"] = fa
        except Exception as ex:
            print(f"# v3bwd {idx} {spec} flash forward failed: {type(ex).__name__}: {ex}"[:240], flush=True)
        try:
            co = [torch.ops.aten._cudnn_attention_forward(q, k, v, None, cu, cu, mx, mx, True, 0.0, bool(causal))
                  for q, k, v, _ in sets]

            def cd(x):
                q, k, v, do = sets[x]
                r = co[x]
                torch.ops.aten._cudnn_attention_backward(do, q, k, v, r[0], r[1], r[6], r[7], None, cu, cu, mx, mx,
                                                         0.0, bool(causal))
            fns["cudnn"] = cd
        except Exception as ex:
            print(f"# v3bwd {idx} {spec} cudnn forward failed: {type(ex).__name__}: {ex}"[:240], flush=True)
        try:
            seqs = []
            for q, k, v, do in sets:
                qs = [t.detach().requires_grad_() for t in cudnn_seq_views(lens, cu, q)]
                ks = [t.detach().requires_grad_() for t in cudnn_seq_views(lens, cu, k)]
                vs = [t.detach().requires_grad_() for t in cudnn_seq_views(lens, cu, v)]
                ds = cudnn_seq_views(lens, cu, do)
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    os_ = [F.scaled_dot_product_attention(qq, kk, vv, is_causal=bool(causal), enable_gqa=Hq != Hkv)
                           for qq, kk, vv in zip(qs, ks, vs)]
                seqs.append((qs, ks, vs, ds, os_))

            def cs(x):
                qs, ks, vs, ds, os_ = seqs[x]
                for qq, kk, vv, dd, oo in zip(qs, ks, vs, ds, os_):
                    torch.autograd.grad(oo, (qq, kk, vv), dd, retain_graph=True)
            fns["cudnn_seq"] = cs
        except Exception as ex:
            print(f"# v3bwd {idx} {spec} cudnn_seq setup failed: {type(ex).__name__}: {ex}"[:240], flush=True)
        for name in ("flash", "cudnn", "cudnn_seq"):
            if name not in fns:
                continue
            try:
                _, kern = time_one(fns[name], a.warmup, a.iters, spin_cycles)
                print(f"v3bwd {idx} {name} {kern:.5f}", flush=True)
                if name == "cudnn":
                    g, h = gpu_ms_profiled(fns[name])
                    print(f"# v3bwd {idx} cudnn varlen: kernels alone {g:.4f} ms (profiler), host {h:.3f} ms per call",
                          flush=True)
            except Exception as ex:
                print(f"# v3bwd {idx} {spec} {name} failed: {type(ex).__name__}: {ex}"[:240], flush=True)
        del sets, fns
        torch.cuda.empty_cache()


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
            lens, cu, tot, mx, sets = varlen_sets(B, Sq, Hq, Hkv, D, dt, gen)

            def fa(x):
                q, k, v = sets[x][:3]
                torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, mx, mx, 0.0, bool(causal), False)

            def cd(x):
                q, k, v = sets[x][:3]
                torch.ops.aten._cudnn_attention_forward(q, k, v, None, cu, cu, mx, mx, True, 0.0, bool(causal))

            views = [[cudnn_seq_views(lens, cu, t) for t in st[:3]] for st in sets]

            def cs(x):
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    for q, k, v in zip(*views[x]):
                        F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal), enable_gqa=Hq != Hkv)

            fns = {"flash": fa, "cudnn": cd, "cudnn_seq": cs}
            backends = ("flash", "cudnn", "cudnn_seq")
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
                if kind == 0 and name == "cudnn":
                    g, h = gpu_ms_profiled(fns[name])
                    print(f"# v3 {idx} cudnn varlen: kernels alone {g:.4f} ms (profiler), host {h:.3f} ms per call",
                          flush=True)
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
    ap.add_argument("--v3bwd", action="store_true")
    ap.add_argument("--probs", default="")
    a = ap.parse_args()
    clock_khz = torch.cuda.get_device_properties(0).clock_rate if hasattr(torch.cuda.get_device_properties(0), "clock_rate") else 1980000
    spin_cycles = int(a.spin_us * clock_khz / 1000)
    if a.v3:
        v3_main(a, spin_cycles)
        return
    if a.v3bwd:
        v3bwd_main(a, spin_cycles)
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
