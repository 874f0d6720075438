#!/usr/bin/python3
"""make_v3_npy.py inputs|corrupt OUT: contract-v3 .npy fixtures for `flashcheck verify` (run with
/usr/bin/python3: needs numpy). The layouts are those of `flashcheck verify --help` (kernels/flash_api.h
fa_varlen / fa_paged): packed rows [total, H, D] with cu_seqlens, page pools [num_pages, page_size, H, D]
with a block table, lse [Hq, total_q] when q is packed.

inputs OUT writes the inputs (q k v do and the v3 arrays) of
  packed/     fp16, B = 3 packed q and k (an empty query sequence), seqused_k, GQA 4/2, D = 32
  paged/      bf16 (uint16 bits), packed q over a paged K/V cache (page size 8, pages shuffled, one
              shared by both sequences, an unused one), seqused_k, Dqk = 32 != Dv = 16
  softsink/   fp16 dense [B, S, H, D] with softcap and sinks
and packed_ref/: packed/'s inputs with the forward outputs of a float64 numpy reference that reads
the packed layout itself (rounded once to fp16), so verify's reading of the layout is checked
against one written from the contract's text, not only against the CPU backend's.
corrupt OUT (after v3_npy_run wrote the CPU backend's outputs into packed/ and paged/) writes
  packed_swap/       packed/ with rows 12 and 15 of sequence 2 of o swapped
  packed_nonfinite/  packed/ with an Inf in o and a NaN in lse (rows of sequence 2)
  paged_wrong_page/  paged/ with a used block-table entry naming another (valid) page
  bad_*/             one invalid input each (cli/tests/v3_verify_test.sh lists the expected errors)
"""
import os
import sys

import numpy as np


def save_all(d, arrays):
    os.makedirs(d, exist_ok=True)
    for name, a in arrays.items():
        np.save(os.path.join(d, name + ".npy"), a)


def bf16_bits(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def packed_reference(q, k, v, cu_q, cu_k, used, causal_br):
    """float64 forward of packed q [tq,Hq,D], packed k/v [tk,Hkv,D]: o [tq,Hq,Dv], lse [Hq,tq]"""
    Hq, Hkv = q.shape[1], k.shape[1]
    g = Hq // Hkv
    scale = 1.0 / np.sqrt(q.shape[2])
    o = np.zeros((q.shape[0], Hq, v.shape[2])); lse = np.full((Hq, q.shape[0]), -np.inf)
    for b in range(len(cu_q) - 1):
        r0, r1 = cu_q[b], cu_q[b + 1]
        sq, sk = r1 - r0, used[b]
        k0 = cu_k[b]
        for h in range(Hq):
            s = scale * q[r0:r1, h, :] @ k[k0:k0 + sk, h // g, :].T
            if causal_br:
                i = np.arange(sq)[:, None]; j = np.arange(sk)[None, :]
                s = np.where(j <= i + sk - sq, s, -np.inf)
            for i in range(sq):
                row = s[i]
                if not np.isfinite(row).any():
                    continue
                m = row.max(); p = np.exp(row - m); l = p.sum()
                o[r0 + i, h] = (p / l) @ v[k0:k0 + sk, h // g, :]
                lse[h, r0 + i] = m + np.log(l)
    return o, lse


def inputs(out):
    rng = np.random.default_rng(16)
    f16 = lambda *s: rng.standard_normal(s).astype(np.float16)  # noqa: E731
    # packed q and k: sequence 1 has no query rows
    lq, lk = [7, 0, 19], [23, 9, 31]
    cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    used = np.array([20, 9, 12], np.int32)
    Hq, Hkv, D = 4, 2, 32
    q, k, v, do = f16(cu_q[-1], Hq, D), f16(cu_k[-1], Hkv, D), f16(cu_k[-1], Hkv, D), f16(cu_q[-1], Hq, D)
    base = dict(q=q, k=k, v=v, do=do, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, seqused_k=used)
    save_all(os.path.join(out, "packed"), base)
    o, lse = packed_reference(q.astype(float), k.astype(float), v.astype(float), cu_q, cu_k, used, True)
    ref = dict(base, o=o.astype(np.float16), lse=lse.astype(np.float32))
    del ref["do"]
    save_all(os.path.join(out, "packed_ref"), ref)

    # packed q over a paged cache: page size 8, 9 pages; sequence 0 uses 27 keys (4 pages),
    # sequence 1 13 keys (2 pages); page 5 is shared, page 8 unused
    lq = [6, 7]
    cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    table = np.array([[3, 5, 0, 7], [5, 1, 4, 2]], np.int32)
    used = np.array([27, 13], np.int32)
    Dqk, Dv = 32, 16
    bf = lambda *s: bf16_bits(rng.standard_normal(s))  # noqa: E731
    save_all(os.path.join(out, "paged"), dict(q=bf(cu_q[-1], Hq, Dqk), k=bf(9, 8, Hkv, Dqk), v=bf(9, 8, Hkv, Dv),
                                              do=bf(cu_q[-1], Hq, Dv), cu_seqlens_q=cu_q, block_table=table,
                                              seqused_k=used))

    # dense with softcap and sinks
    B, Sq, Sk = 2, 13, 21
    save_all(os.path.join(out, "softsink"), dict(q=f16(B, Sq, Hq, D) * np.float16(3), k=f16(B, Sk, Hkv, D),
                                                 v=f16(B, Sk, Hkv, D), do=f16(B, Sq, Hq, D),
                                                 sinks=(rng.standard_normal(Hq) * 2).astype(np.float32)))


def load(d):
    return {n[:-4]: np.load(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".npy")}


def corrupt(out):
    P, G = load(os.path.join(out, "packed")), load(os.path.join(out, "paged"))
    # rows 12 and 15 of sequence 2 of o swapped
    o = P["o"].copy(); r = P["cu_seqlens_q"][2]
    o[[r + 12, r + 15]] = o[[r + 15, r + 12]]  # rows that see keys (diag i - 7)
    save_all(os.path.join(out, "packed_swap"), dict(P, o=o))
    # non-finite values in packed o and lse: the report must name (sequence, position) 2, 14 / 2, 13
    o = P["o"].copy(); o[r + 14, 2, 3] = np.inf
    lse = P["lse"].copy(); lse[1, r + 13] = np.nan
    save_all(os.path.join(out, "packed_nonfinite"), dict(P, o=o, lse=lse))
    # a used entry of sequence 1's table row names another valid page (the unused page 8)
    t = G["block_table"].copy(); t[1, 1] = 8
    save_all(os.path.join(out, "paged_wrong_page"), dict(G, block_table=t))

    fwd = lambda a: {n: a[n] for n in a if n not in ("do", "dq", "dk", "dv", "dsinks")}  # noqa: E731
    Pf, Gf = fwd(P), fwd(G)
    bad = {
        "bad_cu_int64": dict(Pf, cu_seqlens_q=P["cu_seqlens_q"].astype(np.int64)),
        "bad_cu_float": dict(Pf, cu_seqlens_k=P["cu_seqlens_k"].astype(np.float32)),
        "bad_cu_len": dict(Pf, cu_seqlens_k=np.append(P["cu_seqlens_k"], P["cu_seqlens_k"][-1]).astype(np.int32)),
        "bad_cu_decreasing": dict(Pf, cu_seqlens_q=np.array([0, 9, 7, 26], np.int32)),
        "bad_cu_first": dict(Pf, cu_seqlens_k=(P["cu_seqlens_k"] + 1).astype(np.int32)),
        "bad_total_rows": {n: a for n, a in dict(Pf, q=np.concatenate([P["q"], P["q"][:1]]),
                                                  o=np.concatenate([P["o"], P["o"][:1]])).items() if n != "lse"},
        "bad_seqused": dict(Pf, seqused_k=np.array([20, 10, 12], np.int32)),
        "bad_table_range": dict(Gf, block_table=np.array([[3, 9, 0, 7], [5, 1, 4, 2]], np.int32)),
        "bad_table_rows": dict(Gf, block_table=G["block_table"][:1]),
        "bad_paged_and_cu_k": dict(Gf, cu_seqlens_k=np.array([0, 27, 40], np.int32)),
        "bad_pool_rank": dict(Gf, k=G["k"].reshape(72, Hkv_of(G), -1)),
        "bad_lse_packed": dict(Pf, lse=np.zeros((3, 4, 19), np.float32)),
        "bad_mask_packed": dict(Pf, mask=np.zeros((1, 1, 19, 31), np.float32)),
        "bad_sinks": dict(Pf, sinks=np.zeros(5, np.float32)),
        "bad_sinks_dtype": dict(Pf, sinks=np.zeros(4, np.float16)),
    }
    for name, arrays in bad.items():
        save_all(os.path.join(out, name), arrays)


def Hkv_of(a):
    return a["k"].shape[2]


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("inputs", "corrupt"):
        sys.exit("usage: make_v3_npy.py inputs|corrupt OUT")
    (inputs if sys.argv[1] == "inputs" else corrupt)(sys.argv[2])
