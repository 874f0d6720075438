# Stand-in SDPA for probe_dryrun_test.sh (never a measurement): each backend is probe_cudnn's own
# emulation of a PLANTED setting plus relative noise 1e-7; the test checks that the probe's decision
# logic recovers what was planted. PROBE_FAKE_FLASH_FOLD=1 plants a flash that folds the scale, which
# the probe must report as a failed control.
import os
import numpy as np, torch, probe_cudnn as P
from torch.nn import attention as A
PLANT = {"cudnn": dict(ds_rounded=1, ds_scale_folded=0, flush=1, dp_rounded=0, d_source="O", gqa_reduce="fused", p_rounded_dv=1, p_rounded_ds=0),
         "efficient": dict(ds_rounded=1, ds_scale_folded=1, flush=1, dp_rounded=0, d_source="O", gqa_reduce="round_sum32", p_rounded_dv=1, p_rounded_ds=1),
         "flash": dict(ds_rounded=1, ds_scale_folded=0, flush=1, dp_rounded=0, d_source="O", gqa_reduce="round_sum32", p_rounded_dv=1, p_rounded_ds=0),
         "math": dict(ds_rounded=0, ds_scale_folded=0, flush=0, dp_rounded=0, d_source="P", gqa_reduce="fused", p_rounded_dv=0, p_rounded_ds=0)}
if os.environ.get("PROBE_FAKE_FLASH_FOLD") == "1":
    PLANT["flash"]["ds_scale_folded"] = 1
rng = np.random.default_rng(5)
def scaled_dot_product_attention(q, k, v, scale=None, enable_gqa=False):
    be = A.CUR[0]; dt = q.dtype
    G = q.shape[1] // k.shape[1]
    if be == "efficient" and G > 1: raise RuntimeError("No available kernel. (fake)")
    kx, vx = k.a.repeat(G, axis=1), v.a.repeat(G, axis=1)
    s = q.a @ np.swapaxes(kx, -1, -2) * scale; e = np.exp(s - s.max(-1, keepdims=True)); Pm = e / e.sum(-1, keepdims=True)
    o = torch.Tensor(Pm @ vx).to(dt)
    def bw(do):
        h = PLANT[be]
        dq, dk, dv = P.emulate(torch, h, q.double(), k.double(), v.double(), o.double(), do.double(), scale, dt)
        for t, x in (("q", dq), ("k", dk), ("v", dv)):
            y = torch.Tensor(x.a * (1 + 1e-7 * rng.standard_normal(x.a.shape))).to(dt)
            {"q": q, "k": k, "v": v}[t].grad = y
    torch._BW[0] = bw
    return o
