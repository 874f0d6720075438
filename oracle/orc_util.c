/* orc_util.c: exact fp16/bf16 decoding, visibility, validation, error models,
 * sampling and result storage of the oracle. Written from the semantics in
 * kernels/flash_api.h; shares no code with any kernel. */
#include <float.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "oracle/orc_internal.h"

// ----------------------------------------------------------------------------
// errors (own copy: the oracle links nothing from kernels/)

fa_status orc_fail(fa_error *err, fa_status st, const char *arg, const char *fmt, ...) {
    if (err) {
        err->status = st;
        snprintf(err->arg, sizeof err->arg, "%s", arg ? arg : "");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return st;
}

// ----------------------------------------------------------------------------
// fp16 / bf16: exact decoding and round-to-nearest-even encoding

typedef struct { int mant_bits, emin, emax; } orc_fmt;
static orc_fmt orc_fmt_of(fa_dtype dt) {
    return dt == FA_BF16 ? (orc_fmt){7, -126, 127} : (orc_fmt){10, -14, 15};
}

/* Exact: every fp16/bf16 value is a double (bit assembly, orc_internal.h;
 * test_oracle_basic compares all 2^16 patterns with an ldexp-based decoder). */
double orc_decode(uint16_t bits, fa_dtype dt) { return orc_decode_fast(bits, dt); }

/* Round to nearest, ties to even (one rounding: the scaled significand is
 * exact in double and nearbyint rounds it in the default mode). */
uint16_t orc_encode(double x, fa_dtype dt) {
    orc_fmt f = orc_fmt_of(dt);
    int ebits = 15 - f.mant_bits, bias = -f.emin + 1;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    uint16_t inf = (uint16_t)(sign | (((1 << ebits) - 1) << f.mant_bits));
    if (isnan(x)) return (uint16_t)(inf | (1 << (f.mant_bits - 1)));
    double a = fabs(x);
    if (isinf(a)) return inf;
    if (a < ldexp(1.0, f.emin)) /* subnormal range; q == 2^mant_bits is the smallest normal */
        return (uint16_t)(sign | (uint16_t)nearbyint(ldexp(a, f.mant_bits - f.emin)));
    int ex;
    frexp(a, &ex);
    int E = ex - 1;
    double mant = nearbyint((ldexp(a, -E) - 1.0) * (double)(1 << f.mant_bits));
    if (mant == (double)(1 << f.mant_bits)) { E++; mant = 0; }
    if (E > f.emax) return inf;
    return (uint16_t)(sign | ((E + bias) << f.mant_bits) | (uint16_t)mant);
}

double orc_unit_roundoff(fa_dtype dt) { return dt == FA_BF16 ? 0x1p-8 : 0x1p-11; }

/* Exact: largest finite + half an ulp; RN-even sends that tie to Inf (the even
 * neighbour is the next power of two). */
double orc_overflow_threshold(int dt) {
    if (dt < 0) return ORC_F32_OVF;             /* fp32: (2 - 2^-23 + 2^-24) 2^127 */
    return dt == FA_BF16 ? 0x1.ffp127 : 65520.0;   /* bf16: 0x1.fep127 + 2^119; fp16: 65504 + 16 */
}

// ----------------------------------------------------------------------------
// visibility (flash_api.h): diag(i) = i (top-left) or i + Sk - Sq (bottom-right)

static __int128 orc_diag(const fa_problem *p, int64_t i) {
    int bottom_right = p->causal == FA_CAUSAL_BOTTOM_RIGHT ||
                       (p->causal == FA_CAUSAL_NONE && p->window_align == FA_ALIGN_BOTTOM_RIGHT);
    return bottom_right ? (__int128)i + p->seqlen_k - p->seqlen_q : (__int128)i;
}

void orc_row_range(const fa_problem *p, int64_t i, int64_t *lo, int64_t *hi) {
    __int128 d = orc_diag(p, i), l = 0, h = (__int128)p->seqlen_k - 1;
    if (p->causal != FA_CAUSAL_NONE && d < h) h = d;
    if (p->window_left >= 0 && d - p->window_left > l) l = d - p->window_left;
    if (p->window_right >= 0 && d + p->window_right < h) h = d + p->window_right;
    if (h < l) { *lo = 0; *hi = -1; return; }
    *lo = (int64_t)l;
    *hi = (int64_t)h;
}

int orc_visible(const fa_problem *p, int64_t i, int64_t j) {
    int64_t lo, hi;
    if (i < 0 || i >= p->seqlen_q || j < 0 || j >= p->seqlen_k) return 0;
    orc_row_range(p, i, &lo, &hi);
    return j >= lo && j <= hi;
}

// ----------------------------------------------------------------------------
// error models (BOUNDS.md section 1)

/* orc_gamma, orc_acc_coef: orc_formulas.h (shared with the GPU tier) */

void orc_model_kernel(const orc_ctx *c, const fa_precision *pr, orc_model *m) {
    double u_in = orc_unit_roundoff(c->dt);
    double f_in = c->dt == FA_BF16 ? 0x1p-134 : 0x1p-25; /* half the smallest subnormal */
    double nmin = c->dt == FA_BF16 ? 0x1p-126 : 0x1p-14;
    memset(m, 0, sizeof *m);
    m->u_dot = pr->u_acc;
    m->u_acc = pr->u_acc;
    m->u_s = pr->scores_fp32 ? ORC_U_F : (u_in > ORC_U_F ? u_in : ORC_U_F);
    m->n_sr = pr->scores_fp32 ? 3 : 4;
    m->n_bq = pr->scores_fp32 == 1 ? 1 : 2;
    /* float 1/sqrt(D): <= 2 roundings. An unfused graph multiplies q and k by a float
     * sqrt(scale) (from a double): scale (1 + d)^2, |d| <= 2^-24 (1 + 2^-28), 3 2^-24 covers it
     * whatever the scale; the dtype graph (0) counts 4 2^-24 on top (10.5) */
    m->sigma = pr->scores_fp32 == 2 ? 3 * ORC_U_F
               : (c->scale_default ? 2 * ORC_U_F : 0.0) + (pr->scores_fp32 ? 0.0 : 4 * ORC_U_F);
    /* exp: exp_rel_err, or exp_ulps ulps of an fp32 result (<= exp_ulps 2^-23 relative) */
    m->u_e = pr->exp_rel_err;
    if (pr->exp_ulps * 0x1p-23 > m->u_e) m->u_e = pr->exp_ulps * 0x1p-23;
    m->u_log = m->u_e > 2 * ORC_U_F ? m->u_e : 2 * ORC_U_F;
    m->R = pr->max_rescales >= 0 ? ceil(pr->max_rescales * (double)c->Sk / 1000.0) + 1
                                 : (double)c->Sk + 1;
    if (pr->p_rounded) { m->u_p = u_in; m->f_p = f_in; m->nmin_p = nmin; }
    if (pr->ds_rounded) { m->u_ds = u_in; m->f_ds = f_in; }
    if (pr->out_rounded) { m->u_out = u_in; m->f_out = f_in; }
    if (pr->dp_rounded) { m->u_dp = u_in; m->f_dp = f_in; }
    m->u_lse = ORC_U_F;
    m->u_div = 2 * m->u_s; /* reciprocal and multiply, or one division */
    /* underflow of one fp32 operation (BOUNDS.md section 9): flushed to zero, a
     * result or operand below 2^-126 is lost (< 2^-126); gradual underflow errs
     * by at most one subnormal ulp, 2^-149, an exp by exp_ulps of them (10.1) */
    m->tau = pr->flushes_subnormals ? 0x1p-126 : 0x1p-149;
    if (pr->exp_ulps * 0x1p-149 > m->tau) m->tau = pr->exp_ulps * 0x1p-149;
    m->lue = log1p(m->u_e) * (1 + 0x1p-50);
    if (pr->tc_terms > 0) {
        m->tc_t = pr->tc_terms;
        m->tc_a = ldexp(pr->tc_align_rn ? 0.5 : 1.0, -23 - pr->tc_extra_bits);
        m->tc_un = pr->tc_norm_rn ? 0x1p-24 : 0x1p-23;
        /* the tensor-core coefficient replaces IEEE adds of unit u_acc; every other fp32
         * add (row sums, rescales) is IEEE and below 2^-23 */
    }
    m->ds_fold = pr->ds_scale_folded;
    m->d_from_p = pr->d_source == FA_D_FROM_P;
    m->gqa = pr->gqa_reduce;
    /* tanhf: 2 ulps (CUDA C Programming Guide, "Mathematical Functions", single precision:
     * tanhf maximum ulp error 2; glibc tanhf 2 ulps): 2 * 2^-23 relative for a normal result,
     * 2 subnormal ulps (2^-148) below 2^-126, or the flushed 2^-126 (BOUNDS.md 14.1) */
    m->u_t = 2 * 0x1p-23;
    m->tau_t = m->tau > 0x1p-148 ? m->tau : 0x1p-148;
    m->lse_empty = pr->lse_empty == FA_LSE_EMPTY_POS_INF ? INFINITY
                   : pr->lse_empty == FA_LSE_EMPTY_ZERO  ? 0.0
                                                         : -INFINITY;
}

void orc_model_oracle(const orc_ctx *c, orc_model *m) {
    memset(m, 0, sizeof *m);
    m->u_dot = ORC_U_D;
    m->u_acc = ORC_U_D;
    m->compensated = 1;
    m->u_s = ORC_U_D;
    m->n_sr = 3;
    m->sigma = c->scale_default ? 2 * ORC_U_D : 0.0; /* 1.0/sqrt((double)D): 2 roundings */
    m->lse_empty = -INFINITY;
    m->u_e = 0x1p-51; /* glibc exp/log: < 1 ulp (<= 2^-52 relative); 2^-51 for margin */
    m->u_log = 0x1p-51;
    m->u_t = 0x1p-51;     /* glibc tanh: <= 2 ulps (its manual's error table), 2^-51 relative */
    m->tau_t = 0x1p-1072; /* 2 ulps of a subnormal double result */
    m->lue = log1p(m->u_e) * (1 + 0x1p-50);
    m->R = 0;
    m->u_div = ORC_U_D;
}

// ----------------------------------------------------------------------------
// validation (like fa_validate_*, without a backend's head-dim limits)

static fa_status orc_check_problem(const fa_problem *p, fa_error *err) {
    struct { const char *name; int64_t v; int64_t min; } n[] = {
        {"batch", p->batch, 0},       {"seqlen_q", p->seqlen_q, 0}, {"seqlen_k", p->seqlen_k, 0},
        {"heads_q", p->heads_q, 1},   {"heads_kv", p->heads_kv, 1}, {"head_dim_qk", p->head_dim_qk, 1},
        {"head_dim_v", p->head_dim_v, 1}};
    for (size_t i = 0; i < sizeof n / sizeof n[0]; i++)
        if (n[i].v < n[i].min)
            return orc_fail(err, FA_ERR_INVALID, n[i].name, "%s = %lld; it must be >= %lld.",
                            n[i].name, (long long)n[i].v, (long long)n[i].min);
    if (p->heads_q % p->heads_kv != 0)
        return orc_fail(err, FA_ERR_INVALID, "heads_kv",
                        "heads_q = %lld is not a multiple of heads_kv = %lld; GQA needs Hq = g*Hkv.",
                        (long long)p->heads_q, (long long)p->heads_kv);
    if (p->dtype != FA_F16 && p->dtype != FA_BF16)
        return orc_fail(err, FA_ERR_INVALID, "dtype", "dtype %d is neither FA_F16 nor FA_BF16.",
                        (int)p->dtype);
    if (p->causal != FA_CAUSAL_NONE && p->causal != FA_CAUSAL_TOP_LEFT &&
        p->causal != FA_CAUSAL_BOTTOM_RIGHT)
        return orc_fail(err, FA_ERR_INVALID, "causal", "causal = %d is not a fa_causal value.",
                        (int)p->causal);
    if (p->window_align != FA_ALIGN_TOP_LEFT && p->window_align != FA_ALIGN_BOTTOM_RIGHT)
        return orc_fail(err, FA_ERR_INVALID, "window_align",
                        "window_align = %d is not a fa_align value.", (int)p->window_align);
    if (!isfinite(p->softmax_scale))
        return orc_fail(err, FA_ERR_INVALID, "softmax_scale",
                        "softmax_scale is not finite; pass a finite scale or 0 for 1/sqrt(Dqk).");
    return FA_OK;
}

/* A strided view: pointer, element size, dims, strides. Checks null, alignment,
 * negative strides and a byte extent that overflows. */
static fa_status orc_check_view(const char *name, const void *ptr, size_t esize, int nd,
                                const int64_t *dims, const int64_t *st, fa_error *err) {
    char arg[32];
    if (!ptr) return orc_fail(err, FA_ERR_INVALID, name, "%s is NULL; pass a host pointer.", name);
    if ((uintptr_t)ptr % esize)
        return orc_fail(err, FA_ERR_INVALID, name, "%s is not aligned to its %zu-byte element.",
                        name, esize);
    __int128 ext = 0;
    int empty = 0;
    for (int i = 0; i < nd; i++) {
        if (st[i] < 0) {
            snprintf(arg, sizeof arg, "%s.stride[%d]", name, i);
            return orc_fail(err, FA_ERR_INVALID, arg, "%s = %lld is negative; strides must be >= 0.",
                            arg, (long long)st[i]);
        }
        if (dims[i] == 0) empty = 1;
    }
    if (empty) return FA_OK;
    for (int i = 0; i < nd; i++) {
        ext += (__int128)(dims[i] - 1) * st[i];
        if (ext > (__int128)INT64_MAX) break;
    }
    __int128 bytes = (ext + 1) * (__int128)esize;
    if (ext > (__int128)INT64_MAX || bytes > (__int128)INT64_MAX ||
        (__int128)(uintptr_t)ptr + bytes > (__int128)UINTPTR_MAX) {
        snprintf(arg, sizeof arg, "%s.stride", name);
        return orc_fail(err, FA_ERR_INVALID, arg, "the strides of %s give an extent that overflows "
                        "64 bits; check the strides.", name);
    }
    return FA_OK;
}

static void orc_ctx_common(orc_ctx *c, const fa_problem *p) {
    c->p = *p;
    c->B = p->batch; c->Sq = p->seqlen_q; c->Sk = p->seqlen_k;
    c->Hq = p->heads_q; c->Hkv = p->heads_kv; c->G = p->heads_q / p->heads_kv;
    c->D = p->head_dim_qk; c->Dv = p->head_dim_v; c->dt = p->dtype;
    c->scale_default = p->softmax_scale == 0.0f;
    c->scale = c->scale_default ? 1.0 / sqrt((double)p->head_dim_qk) : (double)p->softmax_scale;
}

static fa_status orc_check_inputs(const fa_problem *p, const fa_tensor *q, const fa_tensor *k,
                                  const fa_tensor *v, const fa_mask *mask, fa_error *err) {
    fa_status st;
    int64_t dq[4] = {p->batch, p->seqlen_q, p->heads_q, p->head_dim_qk};
    int64_t dk[4] = {p->batch, p->seqlen_k, p->heads_kv, p->head_dim_qk};
    int64_t dv[4] = {p->batch, p->seqlen_k, p->heads_kv, p->head_dim_v};
    int64_t dm[4] = {p->batch, p->heads_q, p->seqlen_q, p->seqlen_k};
    if ((st = orc_check_view("q", q->ptr, 2, 4, dq, q->stride, err))) return st;
    if ((st = orc_check_view("k", k->ptr, 2, 4, dk, k->stride, err))) return st;
    if ((st = orc_check_view("v", v->ptr, 2, 4, dv, v->stride, err))) return st;
    if (mask->ptr && (st = orc_check_view("mask", mask->ptr, 4, 4, dm, mask->stride, err))) return st;
    return FA_OK;
}

/* The score features of contract v3 (softcap, sinks) into c; v3 = 0: refuse every v3
 * feature (the dense v2 contexts), 1: refuse only the layout ones (split by orc_seq.c). */
static fa_status orc_ctx_v3(orc_ctx *c, const fa_problem *p, const fa_varlen *vl, const float *sinks,
                            int v3, fa_error *err) {
    if (orc_seq_active(p, vl))
        return orc_fail(err, v3 ? FA_ERR_INVALID : FA_ERR_UNSUPPORTED, p->page_size ? "page_size" : "varlen",
                        "a packed or paged problem reaches a dense oracle context; the oracle's "
                        "orc_fwd / orc_bwd split it by sequence (the GPU tier does not model it).");
    if (!(p->softcap >= 0) || isinf(p->softcap))
        return orc_fail(err, FA_ERR_INVALID, "softcap", "softcap = %g; it must be finite and >= 0 (0: none).",
                        (double)p->softcap);
    if (p->has_sinks != 0 && p->has_sinks != 1)
        return orc_fail(err, FA_ERR_INVALID, "has_sinks", "has_sinks = %d; it must be 0 or 1.", p->has_sinks);
    if (p->has_sinks && !sinks)
        return orc_fail(err, FA_ERR_INVALID, "sinks", "has_sinks = 1 with sinks NULL; pass [heads_q] fp32 sinks.");
    if (!v3 && (p->softcap > 0 || p->has_sinks))
        return orc_fail(err, FA_ERR_UNSUPPORTED, p->softcap > 0 ? "softcap" : "has_sinks",
                        "this oracle tier does not model %s (the CPU tiers orc_fwd / orc_bwd do).",
                        p->softcap > 0 ? "softcap" : "sinks");
    if (p->has_sinks)
        for (int64_t h = 0; h < p->heads_q; h++)
            if (isnan(sinks[h]) || sinks[h] == INFINITY)
                return orc_fail(err, FA_ERR_INVALID, "sinks", "sinks[%lld] = %g; a sink must be a number "
                                "below +inf (-inf: no sink for that head).", (long long)h, (double)sinks[h]);
    c->softcap = (double)p->softcap;
    c->has_sinks = p->has_sinks;
    c->sinks = p->has_sinks ? sinks : NULL;
    return FA_OK;
}

static fa_status orc_ctx_fwd_any(const fa_fwd_args *a, orc_ctx *c, int v3, fa_error *err) {
    fa_status st;
    memset(c, 0, sizeof *c);
    if (!a) return orc_fail(err, FA_ERR_INVALID, "args", "args is NULL; pass a fa_fwd_args.");
    if ((st = orc_check_problem(&a->p, err))) return st;
    if ((st = orc_ctx_v3(c, &a->p, &a->varlen, a->sinks, v3, err))) return st;
    if ((st = orc_check_inputs(&a->p, &a->q, &a->k, &a->v, &a->mask, err))) return st;
    orc_ctx_common(c, &a->p);
    c->q = a->q.ptr; c->k = a->k.ptr; c->v = a->v.ptr; c->mask = a->mask.ptr;
    memcpy(c->qs, a->q.stride, sizeof c->qs);
    memcpy(c->ks, a->k.stride, sizeof c->ks);
    memcpy(c->vs, a->v.stride, sizeof c->vs);
    memcpy(c->ms, a->mask.stride, sizeof c->ms);
    return FA_OK;
}

static fa_status orc_ctx_bwd_any(const fa_bwd_args *a, orc_ctx *c, int v3, fa_error *err) {
    fa_status st;
    memset(c, 0, sizeof *c);
    if (!a) return orc_fail(err, FA_ERR_INVALID, "args", "args is NULL; pass a fa_bwd_args.");
    const fa_problem *p = &a->p;
    if ((st = orc_check_problem(p, err))) return st;
    if ((st = orc_ctx_v3(c, p, &a->varlen, a->sinks, v3, err))) return st;
    if ((st = orc_check_inputs(p, &a->q, &a->k, &a->v, &a->mask, err))) return st;
    int64_t d_o[4] = {p->batch, p->seqlen_q, p->heads_q, p->head_dim_v};
    int64_t dl[3] = {p->batch, p->heads_q, p->seqlen_q};
    if ((st = orc_check_view("o", a->o.ptr, 2, 4, d_o, a->o.stride, err))) return st;
    if ((st = orc_check_view("dout", a->dout.ptr, 2, 4, d_o, a->dout.stride, err))) return st;
    if ((st = orc_check_view("lse", a->lse.ptr, 4, 3, dl, a->lse.stride, err))) return st;
    orc_ctx_common(c, p);
    c->q = a->q.ptr; c->k = a->k.ptr; c->v = a->v.ptr; c->mask = a->mask.ptr;
    c->o = a->o.ptr; c->dout = a->dout.ptr; c->lse = a->lse.ptr;
    memcpy(c->qs, a->q.stride, sizeof c->qs);
    memcpy(c->ks, a->k.stride, sizeof c->ks);
    memcpy(c->vs, a->v.stride, sizeof c->vs);
    memcpy(c->ms, a->mask.stride, sizeof c->ms);
    memcpy(c->os, a->o.stride, sizeof c->os);
    memcpy(c->dos, a->dout.stride, sizeof c->dos);
    memcpy(c->ls, a->lse.stride, sizeof c->ls);
    return FA_OK;
}

fa_status orc_ctx_fwd(const fa_fwd_args *a, orc_ctx *c, fa_error *err) { return orc_ctx_fwd_any(a, c, 0, err); }
fa_status orc_ctx_bwd(const fa_bwd_args *a, orc_ctx *c, fa_error *err) { return orc_ctx_bwd_any(a, c, 0, err); }
fa_status orc_ctx_fwd3(const fa_fwd_args *a, orc_ctx *c, fa_error *err) { return orc_ctx_fwd_any(a, c, 1, err); }
fa_status orc_ctx_bwd3(const fa_bwd_args *a, orc_ctx *c, fa_error *err) { return orc_ctx_bwd_any(a, c, 1, err); }

fa_status orc_check_options(const orc_options *o, fa_error *err) {
    if (!o) return FA_OK;
    if (o->mpfr_prec < 113 || o->mpfr_prec > 100000)
        return orc_fail(err, FA_ERR_INVALID, "mpfr_prec",
                        "mpfr_prec = %d; it must be in [113, 100000] bits.", o->mpfr_prec);
    if (o->tier != ORC_TIER_CERTIFIED && o->tier != ORC_TIER_MPFR)
        return orc_fail(err, FA_ERR_INVALID, "tier", "tier = %d is not an orc_tier.", (int)o->tier);
    if (o->threads < 0)
        return orc_fail(err, FA_ERR_INVALID, "threads", "threads = %d; use 0 for the default.",
                        o->threads);
    if (o->lse_unknown != 0 && o->lse_unknown != 1)
        return orc_fail(err, FA_ERR_INVALID, "lse_unknown", "lse_unknown = %d; it must be 0 or 1.",
                        o->lse_unknown);
    if (o->max_rows < 0 || o->max_cols < 0)
        return orc_fail(err, FA_ERR_INVALID, o->max_rows < 0 ? "max_rows" : "max_cols",
                        "sampling limits must be >= 0 (0 = verify everything).");
    if (!(o->escalate_ratio >= 0) || isinf(o->escalate_ratio))
        return orc_fail(err, FA_ERR_INVALID, "escalate_ratio",
                        "escalate_ratio must be finite and >= 0.");
    return FA_OK;
}

fa_status orc_check_profile(const fa_precision *pr, fa_error *err) {
    if (!pr) return orc_fail(err, FA_ERR_INVALID, "prof", "prof is NULL; pass the backend's fa_precision.");
    if (!(pr->u_acc > 0 && pr->u_acc < 0.01))
        return orc_fail(err, FA_ERR_INVALID, "prof.u_acc", "u_acc must be in (0, 0.01).");
    if (!(pr->exp_rel_err >= 0 && pr->exp_rel_err < 0.01))
        return orc_fail(err, FA_ERR_INVALID, "prof.exp_rel_err", "exp_rel_err must be in [0, 0.01).");
    if (pr->scores_fp32 < 0 || pr->scores_fp32 > 2)
        return orc_fail(err, FA_ERR_INVALID, "prof.scores_fp32", "scores_fp32 must be 0 (dtype graph), 1 (fused fp32) "
                        "or 2 (unfused fp32 graph).");
    if (!(pr->exp_ulps >= 0 && pr->exp_ulps < 1e4))
        return orc_fail(err, FA_ERR_INVALID, "prof.exp_ulps", "exp_ulps must be in [0, 10^4) (ulps of fp32).");
    if (pr->tc_terms < 0 || pr->tc_terms > 4096 || pr->tc_extra_bits < 0 || pr->tc_extra_bits > 64)
        return orc_fail(err, FA_ERR_INVALID, "prof.tc_terms", "tc_terms must be in [0, 4096] and "
                        "tc_extra_bits in [0, 64] (oracle/BOUNDS.md 10.2).");
    if (pr->ds_scale_folded < 0 || pr->ds_scale_folded > 2)
        return orc_fail(err, FA_ERR_INVALID, "prof.ds_scale_folded", "ds_scale_folded must be 0, 1 or 2 (either).");
    if (pr->d_source != FA_D_FROM_O && pr->d_source != FA_D_FROM_P)
        return orc_fail(err, FA_ERR_INVALID, "prof.d_source", "d_source must be FA_D_FROM_O or FA_D_FROM_P.");
    if (pr->gqa_reduce < FA_GQA_FUSED || pr->gqa_reduce > FA_GQA_ROUND_SUM16)
        return orc_fail(err, FA_ERR_INVALID, "prof.gqa_reduce", "gqa_reduce must be a fa_gqa_reduce value.");
    if (pr->lse_empty < FA_LSE_EMPTY_NEG_INF || pr->lse_empty > FA_LSE_EMPTY_ZERO)
        return orc_fail(err, FA_ERR_INVALID, "prof.lse_empty", "lse_empty must be a fa_lse_empty value.");
    return FA_OK;
}

int orc_nthreads(const orc_options *o) {
#ifdef _OPENMP
    return o->threads > 0 ? o->threads : omp_get_max_threads();
#else
    (void)o;
    return 1;
#endif
}

void orc_options_init(orc_options *o) {
    memset(o, 0, sizeof *o);
    o->mpfr_prec = 128;
    o->tier = ORC_TIER_CERTIFIED;
    o->baseline = 1;
    /* Reference-time escalation only where the double tier's own error is a
     * visible part of the bound (BOUNDS.md section 6): every verdict stays certain
     * either way (compare escalates the undecided elements), and MPFR costs 10^3 x. */
    o->escalate_ratio = 0x1p-10;
}

// ----------------------------------------------------------------------------
// sampling (Knuth's selection sampling: sorted, exactly min(max, total) picks)

static uint64_t orc_splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

orc_index *orc_sample(int64_t B, int64_t H, int64_t S, int64_t max, uint64_t seed, int64_t *n) {
    int64_t total = B * H * S, want = (max == 0 || max > total) ? total : max;
    orc_index *ix = malloc((size_t)(want > 0 ? want : 1) * sizeof *ix);
    if (!ix) return NULL;
    uint64_t st = seed;
    int64_t got = 0;
    for (int64_t t = 0; t < total && got < want; t++) {
        if (want < total) {
            double u = (double)(orc_splitmix(&st) >> 11) * 0x1p-53;
            if ((double)(total - t) * u >= (double)(want - got)) continue;
        }
        ix[got].b = t / (H * S);
        ix[got].h = (t / S) % H;
        ix[got].s = t % S;
        got++;
    }
    *n = got;
    return ix;
}

int orc_block_alloc(orc_block *blk, int64_t n, int64_t dim, int baseline) {
    size_t ne = (size_t)(n * dim > 0 ? n * dim : 1);
    memset(blk, 0, sizeof *blk);
    blk->n = n;
    blk->dim = dim;
    blk->ref = calloc(ne, sizeof(double));
    blk->bound = calloc(ne, sizeof(double));
    blk->orc_err = calloc(ne, sizeof(double));
    blk->flags = calloc(ne, 1);
    if (baseline) blk->baseline = calloc(ne, sizeof(double));
    return blk->ref && blk->bound && blk->orc_err && blk->flags && (!baseline || blk->baseline);
}

void orc_block_free(orc_block *blk) {
    free(blk->index); free(blk->ref); free(blk->bound); free(blk->orc_err);
    free(blk->baseline); free(blk->flags);
    memset(blk, 0, sizeof *blk);
}
