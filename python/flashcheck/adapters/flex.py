"""PyTorch FlexAttention (torch.nn.attention.flex_attention) as a py backend:

    flashcheck certify --backend py:flashcheck.adapters.flex:attention

Causal (both alignments) and sliding windows become a mask_mod with a BlockMask; GQA uses
enable_gqa; the additive mask is not implemented (Unsupported); LSE is flex_attention's
return_lse; the backward is the autograd form. The kernel is torch.compile'd flex_attention (the
Triton kernels users run); compilation happens once per shape signature in each worker.
"""
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import flashcheck

_compiled = torch.compile(flex_attention, dynamic=False)


@flashcheck.kernel(device="cuda", profile="torch-flex|tensorcore", backward="autograd", mask=False, max_head_dim=128,
                   name="torch-flex")
def attention(q, k, v, *, causal, window, window_align, scale, out, lse):
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    Sq, Sk = qt.shape[2], kt.shape[2]
    br = causal == "bottom_right" or (causal == "none" and window_align == "bottom_right")
    off = Sk - Sq if br else 0
    wl, wr = window if window is not None else (-1, -1)
    is_causal = causal != "none"

    def mask_mod(b, h, i, j):
        diag = i + off
        ok = j >= 0
        if is_causal:
            ok = ok & (j <= diag)
        if wl >= 0:
            ok = ok & (j >= diag - wl)
        if wr >= 0:
            ok = ok & (j <= diag + wr)
        return ok
    if qt.shape[0] == 0 or qt.shape[1] == 0:
        # no batch or no head: every tensor is empty, nothing to compute (flex_attention returns
        # no LSE then); O stays on the autograd graph
        o = qt.new_zeros(qt.shape[0], qt.shape[1], Sq, vt.shape[3])
        if torch.is_grad_enabled() and any(x.requires_grad for x in (qt, kt, vt)):
            o = o + (qt.sum() + kt.sum() + vt.sum()).to(o.dtype) * 0
        if out is None:
            return o.transpose(1, 2)
        return o.transpose(1, 2), torch.zeros(qt.shape[0], qt.shape[1], Sq, dtype=torch.float32, device=q.device)
    if Sq == 0 or Sk == 0:
        raise flashcheck.Unsupported("flex_attention needs Sq, Sk > 0")
    bm = create_block_mask(mask_mod, None, None, Sq, Sk, device=q.device)
    try:
        o, l = _compiled(qt, kt, vt, block_mask=bm, scale=scale, enable_gqa=qt.shape[1] != kt.shape[1], return_lse=True)
    except Exception as e:
        # Inductor found no kernel for this problem (its flex template admits none of its configs):
        # the implementation does not run it, which is FA_ERR_UNSUPPORTED, not a wrong result
        if "NoValidChoicesError" in f"{type(e).__name__}: {e}":
            raise flashcheck.Unsupported("torch.compile(flex_attention) has no kernel for this problem "
                                         "(Inductor NoValidChoicesError)") from None
        raise
    if out is None:  # the autograd form's forward
        return o.transpose(1, 2)
    return o.transpose(1, 2), l.float()
