# cuDNN false-alarm suite case (seed 2, case 187): regenerate it, compare cuDNN's dK/dV with a float64
# reference, and show for the worst key whether it is hidden by the mask where its score is large.
import sys, random, json, torch
sys.path.insert(0, "tests/false_alarm")
import fa_suite as S
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F
seed, i = 2, int(sys.argv[1]) if len(sys.argv) > 1 else 187
rng = random.Random(seed * 1000003 + i)
c = S.make_case(torch, rng, 160, 2e6)
gen = torch.Generator(device="cuda"); gen.manual_seed(seed * 7919 + i)
B, Hq, Hkv, Sq, Sk, D = c["B"], c["Hq"], c["Hkv"], c["Sq"], c["Sk"], c["D"]
q = S.fill(torch, gen, c, (B, Hq, Sq, D), "q"); k = S.fill(torch, gen, c, (B, Hkv, Sk, D), "k")
v = S.fill(torch, gen, c, (B, Hkv, Sk, D), "v"); do = S.fill(torch, gen, c, (B, Hq, Sq, D), "do")
mask = S.make_mask(torch, gen, c)
if mask is not None: mask = mask.to(q.dtype).float()
print("case", i, json.dumps(c))
o, dq, dk, dv = S.run_torch(torch, "cudnn", c, q, k, v, do, mask)
sc = c["scale"] if c["scale"] is not None else D ** -0.5
g = Hq // Hkv
kd, vd = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
qd, dod = q.double().requires_grad_(), do.double()
kd.requires_grad_(); vd.requires_grad_()
s = sc * qd @ kd.transpose(-1, -2)
if mask is not None: s = s + mask.double()
p = torch.softmax(s, -1); od = p @ vd
od.backward(dod)
dkr = kd.grad.view(B, Hkv, g, Sk, D).sum(2); dvr = vd.grad.view(B, Hkv, g, Sk, D).sum(2)
for name, got, ref in (("o", o, od), ("dk", dk, dkr), ("dv", dv, dvr)):
    e = (got.double() - ref.detach()).abs()
    m = e.flatten().argmax().item(); idx = torch.unravel_index(torch.tensor(m), e.shape)
    print(f"{name}: max |err| {e.max().item():.4g} at {tuple(int(x) for x in idx)} got {got.flatten()[m].item():.6g} ref {ref.flatten()[m].item():.6g}")
e = (dv.double() - dvr).abs().amax(-1)  # [B, Hkv, Sk]
b, h, j = (int(x) for x in torch.unravel_index(e.flatten().argmax(), e.shape))
print(f"worst key: b={b} hkv={h} j={j}")
for hq in range(h * g, h * g + g):
    sv = s[b, hq].detach()                       # masked entries are -inf
    raw = sc * (q[b, hq].double() @ k[b, h].double().T)
    vis = torch.isfinite(sv)
    rowmax = torch.where(vis, sv, torch.tensor(-1e300, device=sv.device, dtype=sv.dtype)).amax(-1)
    hid = ~vis[:, j]
    lead = (raw[:, j] - rowmax)
    print(f" hq={hq}: rows hiding key {j}: {int(hid.sum())}/{Sq}; max over hiding rows of raw s_ij - visible rowmax: "
          f"{lead[hid].max().item() if hid.any() else float('nan'):.4g}; over seeing rows: {lead[~hid].max().item() if (~hid).any() else float('nan'):.4g}")

# H1: does cuDNN's own LSE (the backward recomputes P = exp(s - lse)) differ from the exact one?
qc, kc, vc = (x.detach().contiguous() for x in (q, k, v))
am = (mask == 0) if mask is not None else None
try:
    outs = torch.ops.aten._scaled_dot_product_cudnn_attention(qc, kc, vc, am, True, 0.0, False, False, scale=sc)
    lse_c = outs[1].reshape(B, Hq, -1)[:, :, :Sq].double()
    lse_x = torch.logsumexp(s.detach(), -1)
    dl = (lse_c - lse_x).abs()
    print(f"cudnn LSE vs exact: max |diff| {dl.max().item():.4g} at {tuple(int(x) for x in torch.unravel_index(dl.flatten().argmax(), dl.shape))}; rows with |diff| > 1: {int((dl > 1).sum())}")
except Exception as ex:
    print("cudnn aten op with the mask failed:", str(ex).split(chr(10))[0][:200]); lse_c = None
e = (dk.double() - dkr).abs().amax(-1)
b, h, j = (int(x) for x in torch.unravel_index(e.flatten().argmax(), e.shape))
print(f"worst dK key: b={b} hkv={h} j={j} max|err| {e.max().item():.4g}")
for hq in range(h * g, h * g + g):
    sv = s[b, hq, :, j].detach(); lx = torch.logsumexp(s[b, hq].detach(), -1)
    pe = torch.exp(sv - lx)
    line = f" hq={hq}: rows with exact P_ij > 1e-6: {int((pe > 1e-6).sum())}"
    if lse_c is not None:
        arg = sv - lse_c[b, hq]
        bad = torch.isfinite(arg) & (arg > -20) & (pe < 1e-6)
        line += f"; rows where s_ij - lse_cudnn > -20 but exact P < 1e-6: {int(bad.sum())}"
        if bad.any():
            i0 = int(bad.nonzero()[0]); line += f" (row {i0}: s-lse_cudnn {arg[i0].item():.4g}, s-lse_exact {(sv[i0]-lx[i0]).item():.4g})"
    print(line)
