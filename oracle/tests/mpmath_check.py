#!/usr/bin/python3
"""mpmath_check.py: independent cross-check of the oracle against mpmath.

Reads the file written by mpmath_dump, recomputes O, LSE, dQ, dK, dV from the
fp16/bf16 bit patterns at 60 significant digits with its own decoding and
visibility code (written from kernels/flash_api.h, sharing nothing with the
oracle), and asserts |oracle ref - mpmath| <= orc_err (the oracle's claimed
error bound; mpmath's own error at 60 digits is below 1e-55 relative).
Exit status 1 on any violation or if nothing was checked."""
import sys

import mpmath
import numpy as np

mpmath.mp.dps = 60


def decode(bits, dtype):
    """Exact value of fp16 (dtype 0) / bf16 (dtype 1) bit patterns, as Python floats."""
    b = np.array(bits, dtype=np.uint16)
    if dtype == 0:
        return [float(x) for x in b.view(np.float16)]
    return [float(x) for x in (b.astype(np.uint32) << 16).view(np.float32)]


def visible(P, i, j):
    Sq, Sk, causal, wl, wr, align = P["Sq"], P["Sk"], P["causal"], P["wl"], P["wr"], P["align"]
    bottom_right = causal == 2 or (causal == 0 and align == 1)
    diag = i + Sk - Sq if bottom_right else i
    if causal != 0 and j > diag:
        return False
    if wl >= 0 and j < diag - wl:
        return False
    if wr >= 0 and j > diag + wr:
        return False
    return True


def parse(path):
    cases, cur, lines = [], None, open(path).read().split("\n")
    it = iter(lines)
    for line in it:
        if not line:
            continue
        tok = line.split()
        if tok[0] == "case":
            v = tok[1:]
            cur = dict(B=int(v[0]), Sq=int(v[1]), Sk=int(v[2]), Hq=int(v[3]), Hkv=int(v[4]), D=int(v[5]),
                       Dv=int(v[6]), dtype=int(v[7]), scale=float.fromhex(v[8]), causal=int(v[9]),
                       wl=int(v[10]), wr=int(v[11]), align=int(v[12]), has_mask=int(v[13]), mask=None)
            cases.append(cur)
        elif tok[0] in ("q", "k", "v", "dout"):
            cur[tok[0]] = decode([int(x) for x in tok[1:]], cur["dtype"])
        elif tok[0] == "mask":
            cur["mask"] = [float.fromhex(x) for x in tok[1:]]
        elif tok[0] in ("o", "lse", "dq", "dk", "dv"):
            rows = []
            for _ in range(int(tok[1])):
                f = next(it).split()
                vals = [float.fromhex(x) for x in f[3:]]
                rows.append(((int(f[0]), int(f[1]), int(f[2])), vals[0::2], vals[1::2]))
            cur["res_" + tok[0]] = rows
    return cases


def compute(P):
    """Exact (60-digit) forward and backward per the API semantics."""
    B, Sq, Sk, Hq, Hkv, D, Dv = P["B"], P["Sq"], P["Sk"], P["Hq"], P["Hkv"], P["D"], P["Dv"]
    G = Hq // Hkv
    scale = mpmath.mpf(P["scale"]) if P["scale"] != 0 else 1 / mpmath.sqrt(D)
    q = lambda b, s, h, d: P["q"][((b * Sq + s) * Hq + h) * D + d]
    k = lambda b, s, h, d: P["k"][((b * Sk + s) * Hkv + h) * D + d]
    v = lambda b, s, h, d: P["v"][((b * Sk + s) * Hkv + h) * Dv + d]
    do = lambda b, s, h, d: P["dout"][((b * Sq + s) * Hq + h) * Dv + d]
    mask = lambda b, h, i, j: P["mask"][((b * Hq + h) * Sq + i) * Sk + j] if P["mask"] else 0.0
    O, LSE, dQ, dK, dV = {}, {}, {}, {}, {}
    for b in range(B):
        for hk in range(Hkv):
            for j in range(Sk):
                dK[(b, hk, j)] = [mpmath.mpf(0)] * D
                dV[(b, hk, j)] = [mpmath.mpf(0)] * Dv
        for h in range(Hq):
            hk = h // G
            for i in range(Sq):
                keys = [j for j in range(Sk) if visible(P, i, j) and mask(b, h, i, j) != float("-inf")]
                if not keys:
                    O[(b, h, i)] = [mpmath.mpf(0)] * Dv
                    LSE[(b, h, i)] = [mpmath.mpf("-inf")]
                    dQ[(b, h, i)] = [mpmath.mpf(0)] * D
                    continue
                s = {j: scale * mpmath.fsum(mpmath.mpf(q(b, i, h, d)) * k(b, j, hk, d) for d in range(D))
                     + mpmath.mpf(mask(b, h, i, j)) for j in keys}
                lse = mpmath.log(mpmath.fsum(mpmath.exp(s[j]) for j in keys))
                p = {j: mpmath.exp(s[j] - lse) for j in keys}
                o = [mpmath.fsum(p[j] * v(b, j, hk, d) for j in keys) for d in range(Dv)]
                O[(b, h, i)], LSE[(b, h, i)] = o, [lse]
                Di = mpmath.fsum(mpmath.mpf(do(b, i, h, d)) * o[d] for d in range(Dv))
                dq = [mpmath.mpf(0)] * D
                for j in keys:
                    dp = mpmath.fsum(mpmath.mpf(do(b, i, h, d)) * v(b, j, hk, d) for d in range(Dv))
                    ds = p[j] * (dp - Di)
                    for d in range(D):
                        dq[d] += ds * k(b, j, hk, d)
                        dK[(b, hk, j)][d] += scale * ds * q(b, i, h, d)
                    for d in range(Dv):
                        dV[(b, hk, j)][d] += p[j] * do(b, i, h, d)
                dQ[(b, h, i)] = [scale * x for x in dq]
    return dict(o=O, lse=LSE, dq=dQ, dk=dK, dv=dV)


def main():
    cases = parse(sys.argv[1])
    checked = bad = 0
    worst = 0.0
    for n, P in enumerate(cases):
        exact = compute(P)
        for name in ("o", "lse", "dq", "dk", "dv"):
            for key, refs, errs in P["res_" + name]:
                want = exact[name][key]
                for d, (r, e) in enumerate(zip(refs, errs)):
                    if r != r:  # NaN: flagged uncheckable/NaN by the oracle, skipped
                        continue
                    w = want[d]
                    if mpmath.isinf(w) or r in (float("inf"), float("-inf")):
                        ok = (mpmath.isinf(w) and r == float(w))
                    else:
                        diff = abs(mpmath.mpf(r) - w)
                        ok = diff <= mpmath.mpf(e) * (1 + mpmath.mpf(10) ** -9)
                        if e > 0:
                            worst = max(worst, float(diff / e))
                    checked += 1
                    if not ok:
                        bad += 1
                        print("case %d %s %s d=%d: oracle %r, mpmath %s, orc_err %r"
                              % (n, name, key, d, r, mpmath.nstr(w, 20), e))
    print("mpmath cross-check: %d cases, %d elements checked, %d outside orc_err, worst diff/orc_err %.3g"
          % (len(cases), checked, bad, worst))
    return 1 if bad or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
