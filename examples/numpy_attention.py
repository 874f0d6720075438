"""A flash-attention kernel in numpy for the py backend (forward and backward), and deliberately
broken copies of it that the tests must find (python/tests/, examples/README.md).

    flashcheck certify --quick --backend py:examples/numpy_attention.py:attention
    flashcheck fuzz --time 30 --backend py:examples/numpy_attention.py:broken_tail

Arithmetic: scores, softmax and sums in float64, outputs rounded once to the case's dtype, so
the "fp32" preset (fp32 round-to-nearest sums, P and dS not rounded) bounds it with room to spare.
Keys a row cannot see never touch it (scores -inf, their products with V/K/Q replaced by exact
zeros, so a NaN or Inf there cannot leak in), as the contract (kernels/flash_api.h) says.

The broken copies, one bug each:
    broken_causal  bottom-right causal treated as top-left (ignores Sk - Sq)
    broken_window  the window's left edge off by one (j > diag - left instead of >=)
    broken_gqa     query head h reads kv head h % Hkv instead of h // (Hq / Hkv)
    broken_tail    keys processed in blocks of 16 and the ragged last block dropped
    broken_dk      dK without the softmax scale
"""
import numpy as np

import flashcheck
from flashcheck.host import from_float, to_float


def _visible(Sq, Sk, causal, window, window_align, bug=None):
    i = np.arange(Sq)[:, None]
    j = np.arange(Sk)[None, :]
    if causal == "bottom_right" and bug != "causal":
        diag = i + (Sk - Sq)
    elif causal == "none" and window_align == "bottom_right":
        diag = i + (Sk - Sq)
    else:
        diag = i
    vis = np.ones((Sq, Sk), bool)
    if causal != "none":
        vis &= j <= diag
    if window is not None:
        left, right = window
        if left >= 0:
            vis &= (j > diag - left) if bug == "window" else (j >= diag - left)
        if right >= 0:
            vis &= j <= diag + right
    if bug == "tail":
        vis &= j < (Sk // 16) * 16
    return vis


def _mm0(a, b):
    """a @ b where exact zeros of a are hard zeros: a non-finite entry of b meets only the nonzero
    entries of a (IEEE 0 * inf = NaN would leak a hidden key's Inf into a row)."""
    fin = np.isfinite(b)
    bf = np.where(fin, b, 0.0)
    r = a @ bf
    for kk in np.nonzero(~fin.all(axis=1))[0]:
        nz = a[:, kk] != 0
        r[nz] += a[nz, kk][:, None] * (b[kk] - bf[kk])[None, :]
    return r


def _probs(q, k, scale, vis, mask):
    """P (rows of hidden keys exact 0), lse (-inf for a row with no visible key)."""
    s = scale * _mm0(q, k.T)
    if mask is not None:
        s = s + mask
    s = np.where(vis, s, -np.inf)
    m = s.max(axis=1, initial=-np.inf)
    empty = np.isneginf(m)
    ms = np.where(empty, 0.0, m)
    e = np.where(np.isneginf(s), 0.0, np.exp(s - ms[:, None]))
    den = e.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        # e = 0 (a hidden key) stays 0 even when den is NaN (a NaN score the row sees)
        p = np.where(empty[:, None] | (e == 0), 0.0, e / np.where(empty, 1.0, den)[:, None])
        lse = np.where(empty, -np.inf, ms + np.log(np.where(empty, 1.0, den)))
    return p, lse


def _heads(Hq, Hkv, h, bug):
    return h % Hkv if bug == "gqa" else h // (Hq // Hkv)


def _make(bug=None):
    @flashcheck.kernel(device="cpu", profile="fp32", backward=None, deterministic=True,
                       name="numpy" if bug is None else "numpy-broken-" + bug)
    class Kernel:
        @staticmethod
        def forward(q, k, v, *, causal, window, window_align, scale, mask, out, lse, dtype):
            B, Sq, Hq, _ = q.shape
            Sk, Hkv = k.shape[1], k.shape[2]
            vis = _visible(Sq, Sk, causal, window, window_align, bug)
            for b in range(B):
                for h in range(Hq):
                    g = _heads(Hq, Hkv, h, bug)
                    qf = to_float(q[b, :, h], dtype).astype(np.float64)
                    kf = to_float(k[b, :, g], dtype).astype(np.float64)
                    vf = to_float(v[b, :, g], dtype).astype(np.float64)
                    mk = None if mask is None else mask[b, h].astype(np.float64)
                    p, l = _probs(qf, kf, scale, vis, mk)
                    out[b, :, h] = from_float(_mm0(p, vf), dtype, out)
                    lse[b, h] = l.astype(np.float32)

        @staticmethod
        def backward(q, k, v, o, do, lse, *, causal, window, window_align, scale, mask, dq, dk, dv, dtype):
            B, Sq, Hq, _ = q.shape
            Sk, Hkv = k.shape[1], k.shape[2]
            vis = _visible(Sq, Sk, causal, window, window_align, bug)
            gq = np.zeros(dq.shape, np.float64)
            gk = np.zeros(dk.shape, np.float64)
            gv = np.zeros(dv.shape, np.float64)
            for b in range(B):
                for h in range(Hq):
                    g = _heads(Hq, Hkv, h, bug)
                    qf = to_float(q[b, :, h], dtype).astype(np.float64)
                    kf = to_float(k[b, :, g], dtype).astype(np.float64)
                    vf = to_float(v[b, :, g], dtype).astype(np.float64)
                    dof = to_float(do[b, :, h], dtype).astype(np.float64)
                    mk = None if mask is None else mask[b, h].astype(np.float64)
                    p, _ = _probs(qf, kf, scale, vis, mk)
                    of = _mm0(p, vf)
                    gv[b, :, g] += _mm0(p.T, dof)
                    dp = np.where(p != 0, _mm0(dof, vf.T), 0.0)
                    dsum = np.where(p.any(axis=1), (dof * of).sum(axis=1), 0.0)
                    # hidden (p = 0) entries stay exact zeros: a NaN row sum (a NaN/Inf the row sees)
                    # times p = 0 would put NaN into the dK column of a key no row sees
                    ds = np.where(p != 0, p * (dp - dsum[:, None]), 0.0)
                    gq[b, :, h] = scale * _mm0(ds, kf)
                    gk[b, :, g] += (1.0 if bug == "dk" else scale) * _mm0(ds.T, qf)
            dq[...] = from_float(gq, dtype, dq)
            dk[...] = from_float(gk, dtype, dk)
            dv[...] = from_float(gv, dtype, dv)

    Kernel.__flashcheck__["backward"] = Kernel.backward
    return Kernel()


attention = _make()
broken_causal = _make("causal")
broken_window = _make("window")
broken_gqa = _make("gqa")
broken_tail = _make("tail")
broken_dk = _make("dk")
