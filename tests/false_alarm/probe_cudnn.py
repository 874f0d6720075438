#!/usr/bin/env python3
"""probe_cudnn.py: measure what the PyTorch SDPA backward kernels do where their source is closed
(cuDNN) or leaves doubt (memory-efficient), so that the presets of kernels/api/fa_profile.c rest on
evidence (issue 13; oracle/BOUNDS.md 10.3, 10.4, 10.6, 10.7).

Method. Each test builds inputs on which the hypotheses for one profile field give outputs that differ
by far more than anything the hypotheses share (fp32 accumulation ~2^-22 relative, the final store).
For every hypothesis (a combination of field values) a float64 emulation on the GPU computes
dQ, dK, dV doing exactly the roundings the hypothesis names (dtype roundings via .to(dtype), every
other operation in float64: the fp32 errors of a real kernel are far below the designed effects), and
the distance of the backend's output to it is

    dist = ||X_backend - X_hyp||_F / max(||X_hyp||_F, ||X_backend||_F)      (per trial, per tensor)

For a field F and value x, dist_F(x) = min over the hypotheses with F = x of the median over trials.
The field is DECIDED x* when dist_F(x*) * 4 <= dist_F(y) for every other value y (and x* wins the
majority of trials); otherwise UNDECIDED and the preset keeps the dominating value (BOUNDS.md 10.7).
flash (FlashAttention-2, source known) and math (fp32 graph, source known) run as controls: the
probe must recover their known settings, or its cuDNN/efficient decisions are not to be trusted.

Tests:
  fold   fp16 (and bf16) with the scale 0.01 (1e-4): dS unscaled ~8e-6 sits at ~130 fp16 subnormal ulps,
         scale*dS ~8e-8 at ~1: rounding dS after folding the scale quantizes dQ by ~30%, before
         by ~0.4%, not at all (dS kept fp32) by 0; decides ds_scale_folded and ds_rounded.
  dp     V_j = v0 + eps_j (eps a few ulps of 1): dP_j ~ 6 and dP_j - D ~ 0.03, so rounding dP to the
         dtype moves dS by ~3%, and D = dO.O_stored (the rounded O) differs from D = sum_j P dP by ~3%;
         decides dp_rounded and d_source.
  gqa    G = 8 query heads per K/V head, odd heads dO negated and Q scaled by (1 + 2^-8): the heads'
         dK/dV parts nearly cancel (sum ~ 2^-7 of a part), so rounding each part to the dtype before
         the group sum moves dK/dV by ~10% (fp16) while one fp32 sum does not; decides gqa_reduce.
  lse    the aten op of the backend with compute_log_sumexp and a bias hiding row 0: the LSE stored
         for a row with no visible key; decides lse_empty.

usage: probe_cudnn.py [--backends cudnn,efficient,flash,math] [--trials 6] [--seed 1] [--budget SEC]
                      [--tests TEST:DTYPE[:HEAD_DIM],...]   (tests fold, dp, gqa; head dim 64 by default)
A field whose tests disagree (e.g. another cuDNN engine at another head dim) is reported "conflict"
and keeps its dominating value.
exit: 0 ran (the table says what was decided), 77 no PyTorch with CUDA (nothing ran), 2 usage.
"""
import argparse
import itertools
import math
import sys
import time

FIELDS = ["ds_rounded", "ds_scale_folded", "dp_rounded", "d_source", "gqa_reduce", "p_rounded_dv"]
REPORTED = ["ds_rounded", "ds_scale_folded", "flush", "dp_rounded", "d_source", "gqa_per_head", "gqa_reduce",
            "p_rounded_dv", "p_rounded_ds", "lse_empty"]
# what each preset of kernels/api/fa_profile.c declares today (for the comparison column)
PRESET = {
    "cudnn": {"ds_rounded": 1, "ds_scale_folded": 1, "flush": 1, "dp_rounded": 0, "d_source": "O",
              "gqa_per_head": 1, "gqa_reduce": "round_sum32", "p_rounded_dv": 1, "p_rounded_ds": 1, "lse_empty": "-inf"},
    "efficient": {"ds_rounded": 1, "ds_scale_folded": 1, "flush": 1, "dp_rounded": 0, "d_source": "O",
                  "gqa_per_head": 1, "gqa_reduce": "round_sum32", "p_rounded_dv": 1, "p_rounded_ds": 1, "lse_empty": "0"},
    "flash": {"ds_rounded": 1, "ds_scale_folded": 0, "flush": 1, "dp_rounded": 0, "d_source": "O",
              "gqa_per_head": 1, "gqa_reduce": "round_sum32", "p_rounded_dv": 1, "p_rounded_ds": 1, "lse_empty": "+inf"},
    "math": {"ds_rounded": 0, "ds_scale_folded": 0, "flush": 1, "dp_rounded": 0, "d_source": "P",
             "gqa_per_head": 0, "gqa_reduce": "fused", "p_rounded_dv": 0, "p_rounded_ds": 0, "lse_empty": "-"},
}
# preset values that dominate the others (BOUNDS.md 10.7): a measured narrower value is "narrow", not a contradiction
DOMINATING = {("ds_scale_folded", "2"), ("flush", "1"), ("dp_rounded", "1"), ("ds_rounded", "1"),
              ("p_rounded_dv", "1"), ("p_rounded_ds", "1"), ("gqa_per_head", "1"), ("gqa_reduce", "round_sum16")}


def emulate(torch, h, q, k, v, o, do, scale, dt):
    """dQ, dK, dV (float64) of hypothesis h on the given dtype inputs (float64 tensors holding dtype
    values); o: the backend's own stored forward output (D from O uses it, as the kernels do)."""
    f64 = torch.float64

    def rd(x):
        return x.to(dt).to(f64)

    B, Hq, Sq, D = q.shape
    Hkv = k.shape[1]
    G = Hq // Hkv
    kx = k.repeat_interleave(G, dim=1)
    vx = v.repeat_interleave(G, dim=1)
    s = q @ kx.transpose(-1, -2) * scale
    P = torch.softmax(s, dim=-1)
    dP = do @ vx.transpose(-1, -2)
    if h["dp_rounded"]:
        dP = rd(dP)
    if h["d_source"] == "O":
        Dv = (do * o).sum(-1, keepdim=True)
    else:
        Dv = (P * dP).sum(-1, keepdim=True)
    dS = (rd(P) if h["p_rounded_ds"] else P) * (dP - Dv)
    fold = h["ds_scale_folded"]

    def store_ds(x):  # the dS store: rounded to the dtype, fp32 subnormals flushed first (flush 1)
        if h["flush"]:
            x = torch.where(x.abs() < 2.0 ** -126, torch.zeros_like(x), x)
        return rd(x) if h["ds_rounded"] else x
    if fold:
        dS = store_ds(scale * dS)
        dq = dS @ kx
        dkh = dS.transpose(-1, -2) @ q
    else:
        dS = store_ds(dS)
        dq = scale * (dS @ kx)
        dkh = scale * (dS.transpose(-1, -2) @ q)
    Pv = rd(P) if h["p_rounded_dv"] else P
    dvh = Pv.transpose(-1, -2) @ do

    def group(x):
        x = x.reshape(B, Hkv, G, x.shape[-2], x.shape[-1])
        g = h["gqa_reduce"]
        if g == "fused" or G == 1:
            return x.sum(2)
        if g == "round_sum32":
            return rd(x).sum(2)
        acc = rd(x[:, :, 0])  # round_sum16: parts in the dtype, summed in the dtype one by one
        for i in range(1, G):
            acc = rd(acc + rd(x[:, :, i]))
        return acc
    return rd(dq), rd(group(dkh)), rd(group(dvh))


def hypotheses(test, G):
    vals = {"ds_rounded": [0, 1], "ds_scale_folded": [0, 1], "flush": [0, 1], "dp_rounded": [0, 1],
            "d_source": ["O", "P"], "gqa_reduce": ["fused", "round_sum32", "round_sum16"] if G > 1 else ["fused"],
            "p_rounded_dv": [0, 1] if test == "gqa" else [1], "p_rounded_ds": [0, 1]}
    if test != "fold":
        vals["flush"] = [0]  # no fp32 subnormal anywhere in these tests
    keys = list(vals)
    for combo in itertools.product(*(vals[x] for x in keys)):
        yield dict(zip(keys, combo))


# the value of a field a hypothesis stands for (gqa_per_head: any per-head rounding, whichever sum)
FIELD_OF = {f: (lambda h, f=f: str(h[f])) for f in FIELDS + ["flush", "p_rounded_ds"]}
FIELD_OF["gqa_per_head"] = lambda h: "0" if h["gqa_reduce"] == "fused" else "1"


def run_backend(torch, backend, q, k, v, do, scale, gqa):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
          "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[backend]
    qq, kk, vv = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    kw = {"scale": scale}
    if gqa:
        kw["enable_gqa"] = True
    with sdpa_kernel([be]):
        o = F.scaled_dot_product_attention(qq, kk, vv, **kw)
        o.backward(do)
    torch.cuda.synchronize()
    return o.detach(), qq.grad, kk.grad, vv.grad


def make_inputs(torch, test, dtname, gen, D=64):
    """(q, k, v, do, scale, gqa, tensors judged, fields decided) of one trial of a test."""
    dt = torch.float16 if dtname == "fp16" else torch.bfloat16
    dev = "cuda"

    def rn(*shape):
        return torch.randn(*shape, generator=gen, device=dev, dtype=torch.float64)
    B, Sq, Sk = 1, 64, 128
    if test == "fold":
        if dtname == "fp16":  # dS ~ 8e-6 (130 subnormal ulps), scale dS ~ 8e-8 (~1 ulp); dQ ~ 1e-3 normal
            scale, qm, km, vm, dom = 0.01, 1e-3, 1e3, 0.0125, 0.01
        else:  # bf16: dS ~ 6e-36 normal, scale dS ~ 6e-40 (fp32/bf16 subnormal, ~6 ulps); dQ ~ 1e-33 normal
            scale, qm, km, vm, dom = 1e-4, 1e-3, 1e5, 1e-17, 1e-17
        q, k, v, do = rn(B, 1, Sq, D) * qm, rn(B, 1, Sk, D) * km, rn(B, 1, Sk, D) * vm, rn(B, 1, Sq, D) * dom
        return q.to(dt), k.to(dt), v.to(dt), do.to(dt), scale, False, ["dq"], ["ds_rounded", "ds_scale_folded", "flush"]
    if test == "dp":
        eps = 4 * (2.0 ** -10 if dtname == "fp16" else 2.0 ** -7)  # 4 ulps of 1
        v0 = torch.rand(1, 1, 1, D, generator=gen, device=dev, dtype=torch.float64) * 0.5 + 0.5
        v = v0 + eps * rn(B, 1, Sk, D)
        q, k, do = rn(B, 1, Sq, D), rn(B, 1, Sk, D), rn(B, 1, Sq, D)
        return q.to(dt), k.to(dt), v.to(dt), do.to(dt), 1 / math.sqrt(D), False, ["dq", "dk"], \
            ["dp_rounded", "d_source"]
    if test == "gqa":
        G = 8
        qb, dob = rn(B, 1, Sq, D).to(dt).double(), rn(B, 1, Sq, D).to(dt).double()
        qs, dos = [], []
        for hh in range(G):
            qs.append(qb * (1 + 2.0 ** -8) if hh % 2 else qb)
            dos.append(-dob if hh % 2 else dob)
        q, do = torch.cat(qs, 1), torch.cat(dos, 1)
        k, v = rn(B, 1, Sk, D), rn(B, 1, Sk, D)
        return q.to(dt), k.to(dt), v.to(dt), do.to(dt), 1 / math.sqrt(D), True, ["dk", "dv"], ["gqa_per_head", "gqa_reduce", "p_rounded_dv", "p_rounded_ds"]
    raise ValueError(test)


def probe_lse(torch, backend, dtname):
    """LSE the backend's aten op stores for a row with no visible key (row 0 hidden by a -inf bias)."""
    dt = torch.float16 if dtname == "fp16" else torch.bfloat16
    B, H, S, D = 1, 2, 64, 64
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dt) for _ in range(3))
    bias = torch.zeros(B, H, S, S, device="cuda", dtype=dt)
    bias[:, :, 0, :] = float("-inf")
    try:
        if backend == "cudnn":
            r = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, bias, True, 0.0, False, False)
        elif backend == "efficient":
            r = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, 0.0, False)
        else:
            return None, "no aten op with a bias"
    except Exception as e:  # an op signature this torch lacks: no evidence
        return None, f"op failed: {str(e).splitlines()[0][:100]}"
    lse = r[1].float()
    empty = lse[:, :, 0].flatten().tolist()
    other = lse[:, :, 1:S]
    vals = sorted(set(repr(x) for x in empty))
    if all(x == float("-inf") for x in empty):
        dec = "-inf"
    elif all(x == float("inf") for x in empty):
        dec = "+inf"
    elif all(x == 0 for x in empty):
        dec = "0"
    else:
        dec = "other"
    return dec, f"empty-row LSE values {vals[:4]}; visible rows finite: {bool(torch.isfinite(other).all().item())}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="cudnn,efficient,flash,math")
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--budget", type=float, default=95, help="stop starting tests after SEC seconds")
    ap.add_argument("--tests", default="fold:fp16,fold:bf16,dp:fp16,dp:bf16,gqa:fp16,gqa:bf16")
    args = ap.parse_args()
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("torch.cuda.is_available() is False")
    except ImportError as e:
        print(f"probe_cudnn: SKIPPED: PyTorch with CUDA is not available ({e})")
        return 77
    import warnings
    warnings.filterwarnings("ignore")
    t0 = time.time()
    print(f"probe_cudnn: torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name(0)}; trials {args.trials}, seed {args.seed}")
    backends = [b for b in args.backends.split(",") if b]
    decisions = {b: {} for b in backends}  # field -> list of (test, decision, evidence)
    for test_dt in args.tests.split(","):
        test, dtname, *dim = test_dt.split(":")  # test:dtype[:head_dim]
        dim = int(dim[0]) if dim else 64
        dt = torch.float16 if dtname == "fp16" else torch.bfloat16
        for be in backends:
            if time.time() - t0 > args.budget:
                print(f"  {be:<9} {test_dt:<9} not run: time budget ({args.budget:.0f} s) spent")
                continue
            dists = {}  # hyp index -> list of per-trial dist (sum over judged tensors)
            hyps = None
            refused = None
            for trial in range(args.trials):
                gen = torch.Generator(device="cuda")
                gen.manual_seed(args.seed * 100003 + trial * 7 + sum(map(ord, test_dt)))
                q, k, v, do, scale, gqa, judged, fields = make_inputs(torch, test, dtname, gen, dim)
                try:
                    o, dq, dk, dv = run_backend(torch, be, q, k, v, do, scale, gqa)
                except Exception as e:  # a refused combination (RuntimeError "No available kernel") or any other error
                    refused = f"{type(e).__name__}: " + (str(e).splitlines() or [""])[0][:100]
                    break
                got = {"dq": dq.double(), "dk": dk.double(), "dv": dv.double()}
                G = q.shape[1] // k.shape[1]
                if hyps is None:
                    hyps = list(hypotheses(test, G))
                for hi, h in enumerate(hyps):
                    e = dict(zip(["dq", "dk", "dv"], emulate(torch, h, q.double(), k.double(), v.double(), o.double(),
                                                              do.double(), scale, dt)))
                    d = 0.0
                    for t in judged:
                        den = max(e[t].norm().item(), got[t].norm().item(), 1e-300)
                        d += (got[t] - e[t]).norm().item() / den
                    dists.setdefault(hi, []).append(d / len(judged))
            if refused:
                print(f"  {be:<9} {test_dt:<9} refused: {refused}")
                continue
            ntr = len(next(iter(dists.values())))
            med = {hi: sorted(x)[len(x) // 2] for hi, x in dists.items()}
            best = min(med, key=med.get)
            for f in fields:
                fv = FIELD_OF[f]
                vals = sorted({fv(h) for h in hyps})
                fd = {val: min(med[hi] for hi, h in enumerate(hyps) if fv(h) == val) for val in vals}
                wins = {val: 0 for val in vals}
                for tr in range(ntr):
                    bi = min(dists, key=lambda hi: dists[hi][tr])
                    wins[fv(hyps[bi])] += 1
                xs = min(fd, key=fd.get)
                second = min((fd[x] for x in fd if x != xs), default=float("inf"))
                decided = second >= 4 * fd[xs] and second > fd[xs] and wins[xs] * 2 > ntr
                ev = ", ".join(f"{val}: {fd[val]:.3g} ({wins[val]}/{ntr} wins)" for val in vals)
                decisions[be].setdefault(f, []).append((test_dt, xs if decided else "undecided", ev))
                print(f"  {be:<9} {test_dt:<9} {f:<16} -> {xs if decided else 'UNDECIDED':<11} dist by value: {ev}")
            print(f"  {be:<9} {test_dt:<9} best hypothesis {hyps[best]} dist {med[best]:.3g}")
    for be in backends:
        if be in ("cudnn", "efficient"):
            for dtname in ("fp16", "bf16"):
                dec, ev = probe_lse(torch, be, dtname)
                decisions[be].setdefault("lse_empty", []).append((f"lse:{dtname}", dec or "undecided", ev))
                print(f"  {be:<9} lse:{dtname:<5} lse_empty        -> {dec or 'UNDECIDED':<11} {ev}")
    # decision table: a field is decided when every test that decides it agrees
    print(f"\nprobe_cudnn: decision table ({time.time() - t0:.1f} s)")
    print(f"{'backend':<10} {'field':<16} {'preset now':<12} {'measured':<12} {'verdict':<10} tests")
    ctrl_bad = 0
    for be in backends:
        for f in REPORTED:
            rows = decisions[be].get(f)
            if not rows:
                continue
            ds = {r[1] for r in rows} - {"undecided"}  # a test that cannot see the field says nothing
            meas = ds.pop() if len(ds) == 1 else ("undecided" if not ds else "conflict")
            now = str(PRESET.get(be, {}).get(f, "-"))
            if meas in ("undecided", "conflict"):
                verdict = "keep"
            elif now == meas:
                verdict = "agrees"
            elif (f, now) in DOMINATING or (f == "gqa_reduce" and now == "round_sum32" and meas == "fused"):
                verdict = "narrow"
            else:
                verdict = "CONTRADICTS"
            if be in ("flash", "math") and verdict == "CONTRADICTS":
                ctrl_bad += 1
            print(f"{be:<10} {f:<16} {now:<12} {meas:<12} {verdict:<10} " + "; ".join(f"{r[0]}={r[1]}" for r in rows))
    print("verdict: agrees = the preset says what was measured; narrow = the preset has the dominating value and the "
          "measurement allows the narrower one; CONTRADICTS = the preset declares something the kernel does not do; "
          "keep = no evidence either way (dominating value stays)")
    if ctrl_bad:
        print(f"probe_cudnn: CONTROL FAILED: {ctrl_bad} decisions on flash/math (source known) contradict their source: "
              "the probe's emulations are not trustworthy")
    else:
        print("probe_cudnn: controls (flash, math) consistent with their source")
    return 0


if __name__ == "__main__":
    sys.exit(main())
