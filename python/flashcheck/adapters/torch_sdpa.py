"""PyTorch scaled_dot_product_attention's backends as py backends:

    flashcheck certify --backend py:flashcheck.adapters.torch_sdpa:flash      (FlashAttention-2)
                                 py:flashcheck.adapters.torch_sdpa:cudnn      (cuDNN)
                                 py:flashcheck.adapters.torch_sdpa:efficient  (memory-efficient, xformers)
                                 py:flashcheck.adapters.torch_sdpa:math       (the reference math path)

O: F.scaled_dot_product_attention under sdpa_kernel([backend]) on the harness's tensors as they are
(the path users call, with the case's strides and offsets); a case that torch's dispatcher refuses
for that backend ("No available kernel") is Unsupported, any other error a failure. LSE: the
log-sum-exp the backend's own aten op (torch.ops.aten._scaled_dot_product_{flash,cudnn,efficient}_
attention) returns, computed on contiguous copies; math has no LSE output, so its LSE is
torch.logsumexp of the fp32 scores. Backward: the autograd form (torch.autograd.grad through the
same public call: the backend's backward kernel); deterministic-backward cases run under torch's
own deterministic setting (torch.use_deterministic_algorithms), and the harness's bitwise re-run
judges it. GQA: SDPA's own enable_gqa=True (torch >= 2.5), the path users call, whose gradient
reduction is what each preset's gqa_reduce states (math: K/V repeated in fp32 inside the graph,
FA_GQA_FUSED; flash: FA2's dk_expanded summed by at::sum, round_sum32; cudnn: native). Where a
backend's dispatcher refuses enable_gqa ("No available kernel": the memory-efficient backend in
torch versions whose dispatcher does not take GQA for it) k and v are expanded with
repeat_interleave in the dtype and autograd sums the group's gradients (fp32 accumulation of the
dtype tensors, one rounding: round_sum32, which torch-efficient declares); never for math, whose
preset declares the fused reduction that only enable_gqa gives. An empty problem (B or Hq zero)
returns empty outputs (the bridge does not even call the kernel then). Not in SDPA,
declared unsupported: windows, bottom-right causal, additive masks (SDPA takes the bias in the
input dtype, not the contract's fp32). Declines: flashcheck.adapters._refusals. Precision: the
preset torch-<backend> when this flashcheck has it, else tensorcore (the profile of flash
kernels on tensor cores).
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashcheck
from flashcheck.adapters._refusals import refusal


def _expand(k, v, Hq):
    Hkv = k.shape[1]
    if Hq != Hkv:
        k = k.repeat_interleave(Hq // Hkv, dim=1)
        v = v.repeat_interleave(Hq // Hkv, dim=1)
    return k, v


def _lse(kind, q, k, v, is_causal, scale):
    """The log-sum-exp the backend's own aten op returns, [B, H, Sq] fp32, on contiguous copies."""
    q, k, v = (x.detach().contiguous() for x in (q, k, v))
    Sq, D = q.shape[2], q.shape[3]
    if scale is None:
        scale = D ** -0.5
    if kind != "math" and D % 8:
        # the aten ops need a head dim that is a multiple of 8 (the public SDPA call pads it the
        # same way); zero columns leave every score, and so the LSE, unchanged
        pad = 8 - D % 8
        q, k, v = (F.pad(x, (0, pad)) for x in (q, k, v))
    if kind == "flash":
        l = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, is_causal, False, scale=scale)[1]
    elif kind == "cudnn":
        l = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, is_causal, False,
                                                               scale=scale)[1]
    elif kind == "efficient":
        l = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, is_causal,
                                                                   scale=scale)[1]
    else:  # math returns no LSE: logsumexp of the fp32 scores
        s = (q.float() @ k.float().transpose(-1, -2)) * scale
        if is_causal:
            hide = torch.ones(Sq, k.shape[2], dtype=torch.bool, device=s.device).tril().logical_not()
            s = s.masked_fill(hide, float("-inf"))
        l = torch.logsumexp(s, dim=-1)
    if l is None or l.numel() == 0:
        return torch.zeros(q.shape[0], q.shape[1], Sq, dtype=torch.float32, device=q.device)
    return l.reshape(l.shape[0], l.shape[1], -1)[:, :, :Sq].float()


def _declined(kind, e):
    """flashcheck.Unsupported for the backend's own explicit refusal (_refusals), else None."""
    why = refusal(e)
    if why is None:
        return None
    return flashcheck.Unsupported("torch SDPA %s declines this case: %s" % (kind, why[:120]))


def _sdpa(kind, backend, qt, kt, vt, is_causal, scale):
    """O [B, H, Sq, Dv] of the public call under sdpa_kernel([backend]); GQA through enable_gqa
    (or, where the dispatcher refuses it for a backend other than math, the dtype expansion)."""
    gqa = qt.shape[1] != kt.shape[1]
    try:
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=is_causal, scale=scale, enable_gqa=gqa)
    except RuntimeError as e:
        dec = _declined(kind, e)
        if dec is None:
            raise
        if not gqa or kind == "math" or "No available kernel" not in str(e):
            raise dec from None
    ke, ve = _expand(kt, vt, qt.shape[1])
    try:
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(qt, ke, ve, is_causal=is_causal, scale=scale)
    except RuntimeError as e:
        dec = _declined(kind, e)
        if dec is None:
            raise
        raise dec from None


def _empty(qt, kt, vt, out):
    """The outputs of a problem with no batch or no head (every tensor empty): O [B, Sq, Hq, Dv]
    and LSE [B, Hq, Sq] with no element, O on the autograd graph. SDPA itself is not asked: its
    cuDNN backend returned None for B = 0 (torch 2.11, cuda_grid F#173). (Sq = 0 or Sk = 0 go to SDPA, whose fused backends
    decline them.)"""
    B, Hq, Sq = qt.shape[0], qt.shape[1], qt.shape[2]
    o = qt.new_zeros(B, Hq, Sq, vt.shape[3])
    if torch.is_grad_enabled() and any(x.requires_grad for x in (qt, kt, vt)):
        o = o + (qt.sum() + kt.sum() + vt.sum()).to(o.dtype) * 0
    if out is None:
        return o.transpose(1, 2)
    return o.transpose(1, 2), torch.zeros(B, Hq, Sq, dtype=torch.float32, device=qt.device)


def _make(kind):
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[kind]

    @flashcheck.kernel(device="cuda", profile="torch-%s|tensorcore" % kind, backward="autograd",
                       causal=("none", "top_left"), window=False, mask=False, gqa=True, max_head_dim=256,
                       dqk_equals_dv=kind in ("flash", "cudnn"), deterministic=True, name="torch-sdpa-" + kind)
    def attention(q, k, v, *, causal, scale, out, lse):
        # [B, S, H, D] views -> [B, H, S, D] views: the case's strides go to torch unchanged
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        is_causal = causal == "top_left"
        if qt.shape[0] == 0 or qt.shape[1] == 0:  # no batch or no head: every tensor is empty
            return _empty(qt, kt, vt, out)
        o = _sdpa(kind, backend, qt, kt, vt, is_causal, scale)
        if out is None:  # the autograd form's forward
            return o.transpose(1, 2)
        ke, ve = _expand(kt, vt, qt.shape[1])
        return o.transpose(1, 2), _lse(kind, qt, ke, ve, is_causal, scale)

    return attention


flash = _make("flash")
cudnn = _make("cudnn")
efficient = _make("efficient")
math = _make("math")
