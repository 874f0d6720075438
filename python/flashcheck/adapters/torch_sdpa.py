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
judges it. GQA: k and v are expanded with repeat_interleave (differentiable; dK, dV sum over the
group). Not in SDPA, declared unsupported: windows, bottom-right causal, additive masks (SDPA takes
the bias in the input dtype, not the contract's fp32). Precision: the preset torch-<backend> when
this flashcheck has it, else tensorcore (the profile of flash kernels on tensor cores).
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashcheck


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
    return l.reshape(l.shape[0], l.shape[1], -1)[:, :, :Sq].float()


def _make(kind):
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[kind]

    @flashcheck.kernel(device="cuda", profile="torch-%s|tensorcore" % kind, backward="autograd",
                       causal=("none", "top_left"), window=False, mask=False, gqa=True, max_head_dim=256,
                       dqk_equals_dv=kind in ("flash", "cudnn"), deterministic=True, name="torch-sdpa-" + kind)
    def attention(q, k, v, *, causal, scale, out, lse):
        # [B, S, H, D] views -> [B, H, S, D] views: the case's strides go to torch unchanged
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        kt, vt = _expand(kt, vt, qt.shape[1])
        is_causal = causal == "top_left"
        try:
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=is_causal, scale=scale)
        except RuntimeError as e:
            # the backend's own explicit refusals (the dispatcher's "No available kernel", the
            # memory-efficient kernel's TORCH_CHECK on operand alignment) are declines, not failures
            if "No available kernel" in str(e) or "not correctly aligned" in str(e):
                raise flashcheck.Unsupported("torch SDPA %s declines this case: %s" % (kind, str(e).splitlines()[0][:120]))
            raise
        if out is None:  # the autograd form's forward
            return o.transpose(1, 2)
        return o.transpose(1, 2), _lse(kind, qt, kt, vt, is_causal, scale)

    return attention


flash = _make("flash")
cudnn = _make("cudnn")
efficient = _make("efficient")
math = _make("math")
