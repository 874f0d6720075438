#!/usr/bin/python3
"""make_npy.py OUTDIR: .npy fixtures for `flashcheck verify` (run with /usr/bin/python3: needs numpy).

Writes, under OUTDIR:
  good/           fp16, [B,S,H,D], causal bottom-right, GQA (Hq=4, Hkv=2): q k v o lse do dq dk dv,
                  outputs computed in float64 and rounded once to fp16 (a correctly rounded kernel)
  good_bf16/      bf16 stored as '<u2' bits, [B,H,S,D] (--layout bhsd), o as '<V2', k in Fortran
                  order, v with a version 2.0 header, a broadcast additive mask with -inf entries
  wrong_o/        good/ with one element of o off by 1% of the row's scale
  wrong_dq/       good/ with dq scaled by 1.01
  trunc_o/        good/'s forward with o rounded toward zero instead of to nearest (rounding bias)
  wrong_causal/   outputs of NON-causal attention, to be verified with --causal bottom_right
  bad_float64.npy, bad_truncated.npy, bad_bigendian.npy, bad_shape/ (k with the wrong head dim)
  lse_shift/      fp16, an additive mask of -1e5 on every key (scores and LSE ~ -1e5): a backward
                  computed with an LSE 0.04 below the exact one (within the forward LSE bound of the
                  default profile, >= 3 2^-22 1e5 = 0.07: BOUNDS.md section 4), no lse.npy: what a
                  correct kernel whose forward LSE is not handed to verify produces (BOUNDS.md 5.0)
  lse_shift_given/ the same with lse.npy = that shifted LSE (the forward's LSE check must pass:
                  the premise that a correct forward may give it)
  lse_shift_exact/ the same with lse.npy = the exact LSE, which the backward did not use
  lse_shift_broken/ lse_shift/ with dq of a backward that drops D_i (dS = P dP): must still fail
"""
import os
import sys

import numpy as np


def attention(q, k, v, do, causal_br, mask=None, lse_shift=0.0, drop_d=False):
    """float64 reference. q [B,Sq,Hq,D], k/v [B,Sk,Hkv,D]; returns o, lse [B,Hq,Sq], dq, dk, dv.
    lse_shift: the backward's P is exp(s - (lse + lse_shift)) (a backward reading a shifted LSE);
    drop_d: dS = P dP (a broken backward)."""
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    scale = 1.0 / np.sqrt(D)
    o = np.zeros((B, Sq, Hq, v.shape[3])); lse = np.zeros((B, Hq, Sq))
    dq = np.zeros(q.shape); dk = np.zeros(k.shape); dv = np.zeros(v.shape)
    for b in range(B):
        for h in range(Hq):
            kh = h // g
            s = scale * q[b, :, h, :] @ k[b, :, kh, :].T
            if mask is not None:
                s = s + mask[b % mask.shape[0], h % mask.shape[1]]
            if causal_br:
                i = np.arange(Sq)[:, None]; j = np.arange(Sk)[None, :]
                s = np.where(j <= i + Sk - Sq, s, -np.inf)
            m = np.max(s, axis=1, keepdims=True)
            visible = np.isfinite(m[:, 0])
            m = np.where(np.isfinite(m), m, 0.0)
            p = np.exp(s - m)
            l = p.sum(axis=1, keepdims=True)
            p = np.where(l > 0, p / np.where(l > 0, l, 1), 0.0)
            o[b, :, h, :] = p @ v[b, :, kh, :]
            lse[b, h, :] = np.where(visible, (m + np.log(np.where(l > 0, l, 1)))[:, 0], -np.inf)
            dO = do[b, :, h, :]
            if lse_shift:
                p = np.where(np.isfinite(s), np.exp(s - (lse[b, h, :][:, None] + lse_shift)), 0.0)
            dv[b, :, kh, :] += p.T @ dO
            dp = dO @ v[b, :, kh, :].T
            Di = (dO * o[b, :, h, :]).sum(axis=1, keepdims=True)
            ds = p * dp if drop_d else p * (dp - Di)
            dq[b, :, h, :] = scale * ds @ k[b, :, kh, :]
            dk[b, :, kh, :] += scale * ds.T @ q[b, :, h, :]
    return o, lse, dq, dk, dv


def bf16_bits(x):
    """round float64 -> float32 -> bf16 (nearest even), as uint16 bits"""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def save_all(d, arrays):
    os.makedirs(d, exist_ok=True)
    for name, a in arrays.items():
        np.save(os.path.join(d, name + ".npy"), a)


def main(out):
    rng = np.random.default_rng(7)
    B, Sq, Sk, Hq, Hkv, D = 2, 33, 47, 4, 2, 32
    f16 = lambda a: np.asarray(a).astype(np.float16)
    q = f16(rng.standard_normal((B, Sq, Hq, D)))
    k = f16(rng.standard_normal((B, Sk, Hkv, D)))
    v = f16(rng.standard_normal((B, Sk, Hkv, D)))
    do = f16(rng.standard_normal((B, Sq, Hq, D)))
    o, lse, dq, dk, dv = attention(q.astype(float), k.astype(float), v.astype(float), do.astype(float), True)
    good = dict(q=q, k=k, v=v, do=do, o=f16(o), lse=lse.astype(np.float32), dq=f16(dq), dk=f16(dk), dv=f16(dv))
    save_all(os.path.join(out, "good"), good)

    w = dict(good); wo = good["o"].copy(); wo[1, 20, 3, 5] = np.float16(float(wo[1, 20, 3, 5]) + 0.01 + 0.01 * abs(float(wo[1, 20, 3, 5])))
    w["o"] = wo
    save_all(os.path.join(out, "wrong_o"), w)
    to = f16(o)
    over = np.abs(to.astype(float)) > np.abs(o)   # rounded away from zero: one step back toward zero
    to[over] = np.nextafter(to[over], np.float16(0))
    save_all(os.path.join(out, "trunc_o"), dict(q=q, k=k, v=v, o=to, lse=good["lse"]))
    w = dict(good); w["dq"] = f16(dq * 1.01)
    save_all(os.path.join(out, "wrong_dq"), w)
    o2, lse2, dq2, dk2, dv2 = attention(q.astype(float), k.astype(float), v.astype(float), do.astype(float), False)
    save_all(os.path.join(out, "wrong_causal"), dict(q=q, k=k, v=v, o=f16(o2), lse=lse2.astype(np.float32)))

    # bf16, [B,H,S,D], mask with -inf, mixed storage forms
    qb = bf16_bits(rng.standard_normal((B, Hq, Sq, D)))
    kb = bf16_bits(rng.standard_normal((B, Hkv, Sk, D)))
    vb = bf16_bits(rng.standard_normal((B, Hkv, Sk, D)))
    mask = np.where(rng.random((1, Hq, Sq, Sk)) < 0.3, -np.inf, 0.0).astype(np.float32)
    mask[:, :, 3, :] = -np.inf                       # a fully masked row
    tr = lambda a: np.transpose(a, (0, 2, 1, 3))     # [B,H,S,D] <-> [B,S,H,D]
    ob, lseb, _, _, _ = attention(tr(bf16_value(qb)), tr(bf16_value(kb)), tr(bf16_value(vb)),
                                  np.zeros((B, Sq, Hq, D)), False, mask=mask.astype(np.float64))
    d = os.path.join(out, "good_bf16"); os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "q.npy"), qb)
    np.save(os.path.join(d, "k.npy"), np.asfortranarray(kb))
    with open(os.path.join(d, "v.npy"), "wb") as f:
        np.lib.format.write_array(f, vb, version=(2, 0))
    np.save(os.path.join(d, "o.npy"), bf16_bits(tr(ob)).view("V2"))
    np.save(os.path.join(d, "lse.npy"), lseb.astype(np.float32))
    np.save(os.path.join(d, "mask.npy"), mask)

    # malformed inputs
    np.save(os.path.join(out, "bad_float64.npy"), q.astype(np.float64))
    raw = open(os.path.join(out, "good", "q.npy"), "rb").read()
    open(os.path.join(out, "bad_truncated.npy"), "wb").write(raw[: len(raw) - 10])
    np.save(os.path.join(out, "bad_bigendian.npy"), q.astype(">f2"))
    save_all(os.path.join(out, "bad_shape"), dict(q=q, k=f16(rng.standard_normal((B, Sk, Hkv, D + 8))), v=v, o=good["o"]))

    # issue 12: a NaN in o (the worst line must show it), wrong lse/mask shapes (the message must
    # show the actual shape), a nonzero o in a fully masked row (error/bound = inf: strict JSON)
    wo = good["o"].copy(); wo[0, 5, 1, 2] = np.nan
    save_all(os.path.join(out, "nan_o"), dict(q=q, k=k, v=v, o=wo, lse=good["lse"]))
    save_all(os.path.join(out, "bad_lse_shape"), dict(q=q, k=k, v=v, o=good["o"],
                                                      lse=np.zeros((B, Hq, Sq + 1), np.float32)))
    save_all(os.path.join(out, "bad_mask_shape"), dict(q=q, k=k, v=v, o=good["o"],
                                                       mask=np.zeros((1, Hq, Sq, Sk + 1), np.float32)))
    # BOUNDS.md 11.1: v with +inf at (b=0, key 4, kv head 1, d 7); o correct except that column,
    # where the kernel wrote 0 (inf_v_zero/) or NaN (inf_v_nan/, a weight rounded to 0 times inf)
    # and +inf / -inf at keys 4 / 5 of column 6 (exact value NaN: not judged, but counted)
    vi = v.copy(); vi[0, 4, 1, 7] = np.inf; vi[0, 4, 1, 6] = np.inf; vi[0, 5, 1, 6] = -np.inf
    with np.errstate(invalid="ignore"):
        oi, lsei, _, _, _ = attention(q.astype(float), k.astype(float), vi.astype(float), do.astype(float), True)
    for name, val in (("inf_v_zero", 0.0), ("inf_v_nan", np.nan)):
        oo = f16(oi); fed = np.isinf(oi[0, :, 2:4, 7])
        oo[0, :, 2:4, 7][fed] = val
        save_all(os.path.join(out, name), dict(q=q, k=k, v=vi, o=oo, lse=lsei.astype(np.float32)))
    d = os.path.join(out, "masked_row_nonzero"); os.makedirs(d, exist_ok=True)
    om = bf16_bits(tr(ob)); om[0, 0, 3, 0] = 0x3F80   # 1.0 where a fully masked row must be 0
    for name, a in dict(q=qb, k=kb, v=vb, o=om, mask=mask).items():
        np.save(os.path.join(d, name + ".npy"), a)

    # BOUNDS.md 5.0: a backward that read an LSE other than the exact one, within the forward bound
    B, Sq, Sk, H, D = 1, 24, 24, 2, 16
    q = f16(rng.standard_normal((B, Sq, H, D)))
    k = f16(rng.standard_normal((B, Sk, H, D)))
    v = f16(rng.standard_normal((B, Sk, H, D)))
    do = f16(rng.standard_normal((B, Sq, H, D)))
    mask = np.full((1, 1, Sq, Sk), -1e5, np.float32)
    args = (q.astype(float), k.astype(float), v.astype(float), do.astype(float), False)
    o, lse, _, _, _ = attention(*args, mask=mask.astype(np.float64))
    _, _, dq, dk, dv = attention(*args, mask=mask.astype(np.float64), lse_shift=-0.04)
    _, _, dqb, _, _ = attention(*args, mask=mask.astype(np.float64), lse_shift=-0.04, drop_d=True)
    base = dict(q=q, k=k, v=v, do=do, mask=mask, o=f16(o), dq=f16(dq), dk=f16(dk), dv=f16(dv))
    save_all(os.path.join(out, "lse_shift"), base)
    save_all(os.path.join(out, "lse_shift_given"), dict(base, lse=(lse - 0.04).astype(np.float32)))
    save_all(os.path.join(out, "lse_shift_exact"), dict(base, lse=lse.astype(np.float32)))
    save_all(os.path.join(out, "lse_shift_broken"), dict(base, dq=f16(dqb)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_npy.py OUTDIR")
    main(sys.argv[1])
