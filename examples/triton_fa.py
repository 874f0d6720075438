"""A flash-attention forward and backward in Triton, checked by flashcheck as a py backend:

    flashcheck certify --backend py:examples/triton_fa.py:attention
    flashcheck fuzz --time 60 --backend py:examples/triton_fa_broken.py:attention   # must find the bug

The contract of kernels/flash_api.h: any strides, fp16/bf16, causal top-left/bottom-right, sliding
windows (either alignment), GQA/MQA, Dqk != Dv (up to 128), ragged sequence lengths; rows with no
visible key give O = 0, LSE = -inf, dQ = 0. Forward: online softmax in fp32 with exp2, P rounded to
the input dtype before P.V (tensor cores). Backward: dK/dV per key block (looping over the query
heads of its kv group and the query blocks), dQ per query block, D_i = dO_i . O_i from the forward's
O, P recomputed from the forward's LSE, dS rounded to the input dtype before its products. Additive
masks are not implemented (Unsupported); the backward is not bitwise deterministic-declared.

make(ragged_tail=False) is the deliberately broken copy (triton_fa_broken.py): key blocks past the
end of the sequence are not masked, so when Sk is not a multiple of BLOCK_N the zero-filled keys of
the last block take part in the softmax.
"""
import torch
import triton
import triton.language as tl

import flashcheck

_LOG2E = 1.4426950408889634
LOG2E = tl.constexpr(_LOG2E)   # inside kernels
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _visible(offs_m, offs_n, Sk, diag_off, causal, wl, wr, RAGGED_TAIL: tl.constexpr):
    diag = offs_m[:, None] + diag_off
    j = offs_n[None, :]
    vis = (j >= 0) & (offs_m[:, None] >= 0)
    if RAGGED_TAIL:
        vis = vis & (j < Sk)
    vis = vis & ((causal == 0) | (j <= diag))
    vis = vis & ((wl < 0) | (j >= diag - wl))
    vis = vis & ((wr < 0) | (j <= diag + wr))
    return vis


@triton.jit
def _fwd(Q, K, V, O, L, sq0, sq1, sq2, sq3, sk0, sk1, sk2, sk3, sv0, sv1, sv2, sv3, so0, so1, so2, so3,
         sl0, sl1, sl2, Sq, Sk, Hq, group, Dqk, Dv, scale_log2, diag_off, causal, wl, wr,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BDQK: tl.constexpr, BDV: tl.constexpr,
         RAGGED_TAIL: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    hk = h // group
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_dq = tl.arange(0, BDQK)
    offs_dv = tl.arange(0, BDV)
    q = tl.load(Q + b * sq0 + h * sq2 + offs_m[:, None] * sq1 + offs_dq[None, :] * sq3,
                mask=(offs_m[:, None] < Sq) & (offs_dq[None, :] < Dqk), other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BDV], tl.float32)
    for start in range(0, Sk, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        kt = tl.load(K + b * sk0 + hk * sk2 + offs_n[None, :] * sk1 + offs_dq[:, None] * sk3,
                     mask=(offs_n[None, :] < Sk) & (offs_dq[:, None] < Dqk), other=0.0)
        s = tl.dot(q, kt) * scale_log2
        vis = _visible(offs_m, offs_n, Sk, diag_off, causal, wl, wr, RAGGED_TAIL)
        s = tl.where(vis, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + b * sv0 + hk * sv2 + offs_n[:, None] * sv1 + offs_dv[None, :] * sv3,
                    mask=(offs_n[:, None] < Sk) & (offs_dv[None, :] < Dv), other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    empty = l_i == 0.0
    o = tl.where(empty[:, None], 0.0, acc / tl.where(empty, 1.0, l_i)[:, None])
    lse = tl.where(empty, float("-inf"), (m_i + tl.log2(tl.where(empty, 1.0, l_i))) * LN2)
    tl.store(O + b * so0 + h * so2 + offs_m[:, None] * so1 + offs_dv[None, :] * so3, o.to(O.dtype.element_ty),
             mask=(offs_m[:, None] < Sq) & (offs_dv[None, :] < Dv))
    tl.store(L + b * sl0 + h * sl1 + offs_m * sl2, lse, mask=offs_m < Sq)


@triton.jit
def _bwd_dkdv(Q, K, V, DO, L, Dl, DK, DV, sq0, sq1, sq2, sq3, sk0, sk1, sk2, sk3, sv0, sv1, sv2, sv3,
              sdo0, sdo1, sdo2, sdo3, sl0, sl1, sl2, sdk0, sdk1, sdk2, sdk3, sdv0, sdv1, sdv2, sdv3,
              Sq, Sk, Hq, Hkv, group, Dqk, Dv, scale, diag_off, causal, wl, wr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BDQK: tl.constexpr, BDV: tl.constexpr,
              RAGGED_TAIL: tl.constexpr):
    pid_n = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // Hkv
    hk = bh % Hkv
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_dq = tl.arange(0, BDQK)
    offs_dv = tl.arange(0, BDV)
    k = tl.load(K + b * sk0 + hk * sk2 + offs_n[:, None] * sk1 + offs_dq[None, :] * sk3,
                mask=(offs_n[:, None] < Sk) & (offs_dq[None, :] < Dqk), other=0.0)
    v = tl.load(V + b * sv0 + hk * sv2 + offs_n[:, None] * sv1 + offs_dv[None, :] * sv3,
                mask=(offs_n[:, None] < Sk) & (offs_dv[None, :] < Dv), other=0.0)
    dk = tl.zeros([BLOCK_N, BDQK], tl.float32)
    dv = tl.zeros([BLOCK_N, BDV], tl.float32)
    for g in range(0, group):
        h = hk * group + g
        for start in range(0, Sq, BLOCK_M):
            offs_m = start + tl.arange(0, BLOCK_M)
            q = tl.load(Q + b * sq0 + h * sq2 + offs_m[:, None] * sq1 + offs_dq[None, :] * sq3,
                        mask=(offs_m[:, None] < Sq) & (offs_dq[None, :] < Dqk), other=0.0)
            do = tl.load(DO + b * sdo0 + h * sdo2 + offs_m[:, None] * sdo1 + offs_dv[None, :] * sdo3,
                         mask=(offs_m[:, None] < Sq) & (offs_dv[None, :] < Dv), other=0.0)
            lse = tl.load(L + b * sl0 + h * sl1 + offs_m * sl2, mask=offs_m < Sq, other=float("-inf"))
            dl = tl.load(Dl + (b * Hq + h) * Sq + offs_m, mask=offs_m < Sq, other=0.0)
            s = tl.dot(q, tl.trans(k)) * (scale * LOG2E)
            vis = _visible(offs_m, offs_n, Sk, diag_off, causal, wl, wr, RAGGED_TAIL)
            vis = vis & (offs_m[:, None] < Sq) & (lse[:, None] > float("-inf"))
            p = tl.where(vis, tl.exp2(s - lse[:, None] * LOG2E), 0.0)
            dv += tl.dot(tl.trans(p.to(do.dtype)), do)
            dp = tl.dot(do, tl.trans(v))
            ds = tl.where(vis, p * (dp - dl[:, None]), 0.0)
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q)
    dk = dk * scale
    tl.store(DK + b * sdk0 + hk * sdk2 + offs_n[:, None] * sdk1 + offs_dq[None, :] * sdk3, dk.to(DK.dtype.element_ty),
             mask=(offs_n[:, None] < Sk) & (offs_dq[None, :] < Dqk))
    tl.store(DV + b * sdv0 + hk * sdv2 + offs_n[:, None] * sdv1 + offs_dv[None, :] * sdv3, dv.to(DV.dtype.element_ty),
             mask=(offs_n[:, None] < Sk) & (offs_dv[None, :] < Dv))


@triton.jit
def _bwd_dq(Q, K, V, DO, L, Dl, DQ, sq0, sq1, sq2, sq3, sk0, sk1, sk2, sk3, sv0, sv1, sv2, sv3,
            sdo0, sdo1, sdo2, sdo3, sl0, sl1, sl2, sdq0, sdq1, sdq2, sdq3,
            Sq, Sk, Hq, group, Dqk, Dv, scale, diag_off, causal, wl, wr,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BDQK: tl.constexpr, BDV: tl.constexpr,
            RAGGED_TAIL: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    hk = h // group
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_dq = tl.arange(0, BDQK)
    offs_dv = tl.arange(0, BDV)
    q = tl.load(Q + b * sq0 + h * sq2 + offs_m[:, None] * sq1 + offs_dq[None, :] * sq3,
                mask=(offs_m[:, None] < Sq) & (offs_dq[None, :] < Dqk), other=0.0)
    do = tl.load(DO + b * sdo0 + h * sdo2 + offs_m[:, None] * sdo1 + offs_dv[None, :] * sdo3,
                 mask=(offs_m[:, None] < Sq) & (offs_dv[None, :] < Dv), other=0.0)
    lse = tl.load(L + b * sl0 + h * sl1 + offs_m * sl2, mask=offs_m < Sq, other=float("-inf"))
    dl = tl.load(Dl + (b * Hq + h) * Sq + offs_m, mask=offs_m < Sq, other=0.0)
    dq = tl.zeros([BLOCK_M, BDQK], tl.float32)
    for start in range(0, Sk, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + b * sk0 + hk * sk2 + offs_n[:, None] * sk1 + offs_dq[None, :] * sk3,
                    mask=(offs_n[:, None] < Sk) & (offs_dq[None, :] < Dqk), other=0.0)
        v = tl.load(V + b * sv0 + hk * sv2 + offs_n[:, None] * sv1 + offs_dv[None, :] * sv3,
                    mask=(offs_n[:, None] < Sk) & (offs_dv[None, :] < Dv), other=0.0)
        s = tl.dot(q, tl.trans(k)) * (scale * LOG2E)
        vis = _visible(offs_m, offs_n, Sk, diag_off, causal, wl, wr, RAGGED_TAIL)
        vis = vis & (offs_m[:, None] < Sq) & (lse[:, None] > float("-inf"))
        p = tl.where(vis, tl.exp2(s - lse[:, None] * LOG2E), 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = tl.where(vis, p * (dp - dl[:, None]), 0.0)
        dq += tl.dot(ds.to(k.dtype), k)
    dq = dq * scale
    tl.store(DQ + b * sdq0 + h * sdq2 + offs_m[:, None] * sdq1 + offs_dq[None, :] * sdq3, dq.to(DQ.dtype.element_ty),
             mask=(offs_m[:, None] < Sq) & (offs_dq[None, :] < Dqk))


def _pow2(d):
    return max(16, triton.next_power_of_2(d))


def _geometry(q, k, causal, window, window_align):
    Sq, Sk = q.shape[1], k.shape[1]
    br = causal == "bottom_right" or (causal == "none" and window_align == "bottom_right")
    wl, wr = window if window is not None else (-1, -1)
    return (Sk - Sq) if br else 0, int(causal != "none"), int(wl), int(wr)


def make(ragged_tail=True):
    RT = bool(ragged_tail)

    def forward(q, k, v, *, causal, window, window_align, scale, out, lse):
        B, Sq, Hq, Dqk = q.shape
        Sk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[3]
        if Sq == 0:
            return
        diag_off, c, wl, wr = _geometry(q, k, causal, window, window_align)
        BM, BN = 64, 64
        grid = (triton.cdiv(Sq, BM), B * Hq)
        _fwd[grid](q, k, v, out, lse, *q.stride(), *k.stride(), *v.stride(), *out.stride(), *lse.stride(),
                   Sq, Sk, Hq, Hq // Hkv, Dqk, Dv, scale * _LOG2E, diag_off, c, wl, wr,
                   BLOCK_M=BM, BLOCK_N=BN, BDQK=_pow2(Dqk), BDV=_pow2(Dv), RAGGED_TAIL=RT)

    def backward(q, k, v, o, do, lse, *, causal, window, window_align, scale, dq, dk, dv):
        B, Sq, Hq, Dqk = q.shape
        Sk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[3]
        diag_off, c, wl, wr = _geometry(q, k, causal, window, window_align)
        # D_i = dO_i . O_i in fp32, [B, Hq, Sq] contiguous
        delta = (do.float() * o.float()).sum(-1).permute(0, 2, 1).contiguous()
        BM, BN = 32, 32
        if Sk > 0:
            _bwd_dkdv[(triton.cdiv(Sk, BN), B * Hkv)](
                q, k, v, do, lse, delta, dk, dv, *q.stride(), *k.stride(), *v.stride(), *do.stride(), *lse.stride(),
                *dk.stride(), *dv.stride(), Sq, Sk, Hq, Hkv, Hq // Hkv, Dqk, Dv, scale, diag_off, c, wl, wr,
                BLOCK_M=BM, BLOCK_N=BN, BDQK=_pow2(Dqk), BDV=_pow2(Dv), RAGGED_TAIL=RT)
        if Sq > 0:
            _bwd_dq[(triton.cdiv(Sq, BM), B * Hq)](
                q, k, v, do, lse, delta, dq, *q.stride(), *k.stride(), *v.stride(), *do.stride(), *lse.stride(),
                *dq.stride(), Sq, Sk, Hq, Hq // Hkv, Dqk, Dv, scale, diag_off, c, wl, wr,
                BLOCK_M=BM, BLOCK_N=BN, BDQK=_pow2(Dqk), BDV=_pow2(Dv), RAGGED_TAIL=RT)

    return flashcheck.kernel(device="cuda", profile="tensorcore", backward=backward, mask=False, max_head_dim=128,
                             name="triton-fa" if RT else "triton-fa-broken")(forward)


attention = make()
