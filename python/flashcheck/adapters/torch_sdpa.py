"""PyTorch scaled_dot_product_attention's backends as py backends:

    flashcheck certify --backend py:flashcheck.adapters.torch_sdpa:flash      (FlashAttention-2)
                                 py:flashcheck.adapters.torch_sdpa:cudnn      (cuDNN)
                                 py:flashcheck.adapters.torch_sdpa:efficient  (memory-efficient, xformers)
                                 py:flashcheck.adapters.torch_sdpa:math       (the reference math path)

Forward: the backend's own aten op (torch.ops.aten._scaled_dot_product_{flash,cudnn,efficient}_
attention), which also returns the log-sum-exp the kernel computed, so O and LSE are both the
kernel's. math has no LSE output: its LSE is torch.logsumexp of the fp32 scores (the LSE check then
judges that line, O is the math path's). Backward: the autograd form (torch.autograd.grad through
the same op: the backend's backward kernel). GQA: k and v are expanded with repeat_interleave
(differentiable; dK, dV sum over the group). What SDPA does not have is declared unsupported:
windows, bottom-right causal, additive masks (the aten ops take the bias in the input dtype, not the
contract's fp32), deterministic backward. A shape the backend refuses is Unsupported when torch's
own dispatcher (F.scaled_dot_product_attention under sdpa_kernel(backend)) refuses it too; any other
error is a failure. Precision: the preset torch-<backend> when this flashcheck has it, else
tensorcore (the profile of flash kernels on tensor cores).
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashcheck


def _prep(x):
    """[B, S, H, D] harness view -> [B, H, S, D] view; copied only where the aten op needs it
    (inner dimension not contiguous, or a base not 16-byte aligned), as SDPA's own wrapper does."""
    if x.stride(-1) != 1 or x.data_ptr() % 16 != 0:
        x = x.contiguous()
    return x.transpose(1, 2)


def _expand(k, v, Hq):
    Hkv = k.shape[1]
    if Hq != Hkv:
        k = k.repeat_interleave(Hq // Hkv, dim=1)
        v = v.repeat_interleave(Hq // Hkv, dim=1)
    return k, v


def _refused(backend, q, k, v, causal, scale):
    """True when torch's SDPA dispatcher has no kernel of `backend` for these inputs."""
    try:
        with sdpa_kernel([backend]):
            F.scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), is_causal=causal, scale=scale)
        return False
    except RuntimeError as e:
        return "No available kernel" in str(e)


def _make(kind):
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[kind]

    @flashcheck.kernel(device="cuda", profile="torch-%s|tensorcore" % kind, backward="autograd",
                       causal=("none", "top_left"), window=False, mask=False, gqa=True, max_head_dim=256,
                       dqk_equals_dv=kind in ("flash", "cudnn"), name="torch-sdpa-" + kind)
    def attention(q, k, v, *, causal, scale, out, lse):
        qt, kt, vt = _prep(q), _prep(k), _prep(v)
        B, Hq, Sq, _ = qt.shape
        kt, vt = _expand(kt, vt, Hq)
        is_causal = causal == "top_left"
        try:
            if kind == "flash":
                r = torch.ops.aten._scaled_dot_product_flash_attention(qt, kt, vt, 0.0, is_causal, False, scale=scale)
                o, l = r[0], r[1]
            elif kind == "cudnn":
                r = torch.ops.aten._scaled_dot_product_cudnn_attention(qt, kt, vt, None, True, 0.0, is_causal, False,
                                                                       scale=scale)
                o, l = r[0], r[1]
            elif kind == "efficient":
                r = torch.ops.aten._scaled_dot_product_efficient_attention(qt, kt, vt, None, True, 0.0, is_causal,
                                                                           scale=scale)
                o, l = r[0], r[1]
            else:
                o = torch.ops.aten._scaled_dot_product_attention_math(qt, kt, vt, None, 0.0, is_causal,
                                                                      scale=scale)[0]
                s = (qt.float() @ kt.float().transpose(-1, -2)) * scale
                if is_causal:
                    s = s.masked_fill(torch.ones(Sq, kt.shape[2], dtype=torch.bool, device=s.device)
                                      .tril().logical_not(), float("-inf"))
                l = torch.logsumexp(s, dim=-1)
        except RuntimeError:
            if _refused(backend, qt, kt, vt, is_causal, scale):
                raise flashcheck.Unsupported("torch SDPA has no %s kernel for this case" % kind)
            raise
        l = l.reshape(l.shape[0], l.shape[1], -1)[:, :, :Sq].float()
        return o.transpose(1, 2), l

    return attention


flash = _make("flash")
cudnn = _make("cudnn")
efficient = _make("efficient")
math = _make("math")
