"""Kernels of the py backend tests: exception paths (examples/numpy_attention.py has the real ones)."""
import flashcheck


@flashcheck.kernel(device="cpu", profile="fp32")
def raises(q, k, v, *, out, lse):
    raise ZeroDivisionError("planted failure in the kernel")


@flashcheck.kernel(device="cpu", profile="fp32")
def unsupported(q, k, v, *, out, lse):
    raise flashcheck.Unsupported("this kernel implements nothing")


@flashcheck.kernel(device="cpu", profile="no-such-preset")
def bad_profile(q, k, v, *, out, lse):
    pass


# a dict profile (python/flashcheck/_decl.py PROFILE_FIELDS), without and with the optional
# masked_nonfinite (kernels/flash_api.h fa_masked_nonfinite)
_FP64_PROFILE = dict(u_acc=2.0 ** -24, exp_rel_err=2.0 ** -23, scores_fp32=1, p_rounded=0, ds_rounded=0,
                     out_rounded=1, max_rescales=0, flushes_subnormals=0)


@flashcheck.kernel(device="cpu", profile=dict(_FP64_PROFILE))
def dict_profile(q, k, v, *, out, lse):
    raise flashcheck.Unsupported("declarations only")


@flashcheck.kernel(device="cpu", profile=dict(_FP64_PROFILE, masked_nonfinite="propagates"))
def dict_profile_propagates(q, k, v, *, out, lse):
    raise flashcheck.Unsupported("declarations only")


@flashcheck.kernel(device="cpu", profile="fp32", name="noop")
def noop(q, k, v, *, out, lse):
    """Writes nothing: the bridge's cost alone (kernels/py/py_call_bench.c)."""


# --------------------------------------------------------------------------------------------
# Contract v3 through the bridge (python/README.md "Contract v3"): a float64 numpy kernel that
# claims varlen, paged, softcap and sinks and reads every keyword the bridge passes (packed rows,
# page pools, seqused_k, the sink logits; dsinks in the backward), and broken copies of it.
import os  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

from flashcheck.host import from_float, to_float  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
from numpy_attention import _visible  # noqa: E402


def _v3_make(bug=None):
    def seqs(q, k, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, max_seqlen_q, max_seqlen_k):
        """per sequence b: (query index, Sq_b, key index, Sk_b); an index selects rows of a q-side
        (resp. k-side) array as [S, H, D] and is also where its gradient rows go"""
        B = len(cu_seqlens_q) - 1 if cu_seqlens_q is not None else q.shape[0]
        for b in range(B):
            if cu_seqlens_q is not None:
                qi = np.arange(cu_seqlens_q[b], cu_seqlens_q[b + 1])
            else:
                qi = (b, slice(0, max_seqlen_q))
            if block_table is not None:
                ps = k.shape[1]
                alloc = block_table.shape[1] * ps
            elif cu_seqlens_k is not None:
                alloc = int(cu_seqlens_k[b + 1] - cu_seqlens_k[b])
            else:
                alloc = max_seqlen_k
            sk = alloc if block_table is None else max_seqlen_k
            if seqused_k is not None and bug != "seqused":
                sk = int(seqused_k[b])
            j = np.arange(sk)
            if block_table is not None:
                page = block_table[b, 0] + j // ps if bug == "page" else block_table[b, j // ps]
                ki = (page, j % ps)
            elif cu_seqlens_k is not None:
                ki = cu_seqlens_k[b] + j
            else:
                ki = (b, slice(0, sk))
            yield b, qi, (len(qi) if cu_seqlens_q is not None else max_seqlen_q), ki, sk

    def rows(x, idx, dtype):
        return to_float(x[idx], dtype).astype(np.float64)  # [S, H, D]

    def head(qf, kf, h, g, scale, softcap, vis):
        s = scale * (qf[:, h] @ kf[:, h // g].T)
        t = None
        if softcap:
            t = np.tanh(s / softcap)
            s = softcap * t
        return np.where(vis, s, -np.inf), t

    def probs(s, sink):
        m = s.max(axis=1, initial=-np.inf)
        if sink is not None:
            m = np.maximum(m, sink)
        empty = np.isneginf(m)
        ms = np.where(empty, 0.0, m)
        e = np.where(np.isneginf(s), 0.0, np.exp(s - ms[:, None]))
        den = e.sum(axis=1) + (np.exp(sink - ms) if sink is not None else 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(empty[:, None], 0.0, e / np.where(empty, 1.0, den)[:, None])
            lse = np.where(empty, -np.inf, ms + np.log(np.where(empty, 1.0, den)))
        return p, lse

    def lse_at(lse, cu_seqlens_q, b, h, qi):
        return (h, qi) if cu_seqlens_q is not None else (b, h)

    @flashcheck.kernel(device="cpu", profile="fp32", varlen=True, paged=True, softcap=True, sinks=True, deterministic=True,
                       name="numpy-v3" if bug is None else "numpy-v3-broken-" + bug)
    class Kernel:
        @staticmethod
        def forward(q, k, v, *, causal, window, window_align, scale, mask, out, lse, dtype, cu_seqlens_q,
                    cu_seqlens_k, seqused_k, block_table, max_seqlen_q, max_seqlen_k, softcap, sinks):
            Hq, Hkv = q.shape[-2], k.shape[-2]
            g = Hq // Hkv
            for b, qi, sq, ki, sk in seqs(q, k, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, max_seqlen_q,
                                          max_seqlen_k):
                qf, kf, vf = rows(q, qi, dtype), rows(k, ki, dtype), rows(v, ki, dtype)
                vis = _visible(sq, sk, causal, window, window_align)
                ob = np.zeros((sq, Hq, v.shape[-1]))
                for h in range(Hq):
                    s, _ = head(qf, kf, h, g, scale, softcap, vis)
                    if mask is not None:
                        s = s + mask[b, h, :sq, :sk]
                    p, l = probs(s, None if sinks is None or bug == "sinks" else float(sinks[h]))
                    ob[:, h] = p @ vf[:, h // g] if sk else 0.0
                    lse[lse_at(lse, cu_seqlens_q, b, h, qi)] = l.astype(np.float32)
                out[qi] = from_float(ob, dtype, out)

        @staticmethod
        def backward(q, k, v, o, do, lse, *, causal, window, window_align, scale, mask, dq, dk, dv, dtype,
                     cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, max_seqlen_q, max_seqlen_k, softcap, sinks,
                     dsinks):
            Hq, Hkv = q.shape[-2], k.shape[-2]
            g = Hq // Hkv
            gq, gk, gv = np.zeros(dq.shape), np.zeros(dk.shape), np.zeros(dv.shape)
            gs = np.zeros(Hq)
            for b, qi, sq, ki, sk in seqs(q, k, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, max_seqlen_q,
                                          max_seqlen_k):
                qf, kf, vf, dof = rows(q, qi, dtype), rows(k, ki, dtype), rows(v, ki, dtype), rows(do, qi, dtype)
                vis = _visible(sq, sk, causal, window, window_align)
                dqb, dkb, dvb = np.zeros(qf.shape), np.zeros(kf.shape), np.zeros(vf.shape)
                for h in range(Hq):
                    s, t = head(qf, kf, h, g, scale, softcap, vis)
                    if mask is not None:
                        s = s + mask[b, h, :sq, :sk]
                    sink = None if sinks is None else float(sinks[h])
                    p, l = probs(s, sink)
                    of = p @ vf[:, h // g]
                    dvb[:, h // g] += p.T @ dof[:, h]
                    dp = dof[:, h] @ vf[:, h // g].T
                    dsum = (dof[:, h] * of).sum(axis=1)
                    ds = p * (dp - dsum[:, None])
                    if t is not None:
                        ds = ds * (1.0 - t * t)
                    dqb[:, h] = scale * ds @ kf[:, h // g]
                    dkb[:, h // g] += scale * ds.T @ qf[:, h]
                    if sink is not None:
                        gs[h] -= (np.exp(sink - l) * dsum).sum()
                gq[qi] = dqb
                if isinstance(ki, tuple) and isinstance(ki[1], slice):
                    gk[ki] += dkb
                    gv[ki] += dvb
                else:  # packed rows or (page, slot) pairs: a shared page accumulates
                    np.add.at(gk, ki, dkb)
                    np.add.at(gv, ki, dvb)
            dq[...] = from_float(gq, dtype, dq)
            dk[...] = from_float(gk, dtype, dk)
            dv[...] = from_float(gv, dtype, dv)
            if dsinks is not None:
                dsinks[...] = (-gs if bug == "dsinks" else gs).astype(np.float32)

    Kernel.__flashcheck__["backward"] = Kernel.backward
    return Kernel()


v3_attention = _v3_make()
v3_broken_seqused = _v3_make("seqused")  # ignores seqused_k: reads every allocated key
v3_broken_page = _v3_make("page")        # key j in page table[b][0] + j // page_size (pages assumed in order)
v3_broken_sinks = _v3_make("sinks")      # the sink left out of the forward's softmax
v3_broken_dsinks = _v3_make("dsinks")    # the sink gradient with the wrong sign


@flashcheck.kernel(device="cpu", profile="fp32", varlen=True)
def v3_undeclared_kwargs(q, k, v, *, out, lse):
    """claims varlen but takes no cu_seqlens: a load error, not a silently wrong kernel"""


# --------------------------------------------------------------------------------------------
# Empty problems: a forward and a backward that raise on every call. The bridge answers a call
# with nothing to write without calling them (B = 0; Sq = Sk = 0), so such cases pass; a
# backward with key rows to zero (Sq = 0 < Sk) still reaches the kernel.
def _raises_bwd(q, k, v, o, do, lse, *, dq, dk, dv):
    raise ZeroDivisionError("planted failure in the backward")


@flashcheck.kernel(device="cpu", profile="fp32", backward=_raises_bwd)
def raises_fb(q, k, v, *, out, lse):
    raise ZeroDivisionError("planted failure in the kernel")
