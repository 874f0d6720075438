/* orc_gpu_bwd.cu: device half of the GPU tier's backward (orc_gpu_dev.h).
 * Written from the contract (kernels/flash_api.h) and the CPU tier's backward
 * (oracle/orc_bwd.c, BOUNDS.md sections 5, 9, 10, 11), with its formulas from
 * oracle/orc_formulas.h (orc_fm_b*, orc_fm_dq_*, orc_fm_col_*, orc_fm_w*); shares
 * nothing with kernels/cuda.
 *
 * Per kv-head group (b, hk), per query head h of the group, per chunk of rows
 * (orc_bwd.c's layout, its phase A on the row, phase B on the columns):
 *   dots (Q, K)   S, A                                  (orc_gpu_fwd.cu's kernels)
 *   rows          W, C, CO, Eo_max, the row info       (the forward row weights)
 *   wsum (V)      O's three sums per (row, d)           (the forward's P.V)
 *   dots (dO, V)  dP = dO.v, B = |dO|.|v|
 *   k_brow        one warp per row: O, D_i and the row terms (orc_fm_brow_init), the
 *                 per-key P and dS terms (orc_fm_bkey_p, _dsum, _ds) into the nine
 *                 matrices, the dQ coefficients, the row's overflow and floor, its dD_k
 *   wsum (K)      dQ's three sums per (row, d): dS K, (DSEQ + kQ DSM) |K|, (DSEO + kQo DSM) |K|
 *   wsum (K)      the row-common D term's sums (BOUNDS.md 5.9): A = P K, (PPIO + cA P1) |K|;
 *                 k_dqcommon adds orc_fm_dq_common to dQ's kernel-weight sum
 *   k_colstat     per key: sum DSM, sum of P' bounds, bad rows (rows in order, as the CPU)
 *   k_colsum      dK = sum_i dS Q, dV = sum_i P dO over the chunk's rows in blocks of 32
 *                 rows folded with TwoSum into the group's running (hi, lo) per (j, d)
 *                 (orc_bwd.c's col_fold), with the bound sums; k_head marks the head
 *                 boundaries (orc_fm_head_part)
 *   k_ratio, k_dqfin  the chunk's input-ratio maxima; its sampled dQ rows finished
 *                 (orc_fm_grad_elem, orc_bwd's flags) into the result block
 *   k_colfin      after a group's last chunk: its sampled dK / dV columns finished
 * All of it queued on the tier's stream; the host waits once, at orc_gpu_bwd_finish (or
 * per group when the blocks go to the host: orc_gpu_bwd_fetch).
 * The matrices [rows][Sk] of doubles are reused in place: the forward's S, A, W, C, CO
 * and dP, B are read at (r, j) by the lane that then writes the nine dS-stage values
 * there (P over W, DS over C, DSE over CO, DSM over S, DSEO over A, PPI over dP, P1
 * over B, PPIO, DSEQ in the last two). Keys not visible hold ORC_GPU_INVIS in P.
 * Built with -fmad=false as the forward (TwoSum; the formulas' rounding). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "oracle/gpu/orc_gpu_dev.h"

#define RT ORC_GPU_RT
#define KT 64
#define KS 16
#define PADR (RT + 1)

enum { MX_P, MX_DS, MX_DSE, MX_DSM, MX_DSEO, MX_PPI, MX_P1, MX_PPIO, MX_DSEQ, MX_N }; /* = ORC_BM_* */
/* the forward's roles of the same matrices */
#define MX_W MX_P
#define MX_C MX_DS
#define MX_CO MX_DSE
#define MX_S MX_DSM
#define MX_A MX_DSEO
#define MX_DP MX_PPI
#define MX_B MX_P1

enum { CA_KHI, CA_KLO, CA_KB, CA_KO, CA_KHS, CA_KHA, CA_VHI, CA_VLO, CA_VB, CA_VO, CA_VHS, CA_VHA, CA_N };

struct orc_gpu_bwd_state {
    orc_gpu_bwd_desc d;
    int64_t rc, b, hk;
    double sp_o;
    cudaStream_t s;
    double *M[MX_N];               /* [rc][Sk] */
    double *num, *bsum, *osum;     /* [rc][Dv] */
    double *qs, *qb, *qo;          /* [rc][D] */
    double *as, *ae;               /* [rc][D]: A = sum P K and its error sum (5.9) */
    double *eomax, *cq, *cqo;      /* [rc] */
    double *cdd, *cA;              /* [rc]: dD_k, orc_fm_dq_acoef */
    orc_row_info *ri;              /* [rc] */
    orc_gpu_brow *br;              /* [rc] */
    int64_t *rlo, *rhi;            /* device [Sq] */
    const int64_t *hrlo, *hrhi;    /* host [Sq] (the caller's) */
    int64_t *rng;                  /* device tile spans [2 * rc / RT] */
    unsigned long long *k1;        /* kvstat: 4 words; then qmax, domax: 2 words */
    double *ca[CA_N];              /* column accumulators */
    int64_t *ncol;
    double *sdsm, *sp;
    int *cbad, *covf;
    orc_fm_colc *colc;
    orc_gpu_bfin fin;              /* blocks and scalars of the finishing */
    orc_index *diq, *dic;          /* device copies of fin.iq [nq], fin.ic [nc] */
    int64_t ntmax;                 /* tile-span entries per chunk (rc / RT) */
    unsigned long long *rat;       /* device: max O / LSE input ratio bits */
    cudaEvent_t t0, t1;            /* timed: begin's uploads done, the last kernel done */
    cudaEvent_t *fev;              /* timed pairs around the finishing kernels */
    int64_t nfev, cfev;
    cudaEvent_t *pev;              /* the chunks' kernel groups: pev[k] starts part pcl[k] */
    int *pcl;                      /* (ORC_GPU_P_*; -1: none) which ends at pev[k + 1] */
    int64_t npev, cpev;
};

static int cu_ok(cudaError_t e, const char *what, char *msg, size_t n) {
    if (e == cudaSuccess) return 1;
    snprintf(msg, n, "CUDA error in the GPU oracle's backward (%s): %s", what, cudaGetErrorString(e));
    return 0;
}

__device__ static inline double ld16(const uint16_t *p, const int64_t *st, int64_t b, int64_t s, int64_t h,
                                     int64_t d, int bf16) {
    return orc_fm_decode(p[b * st[0] + s * st[1] + h * st[2] + d * st[3]], bf16);
}

__device__ static inline double mask_at(const orc_gpu_fwd_desc &d, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (!d.mask) return 0.0;
    return (double)d.mask[b * d.ms[0] + h * d.ms[1] + i * d.ms[2] + j * d.ms[3]];
}

__device__ static inline double warp_sum(double x) {
    for (int o = 16; o; o >>= 1) x = x + __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ static inline int warp_or(int x) { return __any_sync(0xffffffffu, x); }

/* max with NaN kept (orc_bwd.c's `if (!(rt <= m)) m = rt` keeps a NaN seen last) */
__device__ static inline double nmax(double a, double b) { return (isnan(a) || isnan(b)) ? NAN : fmax(a, b); }
__device__ static inline double warp_nmax(double x) {
    for (int o = 16; o; o >>= 1) x = nmax(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

/* TwoSum of the compensated folds: the CPU tier's (orc_fm_two_sum: exact for a finite sum,
 * no error term for an infinite one, so an infinite input's sum stays Inf, BOUNDS.md 11.1) */
#define two_sum_d orc_fm_two_sum

// ----------------------------------------------------------------------------
// group statistics

/* visible rows per key over the group's heads (orc_bwd.c's ncol) */
__global__ void k_ncol(orc_gpu_fwd_desc d, int64_t b, int64_t hk, const int64_t *rlo, const int64_t *rhi,
                       int64_t *ncol) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d.Sk) return;
    int64_t n = 0;
    for (int64_t h = hk * d.G; h < (hk + 1) * d.G; h++)
        for (int64_t i = 0; i < d.Sq; i++)
            if (j >= rlo[i] && j <= rhi[i] && mask_at(d, b, h, i, j) != -INFINITY) n++;
    ncol[j] = n;
}

/* per key: the column coefficients (orc_fm_col_coefs) */
__global__ void k_colcoef(orc_gpu_fwd_desc d, const int64_t *ncol, double sp_o, orc_fm_colc *cc) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d.Sk) return;
    double nn = (double)(ncol[j] + d.G), spk = (double)(d.G * d.Sq + d.G);
    orc_fm_col_coefs(&d.mk, &d.mo, nn, spk, sp_o, &cc[j]);
}

/* qmax = max |Q|, domax = max |dO| over the group's finite elements (section 11) */
__global__ void k_qdmax(orc_gpu_bwd_desc d, int64_t b, int64_t hk, unsigned long long *out) {
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const orc_gpu_fwd_desc &f = d.f;
    if (t >= f.G * f.Sq) return;
    int64_t h = hk * f.G + t / f.Sq, i = t % f.Sq;
    double qm = 0, dm = 0;
    for (int64_t x = 0; x < f.D; x++) {
        double a = ld16(f.q, f.qs, b, i, h, x, f.bf16);
        if (isfinite(a) && fabs(a) > qm) qm = fabs(a);
    }
    for (int64_t x = 0; x < f.Dv; x++) {
        double a = ld16(d.dout, d.dos, b, i, h, x, f.bf16);
        if (isfinite(a) && fabs(a) > dm) dm = fabs(a);
    }
    atomicMax(&out[0], (unsigned long long)__double_as_longlong(qm));
    atomicMax(&out[1], (unsigned long long)__double_as_longlong(dm));
}

/* head boundary of the running column sums (orc_bwd.c's col_head_start / _end) */
__global__ void k_head(int64_t n, int end, double *hi, double *lo, double *hs, double *ha) {
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    double now = hi[e] + lo[e];
    if (!end) hs[e] = now;
    else ha[e] += orc_fm_head_part(now, hs[e]);
}

/* the group's column sums: hi + lo into hi (the value the finalize reads) */
__global__ void k_fold(int64_t n, double *hi, const double *lo) {
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) hi[e] = hi[e] + lo[e];
}

// ----------------------------------------------------------------------------
// phase A: one warp per row

__global__ void __launch_bounds__(128) k_brow(orc_gpu_bwd_desc d, int64_t b, int64_t h, int64_t r0, int64_t nr,
                                              const int64_t *rlo, const int64_t *rhi, const int64_t *tlo,
                                              const int64_t *thi, const unsigned long long *k1,
                                              const orc_row_info *ri, const double *eomax, const double *num,
                                              const double *bsum, const double *osum, double *M0, double *M1,
                                              double *M2, double *M3, double *M4, double *M5, double *M6,
                                              double *M7, double *M8, orc_gpu_brow *br_out, double *cq,
                                              double *cqo, double *cdd, double *cA, int *covf) {
    /* rows in reverse: a causal row's key span grows with r, the longest go first */
    int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (r >= nr) return;
    r = nr - 1 - r;
    const orc_gpu_fwd_desc &f = d.f;
    const orc_model &mk = f.mk, &mo = f.mo;
    const orc_fm_bwdc &bc = d.bc;
    int64_t i = r0 + r, lo = rlo[i], hi = rhi[i], tl = tlo[r / RT], th = thi[r / RT], Sk = f.Sk;
    double *m[MX_N] = {M0 + r * Sk, M1 + r * Sk, M2 + r * Sk, M3 + r * Sk, M4 + r * Sk,
                       M5 + r * Sk, M6 + r * Sk, M7 + r * Sk, M8 + r * Sk};
    orc_row_info R = ri[r];
    orc_gpu_brow br;
    memset(&br, 0, sizeof br);
    br.kind = R.kind;
    br.ovf = R.ovf;
    br.n = R.n;
    if (R.kind != ROW_NORMAL) {
        /* masked: nothing visible; NaN row: NaN at every visible (i, j); uncheckable: the
         * row cannot be bounded, its keys' columns neither (orc_bwd.c phase A) */
        for (int64_t j0 = tl / 32 * 32; th >= tl && j0 <= th; j0 += 32) {
            int64_t j = j0 + lane;
            if (j < tl || j > th) continue;
            int vis = R.kind != ROW_MASKED && j >= lo && j <= hi && mask_at(f, b, h, i, j) != -INFINITY;
            if (!vis) { m[MX_P][j] = ORC_GPU_INVIS; continue; }
            for (int k = 0; k < MX_N; k++) m[k][j] = NAN;
            if (R.ovf) atomicOr(&covf[j], 1);
        }
        br.bad = R.kind == ROW_UNCHECKABLE;
        if (lane == 0) { br_out[r] = br; cq[r] = 0; cqo[r] = 0; cdd[r] = 0; cA[r] = 0; }
        return;
    }
    /* O (orc_fwd_elem), the row sums over d */
    double Dorc = 0, dOaO = 0, dOdO = 0, dOaOg = 0, dO1 = 0, Og1 = 0, dOeO = 0, orat = 0, q1 = 0;
    for (int64_t x = lane; x < f.Dv; x += 32) {
        double O, e, bd;
        orc_fwd_elem(&mk, &mo, &R, num[r * f.Dv + x], bsum[r * f.Dv + x], osum[r * f.Dv + x], &O, &e, &bd);
        double og = ld16(d.o, d.os, b, i, h, x, f.bf16), dx = ld16(d.dout, d.dos, b, i, h, x, f.bf16);
        double dev = fabs(og - O), rt = dev / bd;
        orat = nmax(orat, rt);
        Dorc += dx * O;
        dOaO += fabs(dx) * fabs(O);
        dOdO += fabs(dx) * (dev + e);
        dOaOg += fabs(dx) * fabs(og);
        dO1 += fabs(dx);
        Og1 += fabs(og);
        dOeO += fabs(dx) * e;
    }
    for (int64_t x = lane; x < f.D; x += 32) q1 += fabs(ld16(f.q, f.qs, b, i, h, x, f.bf16));
    Dorc = warp_sum(Dorc); dOaO = warp_sum(dOaO); dOdO = warp_sum(dOdO); dOaOg = warp_sum(dOaOg);
    dO1 = warp_sum(dO1); Og1 = warp_sum(Og1); dOeO = warp_sum(dOeO); q1 = warp_sum(q1);
    br.o_ratio = warp_nmax(orat);
    double k1max = __longlong_as_double((long long)k1[0]) * (1 + 0x1p-40);
    double kmax = __longlong_as_double((long long)k1[2]);
    double v1max = __longlong_as_double((long long)k1[3]) * (1 + 0x1p-40);
    /* with lse_unknown the given LSE is not read and its ratio is 0 (5.0) */
    double lse_g = d.lse_unknown ? NAN : (double)d.lse[b * d.ls[0] + h * d.ls[1] + i * d.ls[2]];
    br.lse_ratio = d.lse_unknown ? 0.0 : fabs(lse_g - R.lse) / R.lse_bound;
    orc_fm_brow w;
    br.bad = orc_fm_brow_init(&mk, &bc, &R, (double)f.Dv, Dorc, dOaO, dOdO, dOaOg, dO1, Og1, dOeO, v1max,
                              d.lse_unknown, lse_g, &w);
    w.Eo_max = eomax[r];
    w.efl = orc_fm_score_floor(mk.tau, f.rc.sc_abs, f.rc.D, q1 * (1 + 0x1p-40), k1max);

    /* pass 1 (a kernel forming D from P and dP): the bound on |D' - D| */
    if (mk.d_from_p) {
        double se = 0, sa = 0;
        for (int64_t j0 = lo / 32 * 32; j0 <= hi; j0 += 32) {
            int64_t j = j0 + lane;
            if (j < lo || j > hi) continue;
            double mm = mask_at(f, b, h, i, j);
            if (mm == -INFINITY) continue;
            double P, pio, Pup, pik, fP, e, a;
            orc_fm_bkey_p(&mk, &mo, &bc, &w, orc_fm_score(&f.rc, m[MX_S][j], mm), m[MX_A][j], fabs(mm), &P, &pio,
                          &Pup, &pik, &fP);
            orc_fm_bkey_dsum(&mk, &bc, &w, Pup, pik, fP, m[MX_DP][j], m[MX_B][j], &e, &a);
            se += e;
            sa += a;
        }
        se = warp_sum(se);
        sa = warp_sum(sa);
        w.dD_k = orc_fm_brow_dfromp(&mk, (double)R.n, (double)(hi - lo + 1), se, sa);
        if (!isfinite(w.dD_k)) br.bad = 1;
    }
    /* pass 2: the nine values of every visible key, in place */
    double sdsm = 0;
    int rovf = 0;
    for (int64_t j0 = tl / 32 * 32; th >= tl && j0 <= th; j0 += 32) {
        int64_t j = j0 + lane;
        if (j < tl || j > th) continue;
        double mm = j >= lo && j <= hi ? mask_at(f, b, h, i, j) : -INFINITY;
        if (mm == -INFINITY) { m[MX_P][j] = ORC_GPU_INVIS; continue; }
        double P, pio, Pup, pik, fP, v[ORC_BM_N];
        orc_fm_bkey_p(&mk, &mo, &bc, &w, orc_fm_score(&f.rc, m[MX_S][j], mm), m[MX_A][j], fabs(mm), &P, &pio, &Pup,
                      &pik, &fP);
        int o = orc_fm_bkey_ds(&mk, &mo, &bc, &w, P, pio, Pup, pik, fP, m[MX_DP][j], m[MX_B][j], v);
        for (int k = 0; k < MX_N; k++) m[k][j] = v[k];
        sdsm += v[ORC_BM_DSM];
        if (o) { rovf = 1; atomicOr(&covf[j], 1); }
    }
    sdsm = warp_sum(sdsm);
    rovf = warp_or(rovf);
    if (lane == 0) {
        double kQ, kQo, n = (double)R.n;
        orc_fm_dq_coefs(&mk, &mo, n, (double)(hi - lo + 1), (double)(th - tl + 1), &kQ, &kQo);
        cq[r] = kQ;
        cqo[r] = kQo;
        cdd[r] = w.dD_k;
        cA[r] = orc_fm_dq_acoef(n, (double)(th - tl + 1));
        br.fq = orc_fm_dqk_floor(&mk, bc.sc, sdsm, n);
        br.rovf = rovf || orc_fm_dq_acc_ovf(&mk, bc.sc, sdsm, kmax, kQ);
        br_out[r] = br;
    }
}

/* dQ's kernel-weight sum qb += dD_k (|A| + err_A) (orc_fm_dq_common, BOUNDS.md 5.9); ae is
 * sum (PPIO + cA P1) |K|, the CPU tier's weights carry ORC_SAFETY before the sum */
__global__ void k_dqcommon(int64_t nr, int64_t D, const double *cdd, const double *as, const double *ae,
                           double *qb) {
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= nr * D) return;
    qb[e] = qb[e] + orc_fm_dq_common(cdd[e / D], as[e], ae[e] * ORC_SAFETY);
}

// ----------------------------------------------------------------------------
// phase B

/* per key j, over the chunk's rows in order (orc_bwd.c phase_b_cols' gather) */
__global__ void k_colstat(orc_gpu_fwd_desc d, int64_t nr, const int64_t *tlo, const int64_t *thi,
                          const double *P, const double *DSM, const double *PPI, const double *P1,
                          const orc_gpu_brow *br, double *sdsm, double *sp, int *cbad) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d.Sk) return;
    double a = sdsm[j], c = sp[j];
    int bad = cbad[j];
    for (int64_t r = 0; r < nr; r++) {
        if (j < tlo[r / RT] || j > thi[r / RT]) { r = (r / RT + 1) * RT - 1; continue; }
        int64_t e = r * d.Sk + j;
        if (P[e] == ORC_GPU_INVIS) continue;
        if (br[r].bad) bad = 1;
        a += DSM[e];
        c += orc_fm_sp_term(&d.mk, PPI[e], P1[e]);
    }
    sdsm[j] = a;
    sp[j] = c;
    cbad[j] = bad;
}

/* dK (mode 0: sum_i dS_ij Q_i; weights DSE + kK DSM, DSEO + kKo DSM) or dV (mode 1:
 * sum_i P_ij dO_i; weights PPI (1 + accV) + P1 cp, PPIO + P1 accVo) of keys j0 .. j0+63,
 * dims c0 .. c0+63, over the chunk's rows: plain fma blocks of 32 rows (aligned to the
 * chunk) folded with TwoSum into the running (hi, lo); bound sums plain.
 * With cst (the blocks of dims 0 .. 63 only) it also does k_colstat's per-key sums, the
 * same additions in the same row order (its visible set is the same: a tile the block
 * skips has none of its keys in span): mode 0 cst = sdsm (+= DSM), mode 1 cst = sp
 * (+= orc_fm_sp_term) and cbad; one thread per key, after each 16-row stage. */
__global__ void __launch_bounds__(256) k_colsum(orc_gpu_bwd_desc d, int mode, orc_gpu_ten ra, int64_t Dd, int64_t b,
                                                int64_t h, int64_t r0, int64_t nr, const int64_t *tlo, const int64_t *thi,
                                                const double *P, const double *A0, const double *A1,
                                                const double *A2, const double *A3, const orc_fm_colc *cc,
                                                double *ghi, double *glo, double *gb, double *go,
                                                const orc_gpu_brow *br, double *cst, int *cbad) {
    __shared__ double Ws[KS][PADR], Bs[KS][PADR], Os[KS][PADR], Xs[KS][KT], Ss[KS][KT];
    __shared__ unsigned char Vv[KS][PADR], Rb[KS];
    const orc_gpu_fwd_desc &f = d.f;
    int64_t j0 = (int64_t)blockIdx.x * KT, c0 = (int64_t)blockIdx.y * KT, Sk = f.Sk;
    int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    int stat = cst != NULL && blockIdx.y == 0;
    int64_t sj = j0 + tid;
    double sacc = stat && tid < KT && sj < Sk ? cst[sj] : 0.0;
    int sbad = stat && mode == 1 && tid < KT && sj < Sk ? cbad[sj] : 0;
    double blk[4][4], hi[4][4], lo[4][4], bs[4][4], os[4][4];
    for (int x = 0; x < 4; x++)
        for (int y = 0; y < 4; y++) {
            int64_t j = j0 + ty + 16 * x, c = c0 + tx + 16 * y;
            int in = j < Sk && c < Dd;
            blk[x][y] = 0;
            hi[x][y] = in ? ghi[j * Dd + c] : 0;
            lo[x][y] = in ? glo[j * Dd + c] : 0;
            bs[x][y] = in ? gb[j * Dd + c] : 0;
            os[x][y] = in ? go[j * Dd + c] : 0;
        }
    int64_t ntile = (nr + RT - 1) / RT;
    for (int64_t t = 0; t < ntile; t++) {
        int64_t tl = tlo[t], th = thi[t];
        if (th < tl || th < j0 || tl > j0 + KT - 1) continue; /* uniform over the block */
        for (int stage = 0; stage < RT / KS; stage++) {
            int64_t rb = t * RT + stage * KS;
            for (int e = tid; e < KS * KT; e += 256) {
                int rr = e / KT, jj = e % KT;
                int64_t r = rb + rr, j = j0 + jj;
                int vis = r < nr && j < Sk && j >= tl && j <= th && P[r * Sk + j] != ORC_GPU_INVIS;
                double wv = 0, wb = 0, wo = 0, sv = 0;
                if (vis) {
                    int64_t x = r * Sk + j;
                    const orc_fm_colc *k = &cc[j];
                    if (mode == 0) {
                        wv = A0[x]; /* dS */
                        wb = orc_fm_wk(k, A1[x], A3[x]);  /* DSE, DSM */
                        wo = orc_fm_wko(k, A2[x], A3[x]); /* DSEO, DSM */
                        if (stat) sv = A3[x];             /* k_colstat's DSM */
                    } else {
                        wv = P[x];
                        wb = orc_fm_wv(k, A0[x], A1[x]);  /* PPI, P1 */
                        wo = orc_fm_wvo(k, A2[x], A1[x]); /* PPIO, P1 */
                        if (stat) sv = orc_fm_sp_term(&f.mk, A0[x], A1[x]); /* k_colstat's P' bound */
                    }
                }
                Vv[rr][jj] = (unsigned char)vis;
                Ws[rr][jj] = wv;
                Bs[rr][jj] = wb;
                Os[rr][jj] = wo;
                Ss[rr][jj] = sv;
            }
            if (stat && mode == 1 && tid < KS) Rb[tid] = (unsigned char)(rb + tid < nr && br[rb + tid].bad);
            for (int e = tid; e < KS * KT; e += 256) {
                int rr = e / KT, cx = e % KT;
                int64_t r = rb + rr, c = c0 + cx;
                Xs[rr][cx] = (r < nr && c < Dd) ? ld16(ra.p, ra.s, b, r0 + r, h, c, f.bf16) : 0.0;
            }
            __syncthreads();
            if (stat && tid < KT) /* k_colstat's loop body for rows rb .. rb+15 in order */
                for (int rr = 0; rr < KS; rr++) {
                    if (!Vv[rr][tid]) continue;
                    if (mode == 1 && Rb[rr]) sbad = 1;
                    sacc += Ss[rr][tid];
                }
            for (int rr = 0; rr < KS; rr++) {
                double xv[4];
                for (int y = 0; y < 4; y++) xv[y] = Xs[rr][tx + 16 * y];
                for (int x = 0; x < 4; x++) {
                    int jj = ty + 16 * x;
                    if (!Vv[rr][jj]) continue; /* invisible rows never read: a NaN input must not leak */
                    double wv = Ws[rr][jj], wb = Bs[rr][jj], wo = Os[rr][jj];
                    for (int y = 0; y < 4; y++) {
                        double ax = fabs(xv[y]);
                        blk[x][y] = fma(wv, xv[y], blk[x][y]);
                        bs[x][y] = fma(wb, ax, bs[x][y]);
                        os[x][y] = fma(wo, ax, os[x][y]);
                    }
                }
            }
            __syncthreads();
            if (stage % 2 == 1) { /* end of a 32-row block: fold */
                for (int x = 0; x < 4; x++)
                    for (int y = 0; y < 4; y++) {
                        double e;
                        two_sum_d(hi[x][y], blk[x][y], &hi[x][y], &e);
                        lo[x][y] += e;
                        blk[x][y] = 0;
                    }
            }
        }
    }
    for (int x = 0; x < 4; x++)
        for (int y = 0; y < 4; y++) {
            int64_t j = j0 + ty + 16 * x, c = c0 + tx + 16 * y;
            if (j >= Sk || c >= Dd) continue;
            ghi[j * Dd + c] = hi[x][y];
            glo[j * Dd + c] = lo[x][y];
            gb[j * Dd + c] = bs[x][y];
            go[j * Dd + c] = os[x][y];
        }
    if (stat && tid < KT && sj < Sk) {
        cst[sj] = sacc;
        if (mode == 1) cbad[sj] = sbad;
    }
}

// ----------------------------------------------------------------------------
// finishing: every sampled element's value, orc_err, kernel bound and flags (orc_bwd.c's
// dQ / column finalize with orc_formulas.h's orc_fm_grad_elem), written to the result blocks

/* the maxima over the chunk's normal rows of the O and LSE input ratios (orc_bwd.c keeps
 * the larger: NaN never replaces; the ratios are >= 0, so their bit patterns order) */
__global__ void k_ratio(int64_t nr, const orc_gpu_brow *br, unsigned long long *out) {
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= nr || br[r].kind != ROW_NORMAL) return;
    double a = br[r].o_ratio, l = br[r].lse_ratio;
    if (a > 0) atomicMax(&out[0], (unsigned long long)__double_as_longlong(a));
    if (l > 0) atomicMax(&out[1], (unsigned long long)__double_as_longlong(l));
}

/* dQ of sampled rows x0 .. x0+n-1 (row iq[y].s - r0 of the chunk) into vector y - qbase of
 * q, one thread per element */
__global__ void k_dqfin(orc_gpu_bwd_desc d, orc_gpu_dblk q, const orc_index *iq, int64_t x0, int64_t n, int64_t qbase,
                        int64_t r0, double scale, int bf16, const orc_gpu_brow *br, const double *qs,
                        const double *qb, const double *qo) {
    int64_t D = d.f.D, t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n * D) return;
    int64_t y = x0 + t / D, dd = t % D, r = iq[y].s - r0, e = (y - qbase) * D + dd, x = r * D + dd;
    orc_gpu_brow R = br[r];
    if (R.kind != ROW_NORMAL) {
        q.ref[e] = R.kind == ROW_MASKED ? 0.0 : NAN;
        q.bound[e] = q.oe[e] = R.kind == ROW_MASKED ? 0.0 : NAN;
        q.flags[e] = (uint8_t)(R.kind == ROW_MASKED ? ORC_F_MASKED_ROW
                               : R.kind == ROW_NAN  ? ORC_F_NAN
                                                    : ORC_F_UNCHECKABLE | (R.ovf ? ORC_F_OVERFLOW : 0));
        return;
    }
    double sumsafe = ORC_SAFETY * (1 + orc_gamma((double)R.n + 16, ORC_U_D));
    double val, eo, pre, bound;
    orc_fm_grad_elem(&d.f.mk, scale, qs[x], qb[x], qo[x], sumsafe, R.fq, 0, 1, 0, bf16, 0, &val, &eo, &pre, &bound);
    uint8_t fl = orc_fm_value_flags(val);
    if (R.bad || !isfinite(bound)) fl |= ORC_F_UNCHECKABLE;
    if (R.rovf) fl |= ORC_F_OVERFLOW;
    q.ref[e] = val;
    q.oe[e] = eo;
    q.bound[e] = bound;
    q.flags[e] = fl;
}

/* dK (x < D) and dV (x >= D) of sampled columns c0 .. c0+n-1 (key ic[y].s) into vector
 * y - cbase of fin.dk / fin.dv, one thread per element; the group's sums (hi already folded),
 * counts, floors and overflow tests */
__global__ void k_colfin(orc_gpu_bwd_desc d, orc_gpu_bfin fin, const orc_index *ic, int64_t c0, int64_t n,
                         int64_t cbase,
                         const double *ks, const double *kb, const double *ko, const double *kh, const double *vs,
                         const double *vb, const double *vo, const double *vh, const int64_t *ncolv,
                         const double *sdsm, const double *spv, const int *cbad, const int *covf,
                         const unsigned long long *qd) {
    const orc_gpu_fwd_desc &f = d.f;
    const orc_model *mk = &f.mk;
    int64_t D = f.D, Dv = f.Dv, W = D + Dv, t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n * W) return;
    int64_t y = c0 + t / W, xx = t % W, j = ic[y].s, ncol = ncolv[j];
    int k = xx >= D;
    int64_t dd = k ? xx - D : xx, dim = k ? Dv : D, x = j * dim + dd, e = (y - cbase) * dim + dd;
    double G = (double)f.G, nn = (double)(ncol + f.G), sc = fabs(fin.scale);
    double sumsafe = ORC_SAFETY * (1 + orc_gamma(nn + 16, ORC_U_D));
    double qmax = __longlong_as_double((long long)qd[0]), domax = __longlong_as_double((long long)qd[1]);
    double sck = mk->ds_fold && sc > 1 ? sc : 1;
    double cc_kk_bound = orc_acc_coef(mk, nn, (double)(f.G * f.Sq + f.G), 0);
    int ovf;
    double fl, scl;
    if (!k) {
        fl = orc_fm_dqk_floor(mk, sc, sdsm[j], nn);
        ovf = covf[j] || !(sdsm[j] * qmax * (1 + cc_kk_bound) * sck < fin.thr32);
        scl = fin.scale;
    } else {
        fl = orc_fm_dv_floor(mk, spv[j], nn);
        ovf = covf[j] || !(spv[j] * domax * (1 + cc_kk_bound) < fin.thr32);
        scl = 1.0;
    }
    int split = f.G > 1 && mk->gqa != FA_GQA_FUSED;
    const double *s_ = k ? vs : ks, *bs = k ? vb : kb, *os = k ? vo : ko, *ha = k ? vh : kh;
    double val, eo, pre, bound;
    orc_fm_grad_elem(mk, scl, s_[x], bs[x], os[x], sumsafe, fl, 1, G, fin.u_in, fin.bf16, ha[x], &val, &eo, &pre,
                     &bound);
    int ovf_e = ovf || (split && !(fabs(scl) * ha[x] + 2 * G * eo + pre < fin.thrdt));
    orc_gpu_dblk bl = k ? fin.dv : fin.dk;
    bl.ref[e] = val;
    bl.oe[e] = eo;
    bl.bound[e] = ncol ? bound : 0;
    bl.flags[e] = (uint8_t)(orc_fm_value_flags(val) | (ncol ? 0 : ORC_F_MASKED_ROW) |
                            ((cbad[j] || !isfinite(bound)) ? ORC_F_UNCHECKABLE : 0) | (ovf_e && ncol ? ORC_F_OVERFLOW : 0));
}

/* reference-time escalation: need[v] = 1 when vector v has an element of the rule */
__global__ void k_escneed(orc_gpu_dblk a, int64_t dim, int64_t n, double ratio, int *need) {
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n * dim) return;
    if (!(a.flags[t] & (ORC_F_NAN | ORC_F_INF | ORC_F_UNCHECKABLE | ORC_F_MASKED_ROW)) && a.oe[t] > ratio * a.bound[t])
        need[t / dim] = 1;
}
__global__ void k_esclist(orc_gpu_dblk a, int64_t dim, int64_t n, int all, const int *need, int64_t *list,
                          unsigned long long *cnt) {
    int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= n) return;
    if ((all || need[v]) && !(dim > 0 && (a.flags[v * dim] & ORC_F_MASKED_ROW))) list[atomicAdd(cnt, 1ULL)] = v;
}

// ----------------------------------------------------------------------------
// host side

static unsigned nblk(int64_t n, int t) { return (unsigned)((n + t - 1) / t); }

/* The buffers, stream and events stay in the thread's pool (orc_gpu_pool) for the next call;
 * the timing events are the call's. */
extern "C" void orc_gpu_bwd_end(orc_gpu_bwd_state *st) {
    if (!st) return;
    if (st->s) cudaStreamSynchronize(st->s);
    for (int64_t k = 0; k < st->nfev; k++) cudaEventDestroy(st->fev[k]);
    free(st->fev);
    for (int64_t k = 0; k < st->npev; k++) cudaEventDestroy(st->pev[k]);
    free(st->pev);
    free(st->pcl);
    if (st->t0) cudaEventDestroy(st->t0);
    if (st->t1) cudaEventDestroy(st->t1);
    free(st);
}

#define PD(site, p, bytes) (orc_gpu_pool(32 + (site), (size_t)(bytes), 0, (void **)&(p), msg, n) == 0)

extern "C" int orc_gpu_bwd_begin(const orc_gpu_bwd_desc *d, const orc_gpu_bfin *fin, const int64_t *rlo,
                                 const int64_t *rhi, int64_t *rc_out, orc_gpu_bwd_state **out, char *msg, size_t n) {
    *out = NULL;
    orc_gpu_bwd_state *st = (orc_gpu_bwd_state *)calloc(1, sizeof *st);
    if (!st) { snprintf(msg, n, "out of host memory"); return -1; }
    st->d = *d;
    st->fin = *fin;
    st->hrlo = rlo;
    st->hrhi = rhi;
    st->b = st->hk = -1;
    (void)cudaGetLastError(); /* errors left by earlier calls are not this run's */
    /* the inputs' writers (a backend's kernels, a copy from pageable memory whose DMA may
     * still run) are on other streams: the tier's non-blocking stream must not overtake them */
    if (!cu_ok(cudaDeviceSynchronize(), "synchronize before the oracle", msg, n)) { free(st); return -1; }
    const orc_gpu_fwd_desc &f = d->f;
    size_t fr = 0, tot = 0;
    if (!cu_ok(cudaMemGetInfo(&fr, &tot), "memory info", msg, n)) { free(st); return -1; }
    int64_t Sk = f.Sk > 0 ? f.Sk : 1, Sq = f.Sq > 0 ? f.Sq : 1, D = f.D, Dv = f.Dv;
    /* column accumulators: 6 doubles per (key, dim) */
    double fixed = 48.0 * (double)Sk * (double)(D + Dv) + 64.0 * (double)Sk + 16.0 * (double)Sq +
                   24.0 * (double)(fin->nq + fin->nc + 1);
    double budget = (double)fr * 0.5 < 0x1p33 ? (double)fr * 0.5 : 0x1p33;
    budget -= fixed;
    /* per row: 9 matrices of Sk doubles, 3 [Dv] + 5 [D] sums, 2 tile-span words per 64 */
    int64_t rc = budget > 0 ? (int64_t)(budget / (72.0 * (double)Sk + 40.0 * (double)D + 24.0 * (double)Dv + 160.0)) / RT * RT : 0;
    int64_t sq = (f.Sq + RT - 1) / RT * RT;
    if (rc > sq) rc = sq;
    if (rc > (int64_t)65535 * RT) rc = (int64_t)65535 * RT;
    if (rc < RT) rc = RT;
    st->rc = rc;
    st->ntmax = rc / RT;
    int64_t nck = (f.Sq + rc - 1) / rc;
    if (nck < 1) nck = 1;
    size_t nm = (size_t)rc * (size_t)Sk;
    void *sp_ = NULL;
    int ok = orc_gpu_pool_stream_get(&sp_, msg, n) == 0;
    st->s = (cudaStream_t)sp_;
    for (int k = 0; ok && k < MX_N; k++) ok = PD(k < 8 ? k : 81 + (k - 8), st->M[k], nm * 8);
    ok = ok && PD(82, st->as, rc * D * 8) && PD(83, st->ae, rc * D * 8) && PD(84, st->cdd, rc * 8) &&
         PD(85, st->cA, rc * 8) && PD(86, st->diq, (fin->nq + 1) * sizeof(orc_index)) &&
         PD(87, st->dic, (fin->nc + 1) * sizeof(orc_index)) && PD(88, st->rat, 16);
    ok = ok && PD(8, st->num, rc * Dv * 8) && PD(9, st->bsum, rc * Dv * 8) && PD(10, st->osum, rc * Dv * 8) &&
         PD(11, st->qs, rc * D * 8) && PD(12, st->qb, rc * D * 8) && PD(13, st->qo, rc * D * 8) &&
         PD(14, st->eomax, rc * 8) && PD(15, st->cq, rc * 8) && PD(16, st->cqo, rc * 8) &&
         PD(17, st->ri, rc * sizeof(orc_row_info)) && PD(18, st->br, rc * sizeof(orc_gpu_brow)) &&
         PD(19, st->rlo, Sq * 8) && PD(20, st->rhi, Sq * 8) && PD(21, st->rng, (size_t)(2 * st->ntmax * nck) * 8) &&
         PD(22, st->k1, 48);
    for (int k = 0; ok && k < CA_N; k++) ok = PD(23 + k, st->ca[k], (size_t)Sk * (size_t)(k < CA_VHI ? D : Dv) * 8);
    ok = ok && PD(35, st->ncol, Sk * 8) && PD(36, st->sdsm, Sk * 8) && PD(37, st->sp, Sk * 8) &&
         PD(38, st->cbad, Sk * 4) && PD(39, st->covf, Sk * 4) && PD(40, st->colc, Sk * sizeof(orc_fm_colc));
    /* the tile spans of every chunk: [chunk][tl (nt) | th (nt)], nt = its tiles */
    int64_t *hr = ok ? (int64_t *)malloc((size_t)(2 * st->ntmax * nck) * 8) : NULL;
    if (ok && !hr) { snprintf(msg, n, "out of host memory"); ok = 0; }
    for (int64_t ci = 0; ok && ci < nck; ci++) {
        int64_t r0 = ci * rc, nr = f.Sq - r0 < rc ? f.Sq - r0 : rc, nt = (nr + RT - 1) / RT;
        int64_t *tl = hr + ci * 2 * st->ntmax, *th = tl + nt;
        for (int64_t t = 0; t < nt; t++) {
            int64_t a = INT64_MAX, z = -1;
            for (int64_t r = t * RT; r < nr && r < (t + 1) * RT; r++) {
                int64_t lo = rlo[r0 + r], hi = rhi[r0 + r];
                if (hi < lo) continue;
                if (lo < a) a = lo;
                if (hi > z) z = hi;
            }
            if (z < 0) a = 0;
            tl[t] = a;
            th[t] = z;
        }
    }
    ok = ok && cu_ok(cudaEventCreate(&st->t0), "event", msg, n) && cu_ok(cudaEventCreate(&st->t1), "event", msg, n);
    if (ok && f.Sq > 0)
        ok = cu_ok(cudaMemcpyAsync(st->rlo, rlo, (size_t)f.Sq * 8, cudaMemcpyHostToDevice, st->s), "upload", msg, n) &&
             cu_ok(cudaMemcpyAsync(st->rhi, rhi, (size_t)f.Sq * 8, cudaMemcpyHostToDevice, st->s), "upload", msg, n) &&
             cu_ok(cudaMemcpyAsync(st->rng, hr, (size_t)(2 * st->ntmax * nck) * 8, cudaMemcpyHostToDevice, st->s), "upload", msg, n);
    if (ok && fin->nq > 0)
        ok = cu_ok(cudaMemcpyAsync(st->diq, fin->iq, (size_t)fin->nq * sizeof(orc_index), cudaMemcpyHostToDevice, st->s), "upload", msg, n);
    if (ok && fin->nc > 0)
        ok = cu_ok(cudaMemcpyAsync(st->dic, fin->ic, (size_t)fin->nc * sizeof(orc_index), cudaMemcpyHostToDevice, st->s), "upload", msg, n);
    ok = ok && cu_ok(cudaMemsetAsync(st->rat, 0, 16, st->s), "memset", msg, n) &&
         cu_ok(cudaStreamSynchronize(st->s), "upload", msg, n) && cu_ok(cudaEventRecord(st->t0, st->s), "event", msg, n);
    free(hr);
    if (!ok) { orc_gpu_bwd_end(st); return -1; }
    *rc_out = rc;
    *out = st;
    return 0;
}

/* a timed pair around the finishing kernels: k = 0 before, 1 after */
static int fin_mark(orc_gpu_bwd_state *st, int k, char *msg, size_t n) {
    if (k == 0 && st->nfev + 2 > st->cfev) {
        int64_t c = st->cfev ? 2 * st->cfev : 64;
        cudaEvent_t *x = (cudaEvent_t *)realloc(st->fev, (size_t)c * sizeof *x);
        if (!x) { snprintf(msg, n, "out of host memory"); return -1; }
        st->fev = x;
        st->cfev = c;
    }
    for (int i = 0; k == 0 && i < 2; i++) {
        if (!cu_ok(cudaEventCreate(&st->fev[st->nfev]), "event", msg, n)) return -1;
        st->nfev++;
    }
    return cu_ok(cudaEventRecord(st->fev[st->nfev - 2 + k], st->s), "event", msg, n) ? 0 : -1;
}

/* a part boundary: the kernels queued from here to the next mark are part cls (-1: none) */
static int part_mark(orc_gpu_bwd_state *st, int cls, char *msg, size_t n) {
    if (st->npev + 1 > st->cpev) {
        int64_t c = st->cpev ? 2 * st->cpev : 64;
        cudaEvent_t *x = (cudaEvent_t *)realloc(st->pev, (size_t)c * sizeof *x);
        if (x) st->pev = x;
        int *y = x ? (int *)realloc(st->pcl, (size_t)c * sizeof *y) : NULL;
        if (y) st->pcl = y;
        if (!x || !y) { snprintf(msg, n, "out of host memory"); return -1; }
        st->cpev = c;
    }
    if (!cu_ok(cudaEventCreate(&st->pev[st->npev]), "event", msg, n)) return -1;
    st->pcl[st->npev] = cls;
    st->npev++;
    return cu_ok(cudaEventRecord(st->pev[st->npev - 1], st->s), "event", msg, n) ? 0 : -1;
}

extern "C" int orc_gpu_bwd_group(orc_gpu_bwd_state *st, int64_t b, int64_t hk, double sp_o, char *msg, size_t n) {
    const orc_gpu_fwd_desc &f = st->d.f;
    cudaStream_t s = st->s;
    int64_t Sk = f.Sk;
    st->b = b;
    st->hk = hk;
    st->sp_o = sp_o;
    for (int k = 0; k < CA_N; k++)
        if (!cu_ok(cudaMemsetAsync(st->ca[k], 0, (size_t)Sk * (size_t)(k < CA_VHI ? f.D : f.Dv) * 8, s), "memset", msg, n))
            return -1;
    if (!cu_ok(cudaMemsetAsync(st->sdsm, 0, (size_t)Sk * 8, s), "memset", msg, n) ||
        !cu_ok(cudaMemsetAsync(st->sp, 0, (size_t)Sk * 8, s), "memset", msg, n) ||
        !cu_ok(cudaMemsetAsync(st->cbad, 0, (size_t)Sk * 4, s), "memset", msg, n) ||
        !cu_ok(cudaMemsetAsync(st->covf, 0, (size_t)Sk * 4, s), "memset", msg, n) ||
        !cu_ok(cudaMemsetAsync(st->k1, 0, 48, s), "memset", msg, n))
        return -1;
    if (orc_gpu_launch_kvstat(&f, s, b, hk, st->k1)) {
        snprintf(msg, n, "CUDA error in the GPU oracle's backward (kvstat launch)");
        return -1;
    }
    if (Sk > 0) {
        k_ncol<<<nblk(Sk, 128), 128, 0, s>>>(f, b, hk, st->rlo, st->rhi, st->ncol);
        k_colcoef<<<nblk(Sk, 128), 128, 0, s>>>(f, st->ncol, sp_o, st->colc);
    }
    if (f.G * f.Sq > 0) k_qdmax<<<nblk(f.G * f.Sq, 128), 128, 0, s>>>(st->d, b, hk, st->k1 + 4);
    return cu_ok(cudaGetLastError(), "group kernels", msg, n) ? 0 : -1;
}

extern "C" int orc_gpu_bwd_head(orc_gpu_bwd_state *st, int end, char *msg, size_t n) {
    const orc_gpu_fwd_desc &f = st->d.f;
    int64_t nk = f.Sk * f.D, nv = f.Sk * f.Dv;
    if (nk > 0) k_head<<<nblk(nk, 256), 256, 0, st->s>>>(nk, end, st->ca[CA_KHI], st->ca[CA_KLO], st->ca[CA_KHS], st->ca[CA_KHA]);
    if (nv > 0) k_head<<<nblk(nv, 256), 256, 0, st->s>>>(nv, end, st->ca[CA_VHI], st->ca[CA_VLO], st->ca[CA_VHS], st->ca[CA_VHA]);
    return cu_ok(cudaGetLastError(), "head kernels", msg, n) ? 0 : -1;
}

extern "C" int orc_gpu_bwd_chunk(orc_gpu_bwd_state *st, int64_t h, int64_t r0, int64_t nr, int64_t x0, int64_t x1,
                                 int64_t qbase, char *msg, size_t n) {
    const orc_gpu_bwd_desc &d = st->d;
    const orc_gpu_fwd_desc &f = d.f;
    cudaStream_t s = st->s;
    int64_t b = st->b, hk = st->hk, Sk = f.Sk, D = f.D, Dv = f.Dv;
    if (nr <= 0) return 0;
    if (nr > st->rc || hk != h / f.G || r0 % st->rc) {
        snprintf(msg, n, "internal: chunk of %lld rows at %lld, head %lld", (long long)nr, (long long)r0, (long long)h);
        return -1;
    }
    int64_t nt = (nr + RT - 1) / RT;
    int64_t *dtl = st->rng + (r0 / st->rc) * 2 * st->ntmax, *dth = dtl + nt;
    double **M = st->M;
    orc_gpu_ten tq = {f.q, {f.qs[0], f.qs[1], f.qs[2], f.qs[3]}}, tk = {f.k, {f.ks[0], f.ks[1], f.ks[2], f.ks[3]}};
    orc_gpu_ten tv = {f.v, {f.vs[0], f.vs[1], f.vs[2], f.vs[3]}};
    orc_gpu_ten tdo = {d.dout, {d.dos[0], d.dos[1], d.dos[2], d.dos[3]}};
    int e = 0;
    if (part_mark(st, ORC_GPU_P_FWDROW, msg, n)) return -1;
    /* the forward row: S, A; W, C, CO, Eo_max, row info; O's sums */
    e |= orc_gpu_launch_dots(&f, s, tq, tk, D, b, h, r0, nr, dtl, dth, M[MX_S], M[MX_A]);
    e |= orc_gpu_launch_rows(&f, s, b, h, r0, nr, st->rlo + r0, st->rhi + r0, dtl, dth, st->k1, M[MX_S], M[MX_A],
                             M[MX_W], M[MX_C], M[MX_CO], st->eomax, st->ri);
    e |= orc_gpu_launch_wsum(&f, s, tv, Dv, b, h, nr, dtl, dth, M[MX_W], M[MX_W], M[MX_C], M[MX_CO], NULL, NULL, NULL,
                             st->num, st->bsum, st->osum);
    /* dP, B */
    if (part_mark(st, ORC_GPU_P_DP, msg, n)) return -1;
    e |= orc_gpu_launch_dots(&f, s, tdo, tv, Dv, b, h, r0, nr, dtl, dth, M[MX_DP], M[MX_B]);
    if (e) { snprintf(msg, n, "CUDA error in the GPU oracle's backward (forward kernels' launch)"); return -1; }
    if (part_mark(st, ORC_GPU_P_BROW, msg, n)) return -1;
    k_brow<<<nblk(nr * 32, 128), 128, 0, s>>>(d, b, h, r0, nr, st->rlo, st->rhi, dtl, dth, st->k1, st->ri, st->eomax,
                                             st->num, st->bsum, st->osum, M[0], M[1], M[2], M[3], M[4], M[5], M[6],
                                             M[7], M[8], st->br, st->cq, st->cqo, st->cdd, st->cA, st->covf);
    if (!cu_ok(cudaGetLastError(), "k_brow", msg, n)) return -1;
    /* dQ */
    if (part_mark(st, ORC_GPU_P_DQ, msg, n)) return -1;
    e |= orc_gpu_launch_wsum(&f, s, tk, D, b, h, nr, dtl, dth, M[MX_P], M[MX_DS], M[MX_DSEQ], M[MX_DSEO], M[MX_DSM],
                             st->cq, st->cqo, st->qs, st->qb, st->qo);
    /* the row-common part of D' - D (5.9): A = sum P K, its error weights PPIO + cA P1 */
    e |= orc_gpu_launch_wsum(&f, s, tk, D, b, h, nr, dtl, dth, M[MX_P], M[MX_P], M[MX_PPIO], M[MX_PPIO], M[MX_P1],
                             st->cA, st->cA, st->as, st->ae, NULL);
    if (e) { snprintf(msg, n, "CUDA error in the GPU oracle's backward (dQ sums' launch)"); return -1; }
    if (D > 0) k_dqcommon<<<nblk(nr * D, 256), 256, 0, s>>>(nr, D, st->cdd, st->as, st->ae, st->qb);
    /* dK, dV */
    if (part_mark(st, ORC_GPU_P_DK, msg, n)) return -1;
    if (Sk > 0) {
        /* the column statistics ride in the column sums' first dim blocks when both run */
        int fuse = D > 0 && Dv > 0;
        if (!fuse)
            k_colstat<<<nblk(Sk, 128), 128, 0, s>>>(f, nr, dtl, dth, M[MX_P], M[MX_DSM], M[MX_PPI], M[MX_P1], st->br,
                                                     st->sdsm, st->sp, st->cbad);
        if (D > 0) {
            dim3 g(nblk(Sk, KT), nblk(D, KT));
            k_colsum<<<g, 256, 0, s>>>(d, 0, tq, D, b, h, r0, nr, dtl, dth, M[MX_P], M[MX_DS], M[MX_DSE], M[MX_DSEO],
                                       M[MX_DSM], st->colc, st->ca[CA_KHI], st->ca[CA_KLO], st->ca[CA_KB],
                                       st->ca[CA_KO], st->br, fuse ? st->sdsm : NULL, NULL);
        }
        if (Dv > 0) {
            if (part_mark(st, ORC_GPU_P_DV, msg, n)) return -1;
            dim3 g(nblk(Sk, KT), nblk(Dv, KT));
            k_colsum<<<g, 256, 0, s>>>(d, 1, tdo, Dv, b, h, r0, nr, dtl, dth, M[MX_P], M[MX_PPI], M[MX_P1],
                                       M[MX_PPIO], NULL, st->colc, st->ca[CA_VHI], st->ca[CA_VLO], st->ca[CA_VB],
                                       st->ca[CA_VO], st->br, fuse ? st->sp : NULL, fuse ? st->cbad : NULL);
        }
        if (!cu_ok(cudaGetLastError(), "column kernels", msg, n)) return -1;
    }
    /* the finishing of the chunk's sampled dQ rows */
    if (part_mark(st, -1, msg, n) || fin_mark(st, 0, msg, n)) return -1;
    k_ratio<<<nblk(nr, 128), 128, 0, s>>>(nr, st->br, st->rat);
    if (x1 > x0 && D > 0)
        k_dqfin<<<nblk((x1 - x0) * D, 128), 128, 0, s>>>(d, st->fin.dq, st->diq, x0, x1 - x0, qbase, r0, st->fin.scale,
                                                          st->fin.bf16, st->br, st->qs, st->qb, st->qo);
    if (!cu_ok(cudaGetLastError(), "dQ finishing", msg, n)) return -1;
    return fin_mark(st, 1, msg, n);
}

extern "C" int orc_gpu_bwd_cols(orc_gpu_bwd_state *st, int64_t c0, int64_t ncs, int64_t cbase, char *msg, size_t n) {
    const orc_gpu_fwd_desc &f = st->d.f;
    cudaStream_t s = st->s;
    int64_t Sk = f.Sk, nk = Sk * f.D, nv = Sk * f.Dv;
    if (nk > 0) k_fold<<<nblk(nk, 256), 256, 0, s>>>(nk, st->ca[CA_KHI], st->ca[CA_KLO]);
    if (nv > 0) k_fold<<<nblk(nv, 256), 256, 0, s>>>(nv, st->ca[CA_VHI], st->ca[CA_VLO]);
    if (!cu_ok(cudaGetLastError(), "fold", msg, n)) return -1;
    int64_t ne = ncs * (f.D + f.Dv);
    if (ne <= 0) return 0;
    if (fin_mark(st, 0, msg, n)) return -1;
    k_colfin<<<nblk(ne, 128), 128, 0, s>>>(st->d, st->fin, st->dic, c0, ncs, cbase, st->ca[CA_KHI], st->ca[CA_KB],
                                           st->ca[CA_KO], st->ca[CA_KHA], st->ca[CA_VHI], st->ca[CA_VB],
                                           st->ca[CA_VO], st->ca[CA_VHA], st->ncol, st->sdsm, st->sp, st->cbad,
                                           st->covf, st->k1 + 4);
    if (!cu_ok(cudaGetLastError(), "column finishing", msg, n)) return -1;
    return fin_mark(st, 1, msg, n);
}

extern "C" int orc_gpu_bwd_fetch(orc_gpu_bwd_state *st, const orc_gpu_dblk *src, int64_t ne, double *ref,
                                 double *bound, double *oe, uint8_t *flags, char *msg, size_t n) {
    if (ne <= 0) return 0;
    size_t b = (size_t)ne * 8;
    return cu_ok(cudaMemcpyAsync(ref, src->ref, b, cudaMemcpyDeviceToHost, st->s), "blocks", msg, n) &&
                   cu_ok(cudaMemcpyAsync(bound, src->bound, b, cudaMemcpyDeviceToHost, st->s), "blocks", msg, n) &&
                   cu_ok(cudaMemcpyAsync(oe, src->oe, b, cudaMemcpyDeviceToHost, st->s), "blocks", msg, n) &&
                   cu_ok(cudaMemcpyAsync(flags, src->flags, (size_t)ne, cudaMemcpyDeviceToHost, st->s), "blocks", msg, n) &&
                   cu_ok(cudaStreamSynchronize(st->s), "blocks", msg, n)
               ? 0
               : -1;
}

extern "C" int orc_gpu_bwd_finish(orc_gpu_bwd_state *st, double *o_ratio, double *lse_ratio, double *ms_all,
                                  double *ms_fin, double *ms_part, char *msg, size_t n) {
    unsigned long long r[2] = {0, 0};
    if (!cu_ok(cudaMemcpyAsync(r, st->rat, 16, cudaMemcpyDeviceToHost, st->s), "ratios", msg, n) ||
        !cu_ok(cudaEventRecord(st->t1, st->s), "event", msg, n) || !cu_ok(cudaStreamSynchronize(st->s), "device work", msg, n))
        return -1;
    double a, l;
    memcpy(&a, &r[0], 8);
    memcpy(&l, &r[1], 8);
    *o_ratio = a;
    *lse_ratio = l;
    float ms = 0;
    if (!cu_ok(cudaEventElapsedTime(&ms, st->t0, st->t1), "timing", msg, n)) return -1;
    *ms_all = ms;
    double fsum = 0;
    for (int64_t k = 0; k + 1 < st->nfev; k += 2) {
        if (!cu_ok(cudaEventElapsedTime(&ms, st->fev[k], st->fev[k + 1]), "timing", msg, n)) return -1;
        fsum += ms;
    }
    *ms_fin = fsum;
    for (int k = 0; k < ORC_GPU_NPART; k++) ms_part[k] = 0;
    for (int64_t k = 0; k + 1 < st->npev; k++) {
        if (st->pcl[k] < 0) continue;
        if (!cu_ok(cudaEventElapsedTime(&ms, st->pev[k], st->pev[k + 1]), "timing", msg, n)) return -1;
        ms_part[st->pcl[k]] += ms;
    }
    return 0;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

extern "C" int orc_gpu_esc_scan(const orc_gpu_dblk *a, int64_t adim, const orc_gpu_dblk *b, int64_t bdim, int64_t nv,
                                double ratio, int all, int64_t **list, int64_t *nl, char *msg, size_t n) {
    *list = NULL;
    *nl = 0;
    if (nv <= 0) return 0;
    int *need = NULL;
    int64_t *dl = NULL;
    unsigned long long *cnt = NULL, hc = 0;
    int ok = cu_ok(cudaMalloc((void **)&need, (size_t)nv * 4), "escalation scan", msg, n) &&
             cu_ok(cudaMalloc((void **)&dl, (size_t)nv * 8), "escalation scan", msg, n) &&
             cu_ok(cudaMalloc((void **)&cnt, 8), "escalation scan", msg, n) &&
             cu_ok(cudaMemset(need, 0, (size_t)nv * 4), "memset", msg, n) && cu_ok(cudaMemset(cnt, 0, 8), "memset", msg, n);
    if (ok && !all) {
        if (adim > 0) k_escneed<<<nblk(nv * adim, 256), 256>>>(*a, adim, nv, ratio, need);
        if (b && bdim > 0) k_escneed<<<nblk(nv * bdim, 256), 256>>>(*b, bdim, nv, ratio, need);
    }
    if (ok) k_esclist<<<nblk(nv, 256), 256>>>(*a, adim, nv, all, need, dl, cnt);
    ok = ok && cu_ok(cudaGetLastError(), "escalation scan", msg, n) &&
         cu_ok(cudaMemcpy(&hc, cnt, 8, cudaMemcpyDeviceToHost), "escalation scan", msg, n);
    if (ok && hc > 0) {
        *list = (int64_t *)malloc((size_t)hc * 8);
        if (!*list) { snprintf(msg, n, "out of host memory"); ok = 0; }
        ok = ok && cu_ok(cudaMemcpy(*list, dl, (size_t)hc * 8, cudaMemcpyDeviceToHost), "escalation scan", msg, n);
        if (ok) {
            /* ascending (the atomic counter's order is not) */
            qsort(*list, (size_t)hc, 8, cmp_i64);
            *nl = (int64_t)hc;
        }
    }
    cudaFree(need);
    cudaFree(dl);
    cudaFree(cnt);
    if (!ok) { free(*list); *list = NULL; *nl = 0; return -1; }
    return 0;
}
