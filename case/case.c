/* case.c: case defaults, checks, layouts, value generation, host buffers.
 * See case.h for the meaning of every field. */
#include "case/case.h"
#include "case/case_gen2_table.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* element count above which fills run on OpenMP threads */
#define FC_PAR_ELEMS ((int64_t)1 << 24)

/* ---------------------------------------------------------------------------
 * Names
 * ------------------------------------------------------------------------- */
static const char *const tensor_names[FC_T_COUNT] = {"q", "k", "v", "do", "mask",
                                                     "o", "lse", "dq", "dk", "dv"};
static const char *const dist_names[FC_DIST_COUNT] = {
    "gaussian", "large", "tiny", "sparse_int", "heavy_tail", "spikes", "const_rows", "ties"};
static const char *const mask_names[FC_MASK_COUNT] = {
    "none", "random_neginf", "stripes", "full_rows", "full_cols", "random_finite",
    "random_mixed", "key_padding"};

static int name_lookup(const char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

const char *fc_tensor_name(int t) { return (t >= 0 && t < FC_T_COUNT) ? tensor_names[t] : "?"; }
int fc_tensor_by_name(const char *name) { return name_lookup(tensor_names, FC_T_COUNT, name); }
const char *fc_dist_name(fc_dist_kind k) {
    return ((int)k >= 0 && k < FC_DIST_COUNT) ? dist_names[k] : "?";
}
int fc_dist_by_name(const char *name) { return name_lookup(dist_names, FC_DIST_COUNT, name); }
const char *fc_mask_name(fc_mask_kind k) {
    return ((int)k >= 0 && k < FC_MASK_COUNT) ? mask_names[k] : "?";
}
int fc_mask_by_name(const char *name) { return name_lookup(mask_names, FC_MASK_COUNT, name); }

/* ---------------------------------------------------------------------------
 * Defaults and sanity
 * ------------------------------------------------------------------------- */
void fc_case_default(fc_case *c) {
    memset(c, 0, sizeof *c);
    c->p.batch = 1;
    c->p.seqlen_q = 16;
    c->p.seqlen_k = 16;
    c->p.heads_q = 1;
    c->p.heads_kv = 1;
    c->p.head_dim_qk = 32;
    c->p.head_dim_v = 32;
    c->p.dtype = FA_F16;
    c->p.softmax_scale = 0.0f;
    c->p.causal = FA_CAUSAL_NONE;
    c->p.window_left = -1;
    c->p.window_right = -1;
    c->p.window_align = FA_ALIGN_TOP_LEFT;
    c->mask.kind = FC_MASK_NONE;
    c->mask.shift = 1;
    for (int t = 0; t < FC_T_COUNT; t++)
        for (int d = 0; d < 4; d++) c->layout[t].order[d] = d;
    c->layout[FC_T_LSE].order[3] = 3; /* unused 4th slot of a 3-d tensor */
    for (int i = 0; i < FC_N_DIST_INPUTS; i++) c->dist[i].kind = FC_DIST_GAUSSIAN;
    c->seed = 1;
    c->gen = FC_GEN_LATEST;
    c->backward = 1;
    c->deterministic = 1;
    c->v3.sinks.kind = FC_DIST_GAUSSIAN;
}

#define FAIL(...)                                              \
    do {                                                       \
        if (msg && msglen) snprintf(msg, msglen, __VA_ARGS__); \
        return -1;                                             \
    } while (0)

/* Element count and span of tensor t computed with overflow checks (the same formulas as
 * fc_case_numel, fc_case_strides and fc_case_span). 0 ok, -1 when any product or sum
 * exceeds INT64_MAX. Needs valid layout orders and pads in [0, 4096]. */
static int checked_extents(const fc_case *c, int t, int64_t *numel, int64_t *span) {
    int64_t dim[4], stride[4] = {0, 0, 0, 0};
    int n = fc_case_dims(c, t, dim);
    const fc_layout *l = &c->layout[t];
    int64_t e = 1;
    for (int k = 0; k < n; k++)
        if (__builtin_mul_overflow(e, dim[k], &e)) return -1;
    stride[l->order[n - 1]] = 1 + l->pad[l->order[n - 1]];
    for (int k = n - 2; k >= 0; k--) {
        int inner = l->order[k + 1], here = l->order[k];
        if (__builtin_mul_overflow(stride[inner], dim[inner], &stride[here]) ||
            __builtin_add_overflow(stride[here], l->pad[here], &stride[here]))
            return -1;
    }
    if (t == FC_T_MASK) {
        if (c->mask.broadcast_batch) stride[0] = 0;
        if (c->mask.broadcast_heads) stride[1] = 0;
    }
    int64_t last = 0, sp = 0;
    int empty = 0;
    for (int k = 0; k < n; k++) empty |= dim[k] == 0;
    if (!empty) {
        for (int k = 0; k < n; k++) {
            int64_t step;
            if (__builtin_mul_overflow(dim[k] - 1, stride[k], &step) || __builtin_add_overflow(last, step, &last))
                return -1;
        }
        sp = last + 1;
    }
    *numel = e;
    *span = sp;
    return 0;
}

int fc_case_check(const fc_case *c, char *msg, size_t msglen) {
    const fa_problem *p = &c->p;
    const int64_t sizes[7] = {p->batch, p->seqlen_q, p->seqlen_k, p->heads_q,
                              p->heads_kv, p->head_dim_qk, p->head_dim_v};
    static const char *const size_names[7] = {"batch", "seqlen_q", "seqlen_k", "heads_q",
                                              "heads_kv", "head_dim_qk", "head_dim_v"};
    if (c->gen < FC_GEN_V1 || c->gen > FC_GEN_LATEST)
        FAIL("generator = %d: unknown input generator version %d (this build knows 1 to %d)", c->gen, c->gen, FC_GEN_LATEST);
    for (int i = 0; i < 7; i++) {
        if (sizes[i] < 0) FAIL("%s = %lld is negative", size_names[i], (long long)sizes[i]);
        if (sizes[i] > (1 << 24)) FAIL("%s = %lld is larger than 2^24", size_names[i], (long long)sizes[i]);
    }
    /* the contract (kernels/flash_api.h, fa_validate_*): at least one head of each kind and head
       dims >= 1; a case outside it is a bad case, never a backend finding (batch and sequence
       lengths 0 are valid empty problems) */
    if (p->heads_q < 1 || p->heads_kv < 1)
        FAIL("heads_q = %lld, heads_kv = %lld: a problem needs at least 1 query head and 1 key/value head",
             (long long)p->heads_q, (long long)p->heads_kv);
    if (p->head_dim_qk < 1 || p->head_dim_v < 1)
        FAIL("head_dim_qk = %lld, head_dim_v = %lld: head dims must be >= 1", (long long)p->head_dim_qk,
             (long long)p->head_dim_v);
    if (p->heads_q % p->heads_kv != 0)
        FAIL("heads_q = %lld is not a multiple of heads_kv = %lld", (long long)p->heads_q,
             (long long)p->heads_kv);
    if (p->dtype != FA_F16 && p->dtype != FA_BF16) FAIL("dtype %d is neither fp16 nor bf16", (int)p->dtype);
    if (!isfinite(p->softmax_scale)) FAIL("scale is not finite");
    if (p->softmax_scale != 0 && !isnormal(p->softmax_scale))
        FAIL("scale %g is subnormal in fp32 (0 selects the default; give a normal fp32 scale)",
             (double)p->softmax_scale);
    if ((int)p->causal < 0 || p->causal > FA_CAUSAL_BOTTOM_RIGHT) FAIL("causal %d is unknown", (int)p->causal);
    if ((int)p->window_align < 0 || p->window_align > FA_ALIGN_BOTTOM_RIGHT)
        FAIL("window_align %d is unknown", (int)p->window_align);
    if ((int)c->mask.kind < 0 || c->mask.kind >= FC_MASK_COUNT) FAIL("mask kind %d is unknown", (int)c->mask.kind);
    if (!(c->mask.density >= 0.0 && c->mask.density <= 1.0)) FAIL("mask density must be in [0, 1]");
    if (!(c->mask.amp >= 0.0 && c->mask.amp <= 1e30)) FAIL("mask amp must be in [0, 1e30]");
    if (c->mask.width < 0) FAIL("mask width must be >= 0");
    if (c->mask.shift < 0) FAIL("mask shift must be >= 0");
    for (int i = 0; i < FC_N_DIST_INPUTS; i++) {
        const fc_dist *d = &c->dist[i];
        if ((int)d->kind < 0 || d->kind >= FC_DIST_COUNT) FAIL("dist.%s kind %d is unknown", tensor_names[i], (int)d->kind);
        if (!(d->amp >= 0.0 && d->amp <= 1e30)) FAIL("dist.%s amp must be in [0, 1e30]", tensor_names[i]);
        if (!(d->prob >= 0.0 && d->prob <= 1.0)) FAIL("dist.%s prob must be in [0, 1]", tensor_names[i]);
    }
    for (int t = 0; t < FC_T_COUNT; t++) {
        const fc_layout *l = &c->layout[t];
        int n = t == FC_T_LSE ? 3 : 4, seen = 0;
        for (int k = 0; k < n; k++) {
            if (l->order[k] < 0 || l->order[k] >= n || (seen >> l->order[k]) & 1)
                FAIL("layout.%s order is not a permutation of 0..%d", tensor_names[t], n - 1);
            seen |= 1 << l->order[k];
        }
        for (int k = 0; k < n; k++)
            if (l->pad[k] < 0 || l->pad[k] > 4096) FAIL("layout.%s pad[%d] must be in [0, 4096]", tensor_names[t], k);
        if (l->offset < 0 || l->offset > 1 << 20) FAIL("layout.%s offset must be in [0, 2^20]", tensor_names[t]);
    }
    if (fc_v3_check(c, msg, msglen)) return -1;
    /* every extent with overflow checks BEFORE fc_case_numel/fc_case_span (which assume a
       checked case): a product past 2^63 would wrap and pass a plain size test. Overflow of
       any tensor is reported first (it names the real problem: the shape) */
    int64_t numel[FC_T_COUNT], span[FC_T_COUNT];
    for (int t = 0; t < FC_T_COUNT; t++)
        if (checked_extents(c, t, &numel[t], &span[t]))
            FAIL("tensor %s: its size or stride overflows 64 bits (shape too large)", tensor_names[t]);
    /* 64-bit element counts and offsets throughout (tensors past 2^31 elements are cases like any
       other); the limit only keeps every index sum of a checked case far from 2^63 */
    for (int t = 0; t < FC_T_COUNT; t++) {
        if (numel[t] > FC_CASE_MAX_ELEMS)
            FAIL("tensor %s has %lld elements, more than 2^40", tensor_names[t], (long long)numel[t]);
        if (span[t] > FC_CASE_MAX_ELEMS)
            FAIL("tensor %s spans %lld elements, more than 2^40", tensor_names[t], (long long)span[t]);
    }
    return 0;
}
#undef FAIL

/* ---------------------------------------------------------------------------
 * Shapes and layouts
 * ------------------------------------------------------------------------- */
int fc_case_dims(const fc_case *c, int t, int64_t dim[4]) {
    const fa_problem *p = &c->p;
    int64_t B = p->batch, Sq = p->seqlen_q, Sk = p->seqlen_k, Hq = p->heads_q, Hkv = p->heads_kv;
    int64_t Dqk = p->head_dim_qk, Dv = p->head_dim_v;
    int64_t d4[4] = {0, 0, 0, 0};
    int n = fc_v3_dims(c, t, dim); /* packed / paged tensors */
    if (n) return n;
    n = 4;
    switch (t) {
    case FC_T_Q: case FC_T_DQ: d4[0] = B; d4[1] = Sq; d4[2] = Hq; d4[3] = Dqk; break;
    case FC_T_K: case FC_T_DK: d4[0] = B; d4[1] = Sk; d4[2] = Hkv; d4[3] = Dqk; break;
    case FC_T_V: case FC_T_DV: d4[0] = B; d4[1] = Sk; d4[2] = Hkv; d4[3] = Dv; break;
    case FC_T_O: case FC_T_DO: d4[0] = B; d4[1] = Sq; d4[2] = Hq; d4[3] = Dv; break;
    case FC_T_MASK: d4[0] = B; d4[1] = Hq; d4[2] = Sq; d4[3] = Sk; break;
    case FC_T_LSE: d4[0] = B; d4[1] = Hq; d4[2] = Sq; d4[3] = 1; n = 3; break;
    default: n = 0;
    }
    memcpy(dim, d4, sizeof d4);
    return n;
}

int64_t fc_case_numel(const fc_case *c, int t) {
    int64_t dim[4];
    int n = fc_case_dims(c, t, dim);
    int64_t e = 1;
    for (int k = 0; k < n; k++) e *= dim[k];
    return e;
}

int fc_case_is_fp32(int t) { return t == FC_T_MASK || t == FC_T_LSE; }

size_t fc_case_elem_size(const fc_case *c, int t) {
    (void)c;
    return fc_case_is_fp32(t) ? 4 : 2;
}

void fc_case_strides(const fc_case *c, int t, int64_t stride[4]) {
    int64_t dim[4];
    int n = fc_case_dims(c, t, dim);
    const fc_layout *l = &c->layout[t];
    for (int k = 0; k < 4; k++) stride[k] = 0;
    int64_t step = 1 + l->pad[l->order[n - 1]];
    stride[l->order[n - 1]] = step;
    for (int k = n - 2; k >= 0; k--) {
        int inner = l->order[k + 1], here = l->order[k];
        stride[here] = stride[inner] * dim[inner] + l->pad[here];
    }
    if (t == FC_T_MASK) {
        if (c->mask.broadcast_batch) stride[0] = 0;
        if (c->mask.broadcast_heads) stride[1] = 0;
    }
}

int64_t fc_case_span(const fc_case *c, int t) {
    int64_t dim[4], stride[4];
    int n = fc_case_dims(c, t, dim);
    fc_case_strides(c, t, stride);
    int64_t last = 0;
    for (int k = 0; k < n; k++) {
        if (dim[k] == 0) return 0;
        last += (dim[k] - 1) * stride[k];
    }
    return last + 1;
}

/* ---------------------------------------------------------------------------
 * Scalars: fp16 / bf16 rounding (round to nearest, ties to even)
 * ------------------------------------------------------------------------- */
/* Round x to a float format with p significand bits (including the implicit
 * one), minimum normal exponent emin (x = m * 2^e, 1 <= m < 2) and largest finite
 * value maxv. Exact: uses frexp/ldexp and nearbyint in the default mode. */
static double round_format(double x, int p, int emin, double maxv) {
    if (isnan(x) || isinf(x) || x == 0.0) return x;
    int e;
    frexp(x, &e); /* x = f * 2^e, 0.5 <= |f| < 1: unit exponent e-1 */
    int ue = e - 1;
    if (ue < emin) ue = emin; /* subnormal: fixed quantum */
    double q = ldexp(1.0, ue - (p - 1));
    double r = nearbyint(x / q) * q; /* x / q exact (power of two scaling) */
    if (fabs(r) > maxv) return copysign(INFINITY, x);
    return r;
}

double fc_round_to(fa_dtype d, double x) {
    if (d == FA_BF16) return round_format(x, 8, -126, 0x1.FEp127);
    return round_format(x, 11, -14, 65504.0);
}

/* Encoders: round-to-nearest-even straight from the bits of the double (exact
 * integer arithmetic; no dependence on the FPU rounding mode except for the
 * subnormal range, rounded by nearbyint in the default mode as round_format
 * does). They give the same result as round_format followed by an exact
 * re-encoding (case_test.c checks it on every fp16/bf16 value, every midpoint
 * and its neighbours, and random doubles). */
static inline __attribute__((always_inline)) uint16_t encode_rne(double x, int mant_bits, int emin, int emax) {
    uint64_t u;
    memcpy(&u, &x, 8);
    uint16_t sign = (uint16_t)((u >> 48) & 0x8000);
    uint64_t mag = u & 0x7FFFFFFFFFFFFFFFull;
    int ebias = emax;                                  /* 15 (fp16) or 127 (bf16) */
    uint16_t inf = (uint16_t)(((2 * ebias + 1) << mant_bits));
    if (mag >= 0x7FF0000000000000ull) return sign | inf; /* +-inf (NaN handled by callers) */
    int e = (int)(mag >> 52) - 1023;                    /* unbiased exponent (subnormal doubles: -1023) */
    if (e < emin) {
        /* subnormal of the target: an integer number of quanta 2^(emin - mant_bits), exact scaling */
        double a;
        memcpy(&a, &mag, 8);
        double q = nearbyint(ldexp(a, mant_bits - emin)); /* 0 .. 2^mant_bits (the latter: min normal) */
        return sign | (uint16_t)q;
    }
    if (e > emax) return sign | inf;
    int shift = 52 - mant_bits;
    uint64_t m = mag & 0x000FFFFFFFFFFFFFull;
    uint64_t q = m >> shift, rem = m & (((uint64_t)1 << shift) - 1), half = (uint64_t)1 << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    /* a carry out of the mantissa moves into the exponent; past emax it becomes inf's encoding */
    uint32_t enc = ((uint32_t)(e + ebias) << mant_bits) + (uint32_t)q;
    return sign | (uint16_t)enc;
}

uint16_t fc_f16_from_double(double x) {
    if (isnan(x)) return 0x7E00;
    return encode_rne(x, 10, -14, 15);
}

double fc_f16_to_double(uint16_t h) { return fc_half_to_double(h, 0); }

uint16_t fc_bf16_from_double(double x) {
    if (isnan(x)) return 0x7FC0;
    return encode_rne(x, 7, -126, 127);
}

/* The 16-bit encodings (NaN: the canonical quiet NaN), inlined into the generator's loops. */
static inline __attribute__((always_inline)) uint16_t enc16(double x, int bf) {
    if (isnan(x)) return bf ? 0x7FC0 : 0x7E00;
    return bf ? encode_rne(x, 7, -126, 127) : encode_rne(x, 10, -14, 15);
}

double fc_bf16_to_double(uint16_t h) { return fc_half_to_double(h, 1); }

/* ---------------------------------------------------------------------------
 * Counter-based RNG
 * ------------------------------------------------------------------------- */
static uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t fc_rng_hash(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
    uint64_t h = splitmix64(seed);
    h = splitmix64(h ^ a);
    h = splitmix64(h ^ b);
    return splitmix64(h ^ c);
}

double fc_rng_u01(uint64_t h) { return (double)(h >> 11) * 0x1.0p-53; }

/* ---------------------------------------------------------------------------
 * Value generation
 *
 * fc_rng_hash(seed, t, lin, k) = S(S(S(S(seed) ^ t) ^ lin) ^ k) with S the
 * splitmix64 finalizer, so the hashes of one element share the prefix
 * P = S(S(S(seed) ^ t) ^ lin) and the per-tensor part S(S(seed) ^ t): each
 * extra hash of an element is one S call. gen_ctx holds the per-tensor part;
 * elem_prefix / elem_hash give bit-identical results to fc_rng_hash.
 * ------------------------------------------------------------------------- */
typedef struct {
    uint64_t tensor_prefix;   /* S(S(seed) ^ (t + 1)) */
    fc_dist_kind kind;
    double amp, prob;         /* the distribution's parameters, defaults applied */
    uint64_t prob53;          /* v2: floor(prob 2^53), u < prob as (h >> 11) < prob53 */
    int bf;                   /* bf16 storage */
    int gen;                  /* input generator version (fc_case.gen) */
} gen_ctx;

static inline uint64_t elem_prefix(const gen_ctx *g, uint64_t lin) { return splitmix64(g->tensor_prefix ^ lin); }
static inline uint64_t elem_hash(uint64_t prefix, uint64_t k) { return splitmix64(prefix ^ k); }

static void gen_ctx_init(const fc_case *c, int t, gen_ctx *g) {
    memset(g, 0, sizeof *g);
    g->tensor_prefix = splitmix64(splitmix64(c->seed) ^ ((uint64_t)t + 1));
    g->bf = c->p.dtype == FA_BF16;
    g->gen = c->gen;
    if (t >= 0 && t < FC_N_DIST_INPUTS) {
        const fc_dist *d = &c->dist[t];
        g->kind = d->kind;
        switch (d->kind) {
        case FC_DIST_LARGE: g->amp = d->amp > 0 ? d->amp : (g->bf ? 0x1p44 : 16000.0); break;
        case FC_DIST_SPARSE_INT: g->prob = d->prob > 0 ? d->prob : 0.8; break;
        case FC_DIST_HEAVY_TAIL: g->amp = d->amp > 0 ? d->amp : 1000.0; break;
        case FC_DIST_SPIKES:
            g->amp = d->amp > 0 ? d->amp : 100.0;
            g->prob = d->prob > 0 ? d->prob : 0.01;
            break;
        case FC_DIST_GAUSSIAN: g->amp = d->amp > 0 ? d->amp : 1.0; break;
        default: g->amp = 1.0; break; /* CONST_ROWS, TIES: N(0,1) */
        }
        g->prob53 = (uint64_t)(g->prob * 0x1p53); /* prob in [0, 1]: exact product, truncated */
    }
}

/* Box-Muller from the element's hashes 1 and 2 (u1 in [0,1): log1p(-u1) finite). */
static double gaussian_of(uint64_t prefix) {
    double u1 = fc_rng_u01(elem_hash(prefix, 1));
    double u2 = fc_rng_u01(elem_hash(prefix, 2));
    return sqrt(-2.0 * log1p(-u1)) * cos(6.283185307179586 * u2);
}

/* ---------------------------------------------------------------------------
 * Input generator version 2 (FC_GEN_V2): integer arithmetic on the element's
 * splitmix64 hash, no libm, so the same bits on any platform (and on a GPU).
 *
 * Normal: an inverse-CDF table of |N(0,1)| (case_gen2_table.h, from
 * case/tools/gen2_normal_table.py) in 2^-48 fixed point. Hash bit 63 is the sign,
 * bits 62..51 pick one of 4096 equiprobable bins, bits 50..35 the position inside it
 * (linear interpolation between the bin's quantiles). The last bin (the tail beyond
 * |Z| = 3.67, probability 2^-12) continues in tail levels of 256 equiprobable bins
 * each (7 levels, down to probability 2^-68; cap 9.52), each level from a fresh hash
 * S(h ^ level). The value is sign * X 2^-48 with X < 2^52: exact in double. Error of
 * the distribution: within each bin the density is uniform (piecewise-linear inverse
 * CDF); bin probabilities and the tail to 2^-68 are exact to the table's rounding.
 * Why not Box-Muller or a ziggurat: both need log/exp (libm results differ between
 * platforms); a sum of uniforms has no tail past its bound.
 * ------------------------------------------------------------------------- */
static inline uint64_t gen2_interp(const uint64_t *q, uint64_t k, uint64_t hi, uint64_t frac16) {
    /* q[k] + (hi - q[k]) frac16 / 2^16: (hi - q[k]) < 2^46 (table), no overflow */
    return q[k] + (((hi - q[k]) * frac16) >> 16);
}

static inline double gen2_normal(uint64_t h) {
    uint64_t k = (h >> 51) & 4095u, x;
    if (k < 4095u) {
        x = gen2_interp(fc_gen2_q0, k, fc_gen2_q0[k + 1], (h >> 35) & 0xFFFFu);
    } else {
        x = FC_GEN2_QCAP;
        for (int l = 0; l < 7; l++) {
            uint64_t t = splitmix64(h ^ (uint64_t)(l + 1));
            uint64_t j = t >> 56;
            if (j < 255u) { x = gen2_interp(fc_gen2_qt[l], j, fc_gen2_qt[l][j + 1], (t >> 40) & 0xFFFFu); break; }
            if (l == 6) x = gen2_interp(fc_gen2_qt[l], 255u, FC_GEN2_QCAP, (t >> 40) & 0xFFFFu);
        }
    }
    double v = (double)(int64_t)x * 0x1p-48; /* x < 2^52: exact */
    return (h >> 63) ? -v : v;
}

double fc_gen2_normal(uint64_t h) { return gen2_normal(h); }

/* v2 value before rounding to the storage type. h = S(P ^ lin) (the v1 prefix), h2 = S(h ^
 * 0x5EC0) a second hash where a distribution needs two independent draws. Each case gives
 * the same distribution as v1 (case.h):
 *   GAUSSIAN, CONST_ROWS, TIES  amp N (one rounding of the product)
 *   LARGE       amp clamp(N, -2, 2)
 *   TINY        exponent lo + floor(hi32 (hi - lo + 1) / 2^32), mantissa 1 + bits 31..1 2^-31,
 *               sign bit 0: exact (a power of two built from its bits)
 *   SPARSE_INT  zero when (h >> 11) < floor(prob 2^53), else floor(lo32 5 / 2^32) - 2
 *   HEAVY_TAIL  Cauchy as N1 / N2 (the ratio of two independent normals is standard
 *               Cauchy; one IEEE division), clamped to +-amp (N2 = 0: sign(N1) amp)
 *   SPIKES      N times amp when (h2 >> 11) < floor(prob 2^53), else N */
static inline double dist_raw_v2(const gen_ctx *g, uint64_t lin) {
    uint64_t h = elem_prefix(g, lin);
    switch (g->kind) {
    case FC_DIST_LARGE: {
        double z = gen2_normal(h);
        return g->amp * (z > 2.0 ? 2.0 : z < -2.0 ? -2.0 : z);
    }
    case FC_DIST_TINY: {
        int lo = g->bf ? -133 : -24, hi = g->bf ? -122 : -10;
        int ex = lo + (int)(((h >> 32) * (uint64_t)(hi - lo + 1)) >> 32);
        uint64_t pb = (uint64_t)(1023 + ex) << 52;
        double p2;
        memcpy(&p2, &pb, sizeof p2);
        double m = 1.0 + (double)((h & 0xFFFFFFFFu) >> 1) * 0x1p-31;
        return (h & 1u) ? -m * p2 : m * p2;
    }
    case FC_DIST_SPARSE_INT:
        return (h >> 11) < g->prob53 ? 0.0 : (double)((int64_t)(((h & 0xFFFFFFFFu) * 5u) >> 32) - 2);
    case FC_DIST_HEAVY_TAIL: {
        double a = gen2_normal(h), b = gen2_normal(splitmix64(h ^ 0x5EC0u));
        if (b == 0.0) return (h >> 63) ? -g->amp : g->amp;
        double x = a / b;
        return x > g->amp ? g->amp : x < -g->amp ? -g->amp : x;
    }
    case FC_DIST_SPIKES: {
        uint64_t h2 = splitmix64(h ^ 0x5EC0u);
        double z = gen2_normal(h);
        return (h2 >> 11) < g->prob53 ? z * g->amp : z;
    }
    case FC_DIST_GAUSSIAN:
    case FC_DIST_CONST_ROWS:
    case FC_DIST_TIES:
    default: return g->amp * gen2_normal(h);
    }
}

/* The unrounded value of a distribution input at linear counter lin
 * (lin from the logical index with the distribution's sequence rule applied),
 * by the case's generator version. */
static double dist_raw_v1(const gen_ctx *g, uint64_t lin);
static inline double dist_raw(const gen_ctx *g, uint64_t lin) {
    return g->gen == FC_GEN_V2 ? dist_raw_v2(g, lin) : dist_raw_v1(g, lin);
}

/* Version 1 (FC_GEN_V1): Box-Muller through glibc's log1p and cos; its values are
 * defined by this code and glibc (repro files of v1 replay these bytes). */
static double dist_raw_v1(const gen_ctx *g, uint64_t lin) {
    uint64_t pre = elem_prefix(g, lin);
    switch (g->kind) {
    case FC_DIST_LARGE: return g->amp * fmax(-2.0, fmin(2.0, gaussian_of(pre)));
    case FC_DIST_TINY: {
        int lo = g->bf ? -133 : -24, hi = g->bf ? -122 : -10;
        double u = fc_rng_u01(elem_hash(pre, 1));
        double m = fc_rng_u01(elem_hash(pre, 2));
        int ex = lo + (int)(u * (hi - lo + 1));
        double sign = (elem_hash(pre, 3) & 1) ? -1.0 : 1.0;
        return sign * ldexp(1.0 + m, ex);
    }
    case FC_DIST_SPARSE_INT: {
        double u = fc_rng_u01(elem_hash(pre, 1));
        double v = fc_rng_u01(elem_hash(pre, 2));
        return u < g->prob ? 0.0 : floor(v * 5.0) - 2.0;
    }
    case FC_DIST_HEAVY_TAIL: {
        double u = fc_rng_u01(elem_hash(pre, 1));
        double x = tan(3.141592653589793 * (u - 0.5));
        return fmax(-g->amp, fmin(g->amp, x));
    }
    case FC_DIST_SPIKES: {
        double u = fc_rng_u01(elem_hash(pre, 3));
        return gaussian_of(pre) * (u < g->prob ? g->amp : 1.0);
    }
    case FC_DIST_GAUSSIAN:
    case FC_DIST_CONST_ROWS:
    case FC_DIST_TIES:
    default: return g->amp * gaussian_of(pre);
    }
}

/* Sequence index the distribution draws from (CONST_ROWS: 0, TIES: pairs). */
static inline int64_t dist_seq(fc_dist_kind k, int64_t s) {
    if (k == FC_DIST_CONST_ROWS) return 0;
    if (k == FC_DIST_TIES) return s & ~(int64_t)1;
    return s;
}

static double dist_value(const fc_case *c, int t, const int64_t idx[4]) {
    int64_t dim[4];
    fc_case_dims(c, t, dim);
    gen_ctx g;
    gen_ctx_init(c, t, &g);
    int64_t s = dist_seq(g.kind, idx[1]);
    uint64_t lin = (uint64_t)(((idx[0] * dim[1] + s) * dim[2] + idx[2]) * dim[3] + idx[3]);
    return fc_round_to(c->p.dtype, dist_raw(&g, lin));
}

/* Mask value at (b, h, i, j), b and h already forced to 0 where broadcast. */
static inline __attribute__((always_inline)) double mask_raw_k(fc_mask_kind kind, const fc_mask_spec *m,
                                                               const fa_problem *p, const gen_ctx *g, int64_t b,
                                                               int64_t h, int64_t i, int64_t j) {
    double density = m->density > 0 ? m->density : 0.3;
    switch (kind) {
    case FC_MASK_RANDOM_NEGINF: {
        uint64_t lin = (uint64_t)(((b * p->heads_q + h) * p->seqlen_q + i) * p->seqlen_k + j);
        return fc_rng_u01(elem_hash(elem_prefix(g, lin), 1)) < density ? -INFINITY : 0.0;
    }
    case FC_MASK_STRIPES: {
        int64_t w = m->width > 0 ? m->width : 4;
        return ((j + i * m->shift) / w) % 2 == 1 ? -INFINITY : 0.0;
    }
    case FC_MASK_FULL_ROWS: {
        uint64_t lin = (uint64_t)((b * p->heads_q + h) * p->seqlen_q + i);
        int masked = i == 0 || fc_rng_u01(elem_hash(elem_prefix(g, lin), 2)) < density;
        return masked ? -INFINITY : 0.0;
    }
    case FC_MASK_FULL_COLS: {
        uint64_t lin = (uint64_t)((b * p->heads_q + h) * p->seqlen_k + j);
        int masked = j == 0 || fc_rng_u01(elem_hash(elem_prefix(g, lin), 3)) < density;
        return masked ? -INFINITY : 0.0;
    }
    case FC_MASK_RANDOM_FINITE: {
        double amp = m->amp > 0 ? m->amp : 4.0;
        uint64_t lin = (uint64_t)(((b * p->heads_q + h) * p->seqlen_q + i) * p->seqlen_k + j);
        double u = fc_rng_u01(elem_hash(elem_prefix(g, lin), 4));
        return (double)(float)((2.0 * u - 1.0) * amp);
    }
    case FC_MASK_RANDOM_MIXED: {
        /* -inf with probability density (default 0.1), else a finite value uniform in
           [-amp, amp] (default 3) rounded to fp32; width w >= 1: rows i % w == w / 2 all -inf */
        double dm = m->density > 0 ? m->density : 0.1, amp = m->amp > 0 ? m->amp : 3.0;
        if (m->width >= 1 && i % m->width == m->width / 2) return -INFINITY;
        uint64_t lin = (uint64_t)(((b * p->heads_q + h) * p->seqlen_q + i) * p->seqlen_k + j);
        uint64_t e = elem_prefix(g, lin);
        if (fc_rng_u01(elem_hash(e, 5)) < dm) return -INFINITY;
        return (double)(float)((2.0 * fc_rng_u01(elem_hash(e, 6)) - 1.0) * amp);
    }
    case FC_MASK_KEY_PADDING: {
        /* the last 1 + floor(d Sk) keys (odd b) or 1 + floor(d Sk / 2) (even b), d default 0.25 */
        double dp = m->density > 0 ? m->density : 0.25;
        int64_t pad = 1 + (int64_t)floor(dp * (double)p->seqlen_k * (b % 2 ? 1.0 : 0.5));
        return j >= p->seqlen_k - pad ? -INFINITY : 0.0;
    }
    case FC_MASK_NONE:
    default:
        return 0.0;
    }
}

static double mask_raw(const fc_mask_spec *m, const fa_problem *p, const gen_ctx *g, int64_t b, int64_t h, int64_t i,
                       int64_t j) {
    return mask_raw_k(m->kind, m, p, g, b, h, i, j);
}

static double mask_value(const fc_case *c, const int64_t idx[4]) {
    const fc_mask_spec *m = &c->mask;
    gen_ctx g;
    gen_ctx_init(c, FC_T_MASK, &g);
    int64_t b = m->broadcast_batch ? 0 : idx[0], h = m->broadcast_heads ? 0 : idx[1];
    return mask_raw(m, &c->p, &g, b, h, idx[2], idx[3]);
}

double fc_case_value(const fc_case *c, int t, const int64_t idx[4]) {
    if (t == FC_T_MASK) return mask_value(c, idx);
    if (t >= 0 && t < FC_N_DIST_INPUTS) return dist_value(c, t, idx);
    return NAN;
}

void fc_case_value_row(const fc_case *c, int t, const int64_t idx[4], int64_t n, double *out) {
    gen_ctx g;
    gen_ctx_init(c, t, &g);
    if (t == FC_T_MASK) {
        const fc_mask_spec *m = &c->mask;
        int64_t b = m->broadcast_batch ? 0 : idx[0], h = m->broadcast_heads ? 0 : idx[1];
        for (int64_t k = 0; k < n; k++) out[k] = mask_raw(m, &c->p, &g, b, h, idx[2], idx[3] + k);
    } else if (t >= 0 && t < FC_N_DIST_INPUTS) {
        int64_t dim[4];
        fc_case_dims(c, t, dim);
        int64_t s = dist_seq(g.kind, idx[1]);
        uint64_t lin = (uint64_t)(((idx[0] * dim[1] + s) * dim[2] + idx[2]) * dim[3] + idx[3]);
        /* fc_round_to's value through the encoder (equal for every non-NaN double: case_test) */
        for (int64_t k = 0; k < n; k++) {
            double x = dist_raw(&g, lin + (uint64_t)k);
            out[k] = isnan(x) ? x : g.bf ? fc_bf16_to_double(enc16(x, 1)) : fc_f16_to_double(enc16(x, 0));
        }
    } else {
        for (int64_t k = 0; k < n; k++) out[k] = NAN;
    }
}

/* ---------------------------------------------------------------------------
 * Host buffers
 * ------------------------------------------------------------------------- */
int64_t fc_buf_index(const fc_buf *b, const int64_t idx[4]) {
    int64_t e = b->guard + b->offset;
    for (int k = 0; k < b->ndim; k++) e += idx[k] * b->stride[k];
    return e;
}

void *fc_buf_view(const fc_buf *b) {
    return (char *)b->alloc + (size_t)(b->guard + b->offset) * b->elem_size;
}

uint16_t fc_poison16(int poison) { return poison == FC_POISON_B ? FC_POISON_B_16 : FC_POISON_A_16; }
uint32_t fc_poison32(int poison) { return poison == FC_POISON_B ? FC_POISON_B_32 : FC_POISON_A_32; }

int fc_buf_alloc(const fc_case *c, int t, int64_t guard, int poison, fc_buf *b,
                 char *msg, size_t msglen) {
    memset(b, 0, sizeof *b);
    if (t < 0 || t >= FC_T_COUNT || guard < 0) {
        if (msg && msglen) snprintf(msg, msglen, "fc_buf_alloc: bad tensor %d or guard %lld", t, (long long)guard);
        return -1;
    }
    b->tensor = t;
    b->ndim = fc_case_dims(c, t, b->dim);
    fc_case_strides(c, t, b->stride);
    b->elem_size = fc_case_elem_size(c, t);
    b->dtype_bf16 = c->p.dtype == FA_BF16;
    b->guard = guard;
    b->offset = c->layout[t].offset;
    b->span = fc_case_span(c, t);
    b->alloc_elems = 2 * guard + b->offset + b->span;
    int64_t n = b->alloc_elems > 0 ? b->alloc_elems : 1;
    size_t bytes = (size_t)n * b->elem_size;
    if (n > FC_CASE_MAX_ELEMS + 2 * guard + (1 << 20)) {
        if (msg && msglen) snprintf(msg, msglen, "tensor %s needs %lld elements (> 2^40)", fc_tensor_name(t), (long long)n);
        return -1;
    }
    bytes = (bytes + 63) & ~(size_t)63;
    b->alloc = aligned_alloc(64, bytes);
    if (!b->alloc) {
        if (msg && msglen) snprintf(msg, msglen, "out of memory allocating %zu bytes for %s", bytes, fc_tensor_name(t));
        return -1;
    }
    if (b->elem_size == 2) {
        uint16_t *p = b->alloc, v = fc_poison16(poison);
#pragma omp parallel for schedule(static) if (n > FC_PAR_ELEMS)
        for (int64_t i = 0; i < n; i++) p[i] = v;
    } else {
        uint32_t *p = b->alloc, v = fc_poison32(poison);
#pragma omp parallel for schedule(static) if (n > FC_PAR_ELEMS)
        for (int64_t i = 0; i < n; i++) p[i] = v;
    }
    return 0;
}

void fc_buf_free(fc_buf *b) {
    free(b->alloc);
    b->alloc = NULL;
}

double fc_buf_get(const fc_buf *b, const int64_t idx[4]) {
    int64_t e = fc_buf_index(b, idx);
    if (b->elem_size == 4) {
        float f;
        memcpy(&f, (const char *)b->alloc + (size_t)e * 4, 4);
        return (double)f;
    }
    uint16_t h;
    memcpy(&h, (const char *)b->alloc + (size_t)e * 2, 2);
    return b->dtype_bf16 ? fc_bf16_to_double(h) : fc_f16_to_double(h);
}

void fc_buf_set(fc_buf *b, const int64_t idx[4], double x) {
    int64_t e = fc_buf_index(b, idx);
    if (b->elem_size == 4) {
        float f = (float)x;
        memcpy((char *)b->alloc + (size_t)e * 4, &f, 4);
        return;
    }
    uint16_t h = b->dtype_bf16 ? fc_bf16_from_double(x) : fc_f16_from_double(x);
    memcpy((char *)b->alloc + (size_t)e * 2, &h, 2);
}

/* Generic fill: element by element through fc_case_value (any tensor). */
static void fill_generic(const fc_case *c, fc_buf *b) {
    int64_t idx[4] = {0, 0, 0, 0}, total = 1;
    for (int k = 0; k < b->ndim; k++) total *= b->dim[k];
    for (int64_t n = 0; n < total; n++) {
        int64_t r = n;
        for (int k = b->ndim - 1; k >= 0; k--) {
            idx[k] = r % b->dim[k];
            r /= b->dim[k];
        }
        fc_buf_set(b, idx, fc_case_value(c, b->tensor, idx));
    }
}

/* Q, K, V, dO: nested loops over [B, S, H, D] with running storage offsets;
 * the same values as fc_case_value (dist_raw at the same counter, encoded by
 * the same rounding). */
/* n values of a distribution input, counters lin .. lin + n - 1, at element steps st3: the
 * values of dist_raw + fc_f16_from_double / fc_bf16_from_double, with the generator version,
 * the storage type and (v2) the common normal distributions decided once per row instead of
 * per element (case_test's digests hold the bytes). */
#define FILL_ROW_LOOP(BF, EXPR)                                        \
    for (int64_t i3 = 0; i3 < n; i3++) {                               \
        const uint64_t h = elem_prefix(g, lin + (uint64_t)i3);         \
        (void)h;                                                       \
        row[i3 * st3] = enc16((EXPR), BF);                             \
    }
static void fill_row(const gen_ctx *g, uint64_t lin, uint16_t *row, int64_t n, int64_t st3) {
    const int normal = g->kind == FC_DIST_GAUSSIAN || g->kind == FC_DIST_CONST_ROWS || g->kind == FC_DIST_TIES;
    if (g->gen == FC_GEN_V2 && normal) {
        /* dist_raw_v2's default branch: amp N */
        if (g->bf) FILL_ROW_LOOP(1, g->amp * gen2_normal(h))
        else FILL_ROW_LOOP(0, g->amp * gen2_normal(h))
    } else if (g->gen == FC_GEN_V2) {
        if (g->bf) FILL_ROW_LOOP(1, dist_raw_v2(g, lin + (uint64_t)i3))
        else FILL_ROW_LOOP(0, dist_raw_v2(g, lin + (uint64_t)i3))
    } else {
        for (int64_t i3 = 0; i3 < n; i3++) row[i3 * st3] = enc16(dist_raw(g, lin + (uint64_t)i3), g->bf);
    }
}
#undef FILL_ROW_LOOP

static void fill_dist(const fc_case *c, fc_buf *b) {
    gen_ctx g;
    gen_ctx_init(c, b->tensor, &g);
    const int64_t *dim = b->dim, *st = b->stride;
    uint16_t *base = (uint16_t *)b->alloc + b->guard + b->offset;
    /* rows in parallel for large tensors (every value is a pure function of its index, so the
       result does not depend on the thread count); CONST_ROWS / TIES copy from an earlier row,
       so they stay sequential */
    const int par = dim[0] * dim[1] * dim[2] * dim[3] > FC_PAR_ELEMS && g.kind != FC_DIST_CONST_ROWS &&
                    g.kind != FC_DIST_TIES;
#pragma omp parallel for collapse(2) schedule(static) if (par)
    for (int64_t i0 = 0; i0 < dim[0]; i0++)
        for (int64_t i1 = 0; i1 < dim[1]; i1++) {
            int64_t s = dist_seq(g.kind, i1);
            for (int64_t i2 = 0; i2 < dim[2]; i2++) {
                uint64_t lin = (uint64_t)(((i0 * dim[1] + s) * dim[2] + i2) * dim[3]);
                uint16_t *row = base + i0 * st[0] + i1 * st[1] + i2 * st[2];
                if (s != i1) {
                    /* CONST_ROWS / TIES: the row equals row s (< i1), already written */
                    const uint16_t *src = base + i0 * st[0] + s * st[1] + i2 * st[2];
                    for (int64_t i3 = 0; i3 < dim[3]; i3++) row[i3 * st[3]] = src[i3 * st[3]];
                    continue;
                }
                fill_row(&g, lin, row, dim[3], st[3]);
            }
        }
}

/* Mask [B, Hq, Sq, Sk] (fp32). A broadcast dim has stride 0 and a value that
 * ignores its index: it is written once. */
static void fill_mask(const fc_case *c, fc_buf *b) {
    gen_ctx g;
    gen_ctx_init(c, FC_T_MASK, &g);
    const fc_mask_spec *m = &c->mask;
    const int64_t *dim = b->dim, *st = b->stride;
    int64_t nb = m->broadcast_batch ? (dim[0] > 0 ? 1 : 0) : dim[0];
    int64_t nh = m->broadcast_heads ? (dim[1] > 0 ? 1 : 0) : dim[1];
    float *base = (float *)b->alloc + b->guard + b->offset;
    /* mask_raw's values, its kind decided once per tensor (the switch folded out of the loop) */
#define FILL_MASK(KIND)                                                                      \
    for (int64_t i0 = 0; i0 < nb; i0++)                                                      \
        for (int64_t i1 = 0; i1 < nh; i1++)                                                  \
            for (int64_t i2 = 0; i2 < dim[2]; i2++) {                                        \
                float *row = base + i0 * st[0] + i1 * st[1] + i2 * st[2];                    \
                for (int64_t i3 = 0; i3 < dim[3]; i3++)                                      \
                    row[i3 * st[3]] = (float)mask_raw_k(KIND, m, &c->p, &g, i0, i1, i2, i3); \
            }
    switch (m->kind) {
    case FC_MASK_RANDOM_NEGINF: FILL_MASK(FC_MASK_RANDOM_NEGINF) break;
    case FC_MASK_STRIPES: FILL_MASK(FC_MASK_STRIPES) break;
    case FC_MASK_FULL_ROWS: FILL_MASK(FC_MASK_FULL_ROWS) break;
    case FC_MASK_FULL_COLS: FILL_MASK(FC_MASK_FULL_COLS) break;
    case FC_MASK_RANDOM_FINITE: FILL_MASK(FC_MASK_RANDOM_FINITE) break;
    case FC_MASK_RANDOM_MIXED: FILL_MASK(FC_MASK_RANDOM_MIXED) break;
    default: FILL_MASK(m->kind) break;
    }
#undef FILL_MASK
}

void fc_case_fill(const fc_case *c, fc_buf *b) {
    if (!b->alloc) return;
    if (b->tensor >= 0 && b->tensor < FC_N_DIST_INPUTS && b->elem_size == 2 && b->ndim == 4) fill_dist(c, b);
    else if (b->tensor == FC_T_MASK && b->elem_size == 4 && b->ndim == 4) fill_mask(c, b);
    else fill_generic(c, b);
}
