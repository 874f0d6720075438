/* validate_test.c: every class of invalid argument, fed to fa_validate_fwd /
 * fa_validate_bwd AND to the CPU backend's forward / backward. Each rejection
 * must carry the expected status and argument name, a message, and leave every
 * buffer (inputs and outputs) byte-for-byte as it was. Valid corner cases
 * (fused inputs, broadcast strides, empty tensors) must be accepted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "kernels/cpu/cpu_mutants.h"
#include "tests/api/api_test_util.h"

// ----------------------------------------------------------------------------
// snapshots of every buffer of a case

typedef struct {
    void *ptr;
    size_t bytes;
    void *copy;
} snap_buf;

typedef struct {
    snap_buf b[16];
    int n;
} snapshot;

// ----------------------------------------------------------------------------
// contract-v3 arrays of the cases below (reset by every v3_* setter)

static int32_t v3_cu_q[3], v3_cu_k[3], v3_used[2], v3_table[2 * 7];

/* page_size 1: 7 pages per sequence in a stride-7 table over an 8-page pool, shuffled, shared */
static int v3_table_p1(void) {
    for (int i = 0; i < 14; i++) v3_table[i] = (i * 5 + 3) % 8;
    return 0;
}
static float v3_sinks[8], v3_dsinks[8];

static void snap_add(snapshot *s, void *ptr, size_t bytes) {
    s->b[s->n].ptr = ptr;
    s->b[s->n].bytes = bytes;
    s->b[s->n].copy = malloc(bytes);
    memcpy(s->b[s->n].copy, ptr, bytes);
    s->n++;
}

static snapshot snap_take(tt_case *c) {
    snapshot s = {.n = 0};
    const fa_problem *p = &c->p;
    tt_tensor *ts[8] = {&c->q, &c->k, &c->v, &c->o, &c->dout, &c->dq, &c->dk, &c->dv};
    for (int i = 0; i < 8; i++) snap_add(&s, ts[i]->buf, ts[i]->n_elems * 2);
    snap_add(&s, c->lse, ((size_t)(p->batch * p->heads_q * p->seqlen_q) + 1) * sizeof(float));
    if (c->mask) snap_add(&s, c->mask, ((size_t)(p->batch * p->heads_q * p->seqlen_q * p->seqlen_k) + 1) * 4);
    snap_add(&s, v3_cu_q, sizeof(v3_cu_q)); snap_add(&s, v3_cu_k, sizeof(v3_cu_k));
    snap_add(&s, v3_used, sizeof(v3_used)); snap_add(&s, v3_table, sizeof(v3_table));
    snap_add(&s, v3_sinks, sizeof(v3_sinks)); snap_add(&s, v3_dsinks, sizeof(v3_dsinks));
    return s;
}

/* 1 when every buffer is unchanged; frees the snapshot. */
static int snap_same(snapshot *s) {
    int same = 1;
    for (int i = 0; i < s->n; i++) {
        same &= memcmp(s->b[i].ptr, s->b[i].copy, s->b[i].bytes) == 0;
        free(s->b[i].copy);
    }
    return same;
}

// ----------------------------------------------------------------------------
// the base (valid) case and the checks

static tt_case base_case(void) {
    fa_problem p = tt_problem(2, 5, 7, 4, 2, 8, 8, FA_F16);
    tt_case c;
    tt_case_init(&c, p, TT_CONTIGUOUS, 77);
    tt_case_mask(&c, 0.1, 3);
    /* fill outputs with a pattern so "untouched" is meaningful */
    for (size_t x = 0; x < c.o.n_elems; x++) c.o.buf[x] = 0xA5A5;
    return c;
}

static int checks_run = 0;

static void expect_status(const char *label, fa_status got, const fa_error *err, fa_status want,
                          const char *want_arg, const char *who) {
    if (got != want)
        fail_msg("%s [%s]: status %s, expected %s (arg '%s', msg '%s')", label, who, fa_status_name(got),
                 fa_status_name(want), err->arg, err->msg);
    if (want == FA_OK) return;
    if (err->status != want) fail_msg("%s [%s]: err.status %d != returned status", label, who, err->status);
    if (strcmp(err->arg, want_arg) != 0)
        fail_msg("%s [%s]: err.arg '%s', expected '%s' (msg '%s')", label, who, err->arg, want_arg, err->msg);
    if (strlen(err->msg) < 20) fail_msg("%s [%s]: message too short: '%s'", label, who, err->msg);
}

static void check_fwd(tt_case *c, const fa_fwd_args *a, const fa_limits *lim, const char *label,
                      fa_status want, const char *want_arg) {
    snapshot s = snap_take(c);
    fa_error err;
    memset(&err, 0, sizeof(err));
    fa_status st = fa_validate_fwd(a, lim ? lim : &fa_backend_cpu()->limits, &err);
    expect_status(label, st, &err, want, want_arg, "fa_validate_fwd");
    if (!snap_same(&s)) fail_msg("%s: fa_validate_fwd wrote to a buffer", label);
    if (lim == NULL) { /* the CPU backend's own limits: run it too */
        s = snap_take(c);
        memset(&err, 0, sizeof(err));
        st = fa_backend_cpu()->forward(a, &err);
        expect_status(label, st, &err, want, want_arg, "cpu forward");
        if (want != FA_OK && !snap_same(&s)) fail_msg("%s: cpu forward wrote to a buffer while rejecting", label);
        if (want == FA_OK) snap_same(&s);
    }
    checks_run++;
}

static void check_bwd(tt_case *c, const fa_bwd_args *a, const fa_limits *lim, const char *label,
                      fa_status want, const char *want_arg) {
    snapshot s = snap_take(c);
    fa_error err;
    memset(&err, 0, sizeof(err));
    fa_status st = fa_validate_bwd(a, lim ? lim : &fa_backend_cpu()->limits, &err);
    expect_status(label, st, &err, want, want_arg, "fa_validate_bwd");
    if (!snap_same(&s)) fail_msg("%s: fa_validate_bwd wrote to a buffer", label);
    if (lim == NULL) {
        s = snap_take(c);
        memset(&err, 0, sizeof(err));
        st = fa_backend_cpu()->backward(a, &err);
        expect_status(label, st, &err, want, want_arg, "cpu backward");
        if (want != FA_OK && !snap_same(&s)) fail_msg("%s: cpu backward wrote to a buffer while rejecting", label);
        if (want == FA_OK) snap_same(&s);
    }
    checks_run++;
}

#define FWD(label, stmt, want, arg)                                   \
    do {                                                              \
        tt_case c = base_case();                                      \
        fa_fwd_args a = tt_fwd_args(&c);                              \
        stmt;                                                         \
        check_fwd(&c, &a, NULL, label, want, arg);                    \
        tt_case_free(&c);                                             \
    } while (0)
#define FWD_LIM(label, stmt, lim, want, arg)                          \
    do {                                                              \
        tt_case c = base_case();                                      \
        fa_fwd_args a = tt_fwd_args(&c);                              \
        stmt;                                                         \
        check_fwd(&c, &a, &lim, label, want, arg);                    \
        tt_case_free(&c);                                             \
    } while (0)
#define BWD(label, stmt, want, arg)                                   \
    do {                                                              \
        tt_case c = base_case();                                      \
        fa_bwd_args a = tt_bwd_args(&c);                              \
        for (size_t x_ = 0; x_ < c.o.n_elems; x_++) c.o.buf[x_] = 0x3c00; \
        for (int64_t x_ = 0; x_ < 40; x_++) c.lse[x_] = 1.0f;         \
        stmt;                                                         \
        check_bwd(&c, &a, NULL, label, want, arg);                    \
        tt_case_free(&c);                                             \
    } while (0)

#define BWD_LIM(label, stmt, lim, want, arg)                          \
    do {                                                              \
        tt_case c = base_case();                                      \
        fa_bwd_args a = tt_bwd_args(&c);                              \
        for (size_t x_ = 0; x_ < c.o.n_elems; x_++) c.o.buf[x_] = 0x3c00; \
        for (int64_t x_ = 0; x_ < 40; x_++) c.lse[x_] = 1.0f;         \
        stmt;                                                         \
        check_bwd(&c, &a, &lim, label, want, arg);                    \
        tt_case_free(&c);                                             \
    } while (0)

#define BIG INT64_MAX

// ----------------------------------------------------------------------------
// forward

static void test_fwd_scalars(void **state) {
    (void)state;
    FWD("base case is valid", (void)0, FA_OK, "");
    FWD("batch < 0", a.p.batch = -1, FA_ERR_INVALID, "batch");
    FWD("seqlen_q < 0", a.p.seqlen_q = -1, FA_ERR_INVALID, "seqlen_q");
    FWD("seqlen_k < 0", a.p.seqlen_k = -3, FA_ERR_INVALID, "seqlen_k");
    FWD("heads_q = 0", a.p.heads_q = 0, FA_ERR_INVALID, "heads_q");
    FWD("heads_q < 0", a.p.heads_q = -4, FA_ERR_INVALID, "heads_q");
    FWD("heads_kv = 0", a.p.heads_kv = 0, FA_ERR_INVALID, "heads_kv");
    FWD("heads_kv < 0", a.p.heads_kv = -2, FA_ERR_INVALID, "heads_kv");
    FWD("Hq % Hkv != 0", a.p.heads_kv = 3, FA_ERR_INVALID, "heads_kv");
    FWD("Hkv > Hq", (a.p.heads_q = 1, a.p.heads_kv = 2), FA_ERR_INVALID, "heads_kv");
    FWD("head_dim_qk = 0", a.p.head_dim_qk = 0, FA_ERR_INVALID, "head_dim_qk");
    FWD("head_dim_qk < 0", a.p.head_dim_qk = -8, FA_ERR_INVALID, "head_dim_qk");
    FWD("head_dim_v = 0", a.p.head_dim_v = 0, FA_ERR_INVALID, "head_dim_v");
    FWD("dtype out of range", a.p.dtype = (fa_dtype)2, FA_ERR_INVALID, "dtype");
    FWD("dtype negative", a.p.dtype = (fa_dtype)-1, FA_ERR_INVALID, "dtype");
    FWD("causal out of range", a.p.causal = (fa_causal)3, FA_ERR_INVALID, "causal");
    FWD("causal negative", a.p.causal = (fa_causal)-1, FA_ERR_INVALID, "causal");
    FWD("window_align out of range", a.p.window_align = (fa_align)2, FA_ERR_INVALID, "window_align");
    FWD("softmax_scale NaN", a.p.softmax_scale = NAN, FA_ERR_INVALID, "softmax_scale");
    FWD("softmax_scale +inf", a.p.softmax_scale = INFINITY, FA_ERR_INVALID, "softmax_scale");
    FWD("softmax_scale -inf", a.p.softmax_scale = -INFINITY, FA_ERR_INVALID, "softmax_scale");
    FWD("head dim above the CPU limit", (a.p.head_dim_qk = 513), FA_ERR_UNSUPPORTED, "head_dim_qk");
    FWD("head_dim_v above the CPU limit", (a.p.head_dim_v = 600), FA_ERR_UNSUPPORTED, "head_dim_v");
    FWD("huge windows are valid", (a.p.window_left = BIG, a.p.window_right = BIG, a.p.causal = FA_CAUSAL_BOTTOM_RIGHT),
        FA_OK, "");
    FWD("negative scale is valid", a.p.softmax_scale = -0.25f, FA_OK, "");
}

static void test_fwd_pointers(void **state) {
    (void)state;
    FWD("q NULL", a.q.ptr = NULL, FA_ERR_INVALID, "q.ptr");
    FWD("k NULL", a.k.ptr = NULL, FA_ERR_INVALID, "k.ptr");
    FWD("v NULL", a.v.ptr = NULL, FA_ERR_INVALID, "v.ptr");
    FWD("o NULL", a.o.ptr = NULL, FA_ERR_INVALID, "o.ptr");
    FWD("lse NULL", a.lse.ptr = NULL, FA_ERR_INVALID, "lse.ptr");
    FWD("mask NULL is valid (no mask)", a.mask.ptr = NULL, FA_OK, "");
    FWD("q misaligned", a.q.ptr = (char *)a.q.ptr + 1, FA_ERR_INVALID, "q.ptr");
    FWD("v misaligned", a.v.ptr = (char *)a.v.ptr + 1, FA_ERR_INVALID, "v.ptr");
    FWD("o misaligned", a.o.ptr = (char *)a.o.ptr + 1, FA_ERR_INVALID, "o.ptr");
    FWD("lse misaligned", a.lse.ptr = (float *)((char *)a.lse.ptr + 2), FA_ERR_INVALID, "lse.ptr");
    FWD("mask misaligned", a.mask.ptr = (const float *)((const char *)a.mask.ptr + 2), FA_ERR_INVALID, "mask.ptr");
    FWD("NULL pointer with batch 0 is still rejected", (a.p.batch = 0, a.k.ptr = NULL), FA_ERR_INVALID, "k.ptr");
}

static void test_fwd_strides(void **state) {
    (void)state;
    FWD("q.stride[1] < 0", a.q.stride[1] = -1, FA_ERR_INVALID, "q.stride[1]");
    FWD("k.stride[0] < 0", a.k.stride[0] = -64, FA_ERR_INVALID, "k.stride[0]");
    FWD("v.stride[3] < 0", a.v.stride[3] = -1, FA_ERR_INVALID, "v.stride[3]");
    FWD("o.stride[2] < 0", a.o.stride[2] = -8, FA_ERR_INVALID, "o.stride[2]");
    FWD("lse.stride[2] < 0", a.lse.stride[2] = -1, FA_ERR_INVALID, "lse.stride[2]");
    FWD("mask.stride[3] < 0", a.mask.stride[3] = -1, FA_ERR_INVALID, "mask.stride[3]");
    FWD("mask.stride[0] < 0", a.mask.stride[0] = -1, FA_ERR_INVALID, "mask.stride[0]");
    FWD("extent product overflows", a.k.stride[1] = BIG / 2, FA_ERR_INVALID, "k.stride[1]");
    FWD("extent sum overflows", (a.q.stride[0] = BIG / 2 + 1, a.q.stride[1] = BIG / 4), FA_ERR_INVALID, "q.stride[1]");
    FWD("byte size overflows", a.v.stride[0] = BIG / 2 + 10, FA_ERR_INVALID, "v");
    FWD("lse extent overflows", a.lse.stride[0] = BIG, FA_ERR_INVALID, "lse.stride[0]");
    FWD("mask extent overflows", a.mask.stride[3] = BIG / 3, FA_ERR_INVALID, "mask.stride[3]");
    FWD("output o stride 0 (broadcast output)", a.o.stride[2] = 0, FA_ERR_INVALID, "o.stride[2]");
    FWD("output o last stride 0", a.o.stride[3] = 0, FA_ERR_INVALID, "o.stride[3]");
    FWD("output o seq and head strides equal", a.o.stride[1] = a.o.stride[2], FA_ERR_INVALID, "o.stride[2]");
    FWD("output o interleaved too tightly", a.o.stride[1] = 9, FA_ERR_INVALID, "o.stride[1]");
    FWD("output lse seq stride 0", a.lse.stride[2] = 0, FA_ERR_INVALID, "lse.stride[2]");
    FWD("output lse head/seq alias", a.lse.stride[1] = 1, FA_ERR_INVALID, "lse.stride[2]");
    FWD("stride-0 output dim of size 1 is valid", (a.p.heads_q = 1, a.p.heads_kv = 1, a.o.stride[2] = 0,
        a.q.stride[2] = 0, a.mask.stride[1] = 0), FA_OK, "");
    FWD("input broadcast stride 0 is valid", (a.k.stride[0] = 0, a.v.stride[2] = 0), FA_OK, "");
    FWD("mask broadcast stride 0 is valid", (a.mask.stride[0] = 0, a.mask.stride[1] = 0), FA_OK, "");
    FWD("mask scalar broadcast is valid", (a.mask.stride[0] = a.mask.stride[1] = a.mask.stride[2] = a.mask.stride[3] = 0),
        FA_OK, "");
    FWD("o in BHSD order is valid", (a.o.stride[1] = 8, a.o.stride[2] = 5 * 8), FA_OK, "");
    FWD("huge strides on empty tensor are valid", (a.p.seqlen_k = 0, a.k.stride[1] = BIG, a.v.stride[0] = BIG), FA_OK, "");
}

static void test_fwd_overlap(void **state) {
    (void)state;
    FWD("o aliases q", a.o.ptr = a.q.ptr, FA_ERR_INVALID, "o");
    FWD("o overlaps the tail of v", a.o.ptr = (uint16_t *)a.v.ptr + c.v.n_elems - 2, FA_ERR_INVALID, "o");
    FWD("lse inside the mask", a.lse.ptr = (float *)a.mask.ptr + 3, FA_ERR_INVALID, "lse");
    FWD("o and lse share memory", a.lse.ptr = (float *)a.o.ptr, FA_ERR_INVALID, "o");
    FWD("lse inside k", a.lse.ptr = (float *)c.k.buf, FA_ERR_INVALID, "lse");
    FWD("fused q = k = v inputs are valid", (a.k.ptr = a.q.ptr, a.v.ptr = a.q.ptr), FA_OK, "");
    FWD("mask overlapping q is valid (inputs)", (a.mask.ptr = (const float *)c.q.buf, /* within q's 640 bytes */
        a.mask.stride[0] = a.mask.stride[1] = a.mask.stride[2] = 0), FA_OK, "");
    FWD("empty o (Sq = 0) may alias q", (a.p.seqlen_q = 0, a.o.ptr = a.q.ptr), FA_OK, "");
    FWD("empty batch: nothing overlaps", (a.p.batch = 0, a.o.ptr = a.q.ptr, a.lse.ptr = (float *)a.q.ptr), FA_OK, "");
    FWD("empty k/v (Sk = 0) may alias o", (a.p.seqlen_k = 0, a.k.ptr = a.o.ptr, a.v.ptr = a.o.ptr), FA_OK, "");
    static uint16_t joint[2 * 320]; /* q (320 elements) immediately followed by o */
    FWD("o adjacent to q (touching, no overlap) is valid",
        (memcpy(joint, c.q.buf, 320 * 2), a.q.ptr = joint, a.o.ptr = joint + 320), FA_OK, "");
}

/* Limits a backend can declare (the CPU backend declares none of these). */
static void test_fwd_limits(void **state) {
    (void)state;
    fa_limits lim = {.max_head_dim = 256, .head_dim_multiple = 8, .dqk_must_equal_dv = 1,
                     .ptr_align_bytes = 16, .unit_last_stride = 1};
    FWD_LIM("valid under strict limits", (void)0, lim, FA_OK, "");
    FWD_LIM("head dim above max", (a.p.head_dim_qk = 264, a.p.head_dim_v = 264), lim, FA_ERR_UNSUPPORTED, "head_dim_qk");
    FWD_LIM("head dim not a multiple", (a.p.head_dim_qk = 4, a.p.head_dim_v = 4), lim, FA_ERR_UNSUPPORTED, "head_dim_qk");
    FWD_LIM("Dv not a multiple", a.p.head_dim_v = 12, lim, FA_ERR_UNSUPPORTED, "head_dim_v");
    FWD_LIM("Dqk != Dv", a.p.head_dim_v = 16, lim, FA_ERR_UNSUPPORTED, "head_dim_v");
    FWD_LIM("pointer not 16-aligned", a.k.ptr = (uint16_t *)a.k.ptr + 1, lim, FA_ERR_UNSUPPORTED, "k.ptr");
    FWD_LIM("odd pointer is invalid, not unsupported", a.k.ptr = (char *)a.k.ptr + 1, lim, FA_ERR_INVALID, "k.ptr");
    FWD_LIM("last stride not 1", a.v.stride[3] = 2, lim, FA_ERR_UNSUPPORTED, "v.stride[3]");
    fa_limits none = {0};
    FWD_LIM("zero limits mean no limit", (a.p.head_dim_qk = 1000, a.p.head_dim_v = 3,
            memset(a.q.stride, 0, sizeof(a.q.stride)), memset(a.k.stride, 0, sizeof(a.k.stride))), none, FA_OK, "");
}

// ----------------------------------------------------------------------------
// contract v3: varlen, paged, softcap, sinks (base case B=2, Sq=5, Sk=7, Hq=4, Hkv=2, D=8,
// contiguous: q/o rows of 4*8 = 32 elements, k/v rows of 2*8 = 16)

/* packed Q and K: sequences (2, 3) queries and (3, 4) keys; no mask (not allowed with varlen) */
#define V3_VARLEN(a)                                                              \
    (v3_cu_q[0] = 0, v3_cu_q[1] = 2, v3_cu_q[2] = 5, v3_cu_k[0] = 0, v3_cu_k[1] = 3, \
     v3_cu_k[2] = 7, (a).mask.ptr = NULL, (a).varlen.cu_seqlens_q = v3_cu_q,       \
     (a).varlen.cu_seqlens_k = v3_cu_k)
#define V3_USED(a) (v3_used[0] = 2, v3_used[1] = 4, (a).varlen.seqused_k = v3_used)
/* K/V as pools of 4 pages of 3 keys (fit in the dense k/v buffers), table [2, 3] in a stride-4
 * table, pages shuffled and shared; entry [b][3] (past max_pages_per_seq) is -9, never read */
#define V3_PAGED(a)                                                                          \
    (v3_table[0] = 3, v3_table[1] = 0, v3_table[2] = 1, v3_table[3] = -9, v3_table[4] = 2,   \
     v3_table[5] = 2, v3_table[6] = 0, v3_table[7] = -9, (a).p.page_size = 3,               \
     (a).paged.block_table = v3_table, (a).paged.table_stride = 4, (a).paged.max_pages_per_seq = 3, \
     (a).paged.num_pages = 4, (a).k.stride[0] = 48, (a).k.stride[1] = 16, (a).v.stride[0] = 48,  \
     (a).v.stride[1] = 16)
#define V3_PAGED_BWD(a) \
    (V3_PAGED(a), (a).dk.stride[0] = 48, (a).dk.stride[1] = 16, (a).dv.stride[0] = 48, (a).dv.stride[1] = 16)
#define V3_SINKS(a) (v3_sinks[0] = 0.5f, (a).p.has_sinks = 1, (a).sinks = v3_sinks)

/* The CPU backend claims every contract-v3 feature: the checks below run on
 * fa_validate_* with its limits AND on its forward / backward (no write on rejection). */

static void test_v3_valid(void **state) {
    (void)state;
    FWD("varlen q and k", V3_VARLEN(a), FA_OK, "");
    FWD("varlen q only (dense k)", (V3_VARLEN(a), a.varlen.cu_seqlens_k = NULL), FA_OK, "");
    FWD("varlen with seqused_k", (V3_VARLEN(a), V3_USED(a)), FA_OK, "");
    FWD("seqused_k on dense k", (a.mask.ptr = NULL, V3_USED(a)), FA_OK, "");
    FWD("empty sequences inside a batch", (V3_VARLEN(a), v3_cu_q[1] = 0, v3_cu_k[1] = 0, v3_cu_k[2] = 5), FA_OK, "");
    FWD("batch 0 with cu = {0}", (V3_VARLEN(a), a.p.batch = 0), FA_OK, "");
    FWD("packed q ignores q.stride[0] (even negative)", (V3_VARLEN(a), a.q.stride[0] = -5), FA_OK, "");
    FWD("o after the LAST packed row of q (inside q's dense extent) is valid",
            (V3_VARLEN(a), a.o.ptr = c.q.buf + 5 * 32), FA_OK, "");
    FWD("packed lse ignores lse.stride[0]", (V3_VARLEN(a), a.lse.stride[0] = -1), FA_OK, "");
    FWD("paged", V3_PAGED(a), FA_OK, "");
    FWD("paged with seqused_k", (V3_PAGED(a), V3_USED(a)), FA_OK, "");
    FWD("paged with varlen q", (V3_PAGED(a), V3_VARLEN(a), a.varlen.cu_seqlens_k = NULL), FA_OK, "");
    FWD("table entries past the used pages are not read",
            (V3_PAGED(a), V3_USED(a), v3_table[1] = 99, v3_table[6] = -1), FA_OK, "");
    FWD("page_size 1", (V3_PAGED(a), a.p.page_size = 1, a.paged.max_pages_per_seq = 7,
            a.paged.table_stride = 7, a.paged.num_pages = 8, a.k.stride[0] = 16, a.v.stride[0] = 16,
            v3_table_p1()), FA_OK, "");
    FWD("softcap", a.p.softcap = 30.0f, FA_OK, "");
    FWD("sinks", V3_SINKS(a), FA_OK, "");
    FWD("sinks with the mask", (V3_SINKS(a), a.p.softcap = 5.0f), FA_OK, "");
    FWD("every feature at once", (V3_VARLEN(a), a.varlen.cu_seqlens_k = NULL, V3_PAGED(a), V3_USED(a),
            V3_SINKS(a), a.p.softcap = 2.0f, a.p.head_dim_v = 4), FA_OK, "");
    BWD("bwd varlen + sinks + dsinks", (V3_VARLEN(a), V3_SINKS(a), a.dsinks = v3_dsinks), FA_OK, "");
    BWD("bwd sinks without dsinks", V3_SINKS(a), FA_OK, "");
    BWD("bwd paged", V3_PAGED_BWD(a), FA_OK, "");
}

static void test_v3_unsupported(void **state) {
    (void)state;
    fa_limits none = fa_backend_cpu()->limits;
    none.supports_varlen = none.supports_paged = none.supports_softcap = none.supports_sinks = 0;
    FWD_LIM("cu_seqlens_q unclaimed", V3_VARLEN(a), none, FA_ERR_UNSUPPORTED, "varlen.cu_seqlens_q");
    FWD_LIM("cu_seqlens_k unclaimed", (V3_VARLEN(a), a.varlen.cu_seqlens_q = NULL), none, FA_ERR_UNSUPPORTED,
            "varlen.cu_seqlens_k");
    FWD_LIM("seqused_k unclaimed", (a.mask.ptr = NULL, V3_USED(a)), none, FA_ERR_UNSUPPORTED, "varlen.seqused_k");
    FWD_LIM("paged unclaimed", V3_PAGED(a), none, FA_ERR_UNSUPPORTED, "page_size");
    FWD_LIM("softcap unclaimed", a.p.softcap = 1.0f, none, FA_ERR_UNSUPPORTED, "softcap");
    FWD_LIM("sinks unclaimed", V3_SINKS(a), none, FA_ERR_UNSUPPORTED, "has_sinks");
    FWD_LIM("unclaimed feature beats its invalid arrays", (V3_VARLEN(a), v3_cu_q[0] = 3), none,
            FA_ERR_UNSUPPORTED, "varlen.cu_seqlens_q");
    fa_limits only = none;
    only.supports_softcap = 1;
    FWD_LIM("the claimed one passes", a.p.softcap = 1.0f, only, FA_OK, "");
    FWD_LIM("another one is still refused", (a.p.softcap = 1.0f, V3_SINKS(a)), only, FA_ERR_UNSUPPORTED, "has_sinks");
    BWD_LIM("bwd paged unclaimed", V3_PAGED_BWD(a), none, FA_ERR_UNSUPPORTED, "page_size");
    BWD_LIM("bwd sinks unclaimed", V3_SINKS(a), none, FA_ERR_UNSUPPORTED, "has_sinks");
}

static void test_v3_invalid(void **state) {
    (void)state;
    /* scalars */
    FWD("softcap < 0", a.p.softcap = -1.0f, FA_ERR_INVALID, "softcap");
    FWD("softcap NaN", a.p.softcap = NAN, FA_ERR_INVALID, "softcap");
    FWD("softcap inf", a.p.softcap = INFINITY, FA_ERR_INVALID, "softcap");
    FWD("has_sinks = 2", (V3_SINKS(a), a.p.has_sinks = 2), FA_ERR_INVALID, "has_sinks");
    FWD("page_size < 0", a.p.page_size = -3, FA_ERR_INVALID, "page_size");
    /* cu_seqlens */
    FWD("cu_q[0] != 0", (V3_VARLEN(a), v3_cu_q[0] = 1), FA_ERR_INVALID, "varlen.cu_seqlens_q");
    FWD("cu_q decreasing", (V3_VARLEN(a), v3_cu_q[1] = 4, v3_cu_q[2] = 3), FA_ERR_INVALID,
            "varlen.cu_seqlens_q");
    FWD("a q sequence above seqlen_q", (V3_VARLEN(a), v3_cu_q[1] = 0, v3_cu_q[2] = 6), FA_ERR_INVALID,
            "varlen.cu_seqlens_q");
    FWD("cu_k[0] != 0", (V3_VARLEN(a), v3_cu_k[0] = -1), FA_ERR_INVALID, "varlen.cu_seqlens_k");
    FWD("cu_k decreasing", (V3_VARLEN(a), v3_cu_k[2] = 2), FA_ERR_INVALID, "varlen.cu_seqlens_k");
    FWD("a k sequence above seqlen_k", (V3_VARLEN(a), v3_cu_k[2] = 11), FA_ERR_INVALID,
            "varlen.cu_seqlens_k");
    FWD("mask with cu_seqlens_q", (V3_VARLEN(a), a.varlen.cu_seqlens_k = NULL, a.mask.ptr = c.mask), FA_ERR_INVALID, "mask");
    FWD("mask with cu_seqlens_k", (V3_VARLEN(a), a.varlen.cu_seqlens_q = NULL, a.mask.ptr = c.mask), FA_ERR_INVALID, "mask");
    /* seqused_k */
    FWD("seqused_k < 0", (V3_VARLEN(a), V3_USED(a), v3_used[1] = -1), FA_ERR_INVALID, "varlen.seqused_k");
    FWD("seqused_k above the cu_k span", (V3_VARLEN(a), V3_USED(a), v3_used[0] = 4), FA_ERR_INVALID,
            "varlen.seqused_k");
    FWD("seqused_k above seqlen_k (dense)", (a.mask.ptr = NULL, V3_USED(a), v3_used[1] = 8),
            FA_ERR_INVALID, "varlen.seqused_k");
    FWD("seqused_k above the pages of a row", (V3_PAGED(a), V3_USED(a), v3_used[1] = 10),
            FA_ERR_INVALID, "varlen.seqused_k");
    /* regression (fuzz finding): a paged row holds 9 keys but seqlen_k is 7 (the mask has 7 columns) */
    FWD("seqused_k above seqlen_k with pages to spare", (V3_PAGED(a), V3_USED(a), v3_used[1] = 8),
            FA_ERR_INVALID, "varlen.seqused_k");
    /* paged geometry and table */
    FWD("page_size without a table", (V3_PAGED(a), a.paged.block_table = NULL), FA_ERR_INVALID,
            "paged.block_table");
    FWD("a table without page_size", (V3_PAGED(a), a.p.page_size = 0), FA_ERR_INVALID,
            "paged.block_table");
    FWD("table entry < 0", (V3_PAGED(a), v3_table[2] = -1), FA_ERR_INVALID, "paged.block_table");
    FWD("table entry = num_pages", (V3_PAGED(a), v3_table[4] = 4), FA_ERR_INVALID, "paged.block_table");
    FWD("table entry read with seqused_k", (V3_PAGED(a), V3_USED(a), v3_table[5] = 7), FA_ERR_INVALID,
            "paged.block_table");
    FWD("pages hold fewer than seqlen_k keys", (V3_PAGED(a), a.paged.max_pages_per_seq = 2),
            FA_ERR_INVALID, "paged.max_pages_per_seq");
    FWD("max_pages_per_seq = 0", (V3_PAGED(a), a.paged.max_pages_per_seq = 0), FA_ERR_INVALID,
            "paged.max_pages_per_seq");
    FWD("max_pages_per_seq * page_size overflows", (V3_PAGED(a), a.p.page_size = BIG / 2,
            a.paged.table_stride = 4), FA_ERR_INVALID, "paged.max_pages_per_seq");
    FWD("table_stride < max_pages_per_seq", (V3_PAGED(a), a.paged.table_stride = 2), FA_ERR_INVALID,
            "paged.table_stride");
    FWD("num_pages = 0", (V3_PAGED(a), a.paged.num_pages = 0), FA_ERR_INVALID, "paged.num_pages");
    FWD("paged with cu_seqlens_k", (V3_PAGED(a), V3_VARLEN(a)), FA_ERR_INVALID, "varlen.cu_seqlens_k");
    FWD("pool extent overflows", (V3_PAGED(a), a.paged.num_pages = BIG / 8, v3_table[0] = 0),
            FA_ERR_INVALID, "k");
    /* sinks */
    FWD("has_sinks with sinks NULL", (V3_SINKS(a), a.sinks = NULL), FA_ERR_INVALID, "sinks");
    FWD("sinks misaligned", (V3_SINKS(a), a.sinks = (const float *)((const char *)v3_sinks + 2)),
            FA_ERR_INVALID, "sinks.ptr");
    /* outputs against packed / paged / sinks ranges */
    FWD("o inside the last packed row of q", (V3_VARLEN(a), a.o.ptr = c.q.buf + 4 * 32 + 8),
            FA_ERR_INVALID, "o");
    FWD("o inside the last page of the k pool", (V3_PAGED(a), a.o.ptr = c.k.buf + 3 * 48 + 40),
            FA_ERR_INVALID, "o");
    FWD("lse on the sinks", (V3_SINKS(a), a.lse.ptr = v3_sinks), FA_ERR_INVALID, "lse");
    FWD("packed lse overlapping o", (V3_VARLEN(a), a.lse.ptr = (float *)c.o.buf), FA_ERR_INVALID, "o");
    BWD("bwd has_sinks with sinks NULL", (V3_SINKS(a), a.sinks = NULL), FA_ERR_INVALID, "sinks");
    BWD("bwd dsinks misaligned", (V3_SINKS(a), a.dsinks = (float *)((char *)v3_dsinks + 1)),
            FA_ERR_INVALID, "dsinks.ptr");
    BWD("bwd dsinks on the sinks", (V3_SINKS(a), a.dsinks = v3_sinks + 2), FA_ERR_INVALID, "dsinks");
    BWD("bwd dq inside the last packed row of dout", (V3_VARLEN(a), a.dq.ptr = c.dout.buf + 4 * 32),
            FA_ERR_INVALID, "dq");
    BWD("bwd dk pool overlapping dv pool", (V3_PAGED_BWD(a), a.dv.ptr = c.dk.buf + 100), FA_ERR_INVALID, "dk");
    BWD("bwd cu_k decreasing", (V3_VARLEN(a), v3_cu_k[1] = 9), FA_ERR_INVALID, "varlen.cu_seqlens_k");
    BWD("bwd table entry out of range", (V3_PAGED_BWD(a), v3_table[0] = 4), FA_ERR_INVALID,
            "paged.block_table");
    BWD("bwd softcap NaN", a.p.softcap = NAN, FA_ERR_INVALID, "softcap");
}

// ----------------------------------------------------------------------------
// backward

static void test_bwd_all(void **state) {
    (void)state;
    BWD("base case is valid", (void)0, FA_OK, "");
    BWD("q NULL", a.q.ptr = NULL, FA_ERR_INVALID, "q.ptr");
    BWD("k NULL", a.k.ptr = NULL, FA_ERR_INVALID, "k.ptr");
    BWD("v NULL", a.v.ptr = NULL, FA_ERR_INVALID, "v.ptr");
    BWD("o NULL", a.o.ptr = NULL, FA_ERR_INVALID, "o.ptr");
    BWD("dout NULL", a.dout.ptr = NULL, FA_ERR_INVALID, "dout.ptr");
    BWD("lse NULL", a.lse.ptr = NULL, FA_ERR_INVALID, "lse.ptr");
    BWD("dq NULL", a.dq.ptr = NULL, FA_ERR_INVALID, "dq.ptr");
    BWD("dk NULL", a.dk.ptr = NULL, FA_ERR_INVALID, "dk.ptr");
    BWD("dv NULL", a.dv.ptr = NULL, FA_ERR_INVALID, "dv.ptr");
    BWD("seqlen_q < 0", a.p.seqlen_q = -1, FA_ERR_INVALID, "seqlen_q");
    BWD("Hq % Hkv", a.p.heads_kv = 3, FA_ERR_INVALID, "heads_kv");
    BWD("head_dim_v = 0", a.p.head_dim_v = 0, FA_ERR_INVALID, "head_dim_v");
    BWD("dtype", a.p.dtype = (fa_dtype)9, FA_ERR_INVALID, "dtype");
    BWD("causal", a.p.causal = (fa_causal)7, FA_ERR_INVALID, "causal");
    BWD("scale NaN", a.p.softmax_scale = NAN, FA_ERR_INVALID, "softmax_scale");
    BWD("dk misaligned", a.dk.ptr = (char *)a.dk.ptr + 1, FA_ERR_INVALID, "dk.ptr");
    BWD("dout misaligned", a.dout.ptr = (char *)a.dout.ptr + 1, FA_ERR_INVALID, "dout.ptr");
    BWD("lse misaligned", a.lse.ptr = (float *)((char *)a.lse.ptr + 1), FA_ERR_INVALID, "lse.ptr");
    BWD("dout.stride[3] < 0", a.dout.stride[3] = -1, FA_ERR_INVALID, "dout.stride[3]");
    BWD("o.stride[2] < 0", a.o.stride[2] = -2, FA_ERR_INVALID, "o.stride[2]");
    BWD("lse.stride[0] < 0", a.lse.stride[0] = -1, FA_ERR_INVALID, "lse.stride[0]");
    BWD("dq.stride[1] < 0", a.dq.stride[1] = -1, FA_ERR_INVALID, "dq.stride[1]");
    BWD("mask.stride[2] < 0", a.mask.stride[2] = -1, FA_ERR_INVALID, "mask.stride[2]");
    BWD("dout extent overflows", a.dout.stride[1] = BIG / 3, FA_ERR_INVALID, "dout.stride[1]");
    BWD("dv stride 0 (aliasing output)", a.dv.stride[1] = 0, FA_ERR_INVALID, "dv.stride[1]");
    BWD("dk rows alias", a.dk.stride[1] = 2, FA_ERR_INVALID, "dk.stride[1]");
    BWD("dq overlaps dout", a.dq.ptr = a.dout.ptr, FA_ERR_INVALID, "dq");
    BWD("dq overlaps lse", a.dq.ptr = (void *)a.lse.ptr, FA_ERR_INVALID, "dq");
    BWD("dk aliases dv", a.dk.ptr = a.dv.ptr, FA_ERR_INVALID, "dk");
    BWD("dv overlaps k", a.dv.ptr = (uint16_t *)a.k.ptr + 8, FA_ERR_INVALID, "dv");
    BWD("dq overlaps the mask", a.dq.ptr = (void *)(a.mask.ptr + 6), FA_ERR_INVALID, "dq");
    BWD("o = dout (inputs overlap) is valid", a.dout.ptr = a.o.ptr, FA_OK, "");
    BWD("lse broadcast (input) is valid", a.lse.stride[2] = 0, FA_OK, "");
    BWD("empty dq (Sq = 0) may alias k", (a.p.seqlen_q = 0, a.dq.ptr = a.k.ptr), FA_OK, "");
}

// ----------------------------------------------------------------------------
// helpers of kernels/api

static void test_helpers(void **state) {
    (void)state;
    assert_string_equal(fa_status_name(FA_OK), "FA_OK");
    assert_string_equal(fa_status_name(FA_ERR_INVALID), "FA_ERR_INVALID");
    assert_string_equal(fa_status_name(FA_ERR_UNSUPPORTED), "FA_ERR_UNSUPPORTED");
    assert_string_equal(fa_status_name(FA_ERR_NOMEM), "FA_ERR_NOMEM");
    assert_string_equal(fa_status_name(FA_ERR_DEVICE), "FA_ERR_DEVICE");
    assert_string_equal(fa_status_name(FA_ERR_INTERNAL), "FA_ERR_INTERNAL");
    assert_string_equal(fa_status_name((fa_status)42), "FA_ERR_UNKNOWN");
    assert_string_equal(fa_dtype_name(FA_F16), "fp16");
    assert_string_equal(fa_dtype_name(FA_BF16), "bf16");
    assert_int_equal(fa_dtype_size(FA_F16), 2);
    assert_int_equal(fa_dtype_size(FA_BF16), 2);
    assert_int_equal(fa_dtype_size((fa_dtype)5), 0);
    fa_problem p = tt_problem(1, 1, 1, 1, 1, 64, 64, FA_F16);
    assert_true(fa_effective_scale(&p) == 0.125f);
    p.head_dim_qk = 3;
    assert_true(fa_effective_scale(&p) == (float)(1.0 / sqrt(3.0)));
    p.softmax_scale = -0.5f;
    assert_true(fa_effective_scale(&p) == -0.5f);
    fa_error err;
    assert_int_equal(fa_fail(&err, FA_ERR_NOMEM, "a_very_long_argument_name_that_does_not_fit_in_32", "x=%d", 7),
                     FA_ERR_NOMEM);
    assert_int_equal(err.status, FA_ERR_NOMEM);
    assert_int_equal(strlen(err.arg), 31); /* truncated, terminated */
    assert_string_equal(err.msg, "x=7");
    assert_int_equal(fa_fail(NULL, FA_ERR_INVALID, "q", "no err"), FA_ERR_INVALID);
    assert_int_equal(fa_validate_fwd(NULL, NULL, &err), FA_ERR_INVALID);
    assert_int_equal(fa_validate_bwd(NULL, NULL, &err), FA_ERR_INVALID);
}

static void test_count(void **state) {
    (void)state;
    print_message("  %d argument checks run (each on fa_validate_* and, with CPU limits, the CPU backend)\n",
                  checks_run);
    assert_true(checks_run > 100);
}

int main(void) {
    fa_cpu_set_mutant(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_helpers),     cmocka_unit_test(test_fwd_scalars),
        cmocka_unit_test(test_fwd_pointers), cmocka_unit_test(test_fwd_strides),
        cmocka_unit_test(test_fwd_overlap), cmocka_unit_test(test_fwd_limits),
        cmocka_unit_test(test_bwd_all),     cmocka_unit_test(test_v3_valid),
        cmocka_unit_test(test_v3_unsupported), cmocka_unit_test(test_v3_invalid),
        cmocka_unit_test(test_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
