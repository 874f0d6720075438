/* api_test_v3.h: contract-v3 cases for the tests/api suite (test-only).
 *
 * A v3 case is B independent sequences. Each sequence b is first built as its own DENSE
 * problem (tt_case, B = 1, Sq_b queries, Sk_b = used keys) with random inputs; the
 * combined call (packed Q, packed or paged K/V, seqused_k, padded block-table rows,
 * shuffled and optionally shared pages) is assembled from those pieces, with NaN in every
 * element the contract says is never read (keys past seqused_k, table entries past the
 * used pages and in the row padding, spare pages, row padding; 16 in K, see v3_build).
 *
 * The CPU backend computes each sequence with the same tiles and the same order whether it
 * runs alone or inside a v3 batch, so the combined call must reproduce the per-sequence
 * dense calls BIT FOR BIT (v3_compare): O, LSE, dQ, dK, dV, dsinks; keys past Sk_b and
 * pages no sequence uses get dK = dV = 0. The values of the dense calls themselves (with
 * softcap and sinks) are checked against the fp64 reference and its derived bounds
 * (api_test_ref.h, v3_ref_violations). Shared pages accumulate dK/dV of two sequences:
 * checked against the sum of the two references (v3_shared_violations).
 * Shares no code with kernels/cpu beyond the fp16/bf16 converters (as api_test_util.h). */
#ifndef FLASHCHECK_API_TEST_V3_H
#define FLASHCHECK_API_TEST_V3_H

#include "tests/api/api_test_ref.h"

#define V3_MAXB 8

typedef enum { V3_KV_DENSE = 0, V3_KV_PACKED = 1, V3_KV_PAGED = 2 } v3_kv_mode;

typedef struct {
    int64_t B, Hq, Hkv, Dqk, Dv;
    int64_t sq[V3_MAXB];    /* queries per sequence (all equal when !packed_q) */
    int64_t used[V3_MAXB];  /* keys each sequence uses */
    int64_t alloc[V3_MAXB]; /* keys allocated (packed: the cu_k span; dense: all = max) >= used */
    int packed_q;
    v3_kv_mode kv;
    int seqused;            /* pass seqused_k (needed when used < alloc, or paged lengths differ) */
    int64_t page_size, table_pad, spare_pages;
    int share;              /* paged: sequence 1 uses sequence 0's pages (and K/V); used[1] == used[0] */
    int in_order;           /* paged: pages handed out in order (each sequence's pages consecutive) */
    fa_causal causal;
    int64_t wl, wr;
    fa_align align;
    float softcap;
    int sinks;
    fa_dtype dt;
    uint64_t seed;
} v3_spec;

typedef struct {
    uint16_t *p;
    size_t n;
    int64_t st[4];
} v3_buf;

typedef struct {
    v3_spec s;
    tt_case dense[V3_MAXB];
    float sinks[64], dsinks[64], dense_dsinks[V3_MAXB][64];
    int32_t cu_q[V3_MAXB + 1], cu_k[V3_MAXB + 1], used[V3_MAXB], *table;
    int64_t total_q, total_k, max_pages, table_stride, num_pages, npages[V3_MAXB];
    v3_buf q, k, v, o, dout, dq, dk, dv;
    float *lse;
    size_t n_lse;
    int64_t lse_st[3];
    fa_problem p;
} v3_case;

static TT_UNUSED uint16_t v3_nan(fa_dtype dt) { return dt == FA_BF16 ? 0x7fc1 : 0x7e01; }

static TT_UNUSED v3_buf v3_alloc(int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t pad, fa_dtype dt) {
    v3_buf b;
    b.st[3] = 1; b.st[2] = d3 + pad; b.st[1] = b.st[2] * d2 + pad; b.st[0] = b.st[1] * d1 + pad;
    b.n = (size_t)(b.st[0] * (d0 > 0 ? d0 : 1)) + 1;
    b.p = malloc(b.n * 2);
    for (size_t x = 0; x < b.n; x++) b.p[x] = v3_nan(dt);
    return b;
}
static TT_UNUSED fa_tensor v3_view(const v3_buf *b) {
    fa_tensor t;
    t.ptr = b->p;
    memcpy(t.stride, b->st, sizeof(t.stride));
    return t;
}

/* element offsets in the combined tensors: Q-like row i of sequence b, K-like key j of b */
static TT_UNUSED size_t v3_qoff(const v3_case *c, const int64_t st[4], int64_t b, int64_t i, int64_t h) {
    if (c->s.packed_q) return (size_t)((c->cu_q[b] + i) * st[1] + h * st[2]);
    return (size_t)(b * st[0] + i * st[1] + h * st[2]);
}
static TT_UNUSED size_t v3_koff(const v3_case *c, const int64_t st[4], int64_t b, int64_t j, int64_t h) {
    if (c->s.kv == V3_KV_PAGED) {
        int64_t page = c->table[b * c->table_stride + j / c->s.page_size];
        return (size_t)(page * st[0] + (j % c->s.page_size) * st[1] + h * st[2]);
    }
    if (c->s.kv == V3_KV_PACKED) return (size_t)((c->cu_k[b] + j) * st[1] + h * st[2]);
    return (size_t)(b * st[0] + j * st[1] + h * st[2]);
}
static TT_UNUSED size_t v3_lseoff(const v3_case *c, int64_t b, int64_t h, int64_t i) {
    if (c->s.packed_q) return (size_t)(h * c->lse_st[1] + (c->cu_q[b] + i) * c->lse_st[2]);
    return (size_t)(b * c->lse_st[0] + h * c->lse_st[1] + i * c->lse_st[2]);
}

static TT_UNUSED fa_problem v3_seq_problem(const v3_spec *s, int64_t sq, int64_t sk) {
    fa_problem p = tt_problem(1, sq, sk, s->Hq, s->Hkv, s->Dqk, s->Dv, s->dt);
    p.causal = s->causal; p.window_left = s->wl; p.window_right = s->wr; p.window_align = s->align;
    p.softcap = s->softcap; p.has_sinks = s->sinks;
    return p;
}

static TT_UNUSED void v3_build(v3_case *c, const v3_spec *spec) {
    memset(c, 0, sizeof(*c));
    c->s = *spec;
    const v3_spec *s = &c->s;
    tt_rng r = {s->seed * 0x9E3779B97F4A7C15ULL + 99};
    for (int64_t h = 0; h < s->Hq; h++) c->sinks[h] = (float)(1.0 + 2.0 * tt_uniform(&r));
    if (s->Hq > 1) c->sinks[s->Hq - 1] = 6.0f; /* a sink that dominates most rows */
    int64_t maxq = 0, maxalloc = 0, maxused = 0;
    c->cu_q[0] = c->cu_k[0] = 0;
    for (int64_t b = 0; b < s->B; b++) {
        tt_case_init(&c->dense[b], v3_seq_problem(s, s->sq[b], s->used[b]), TT_CONTIGUOUS, s->seed * 131 + (uint64_t)b);
        c->cu_q[b + 1] = c->cu_q[b] + (int32_t)s->sq[b];
        c->cu_k[b + 1] = c->cu_k[b] + (int32_t)s->alloc[b];
        c->used[b] = (int32_t)s->used[b];
        if (s->sq[b] > maxq) maxq = s->sq[b];
        if (s->alloc[b] > maxalloc) maxalloc = s->alloc[b];
        if (s->used[b] > maxused) maxused = s->used[b];
    }
    if (s->share && s->B >= 2) { /* sequence 1 reads sequence 0's K/V */
        memcpy(c->dense[1].k.buf, c->dense[0].k.buf, c->dense[0].k.n_elems * 2);
        memcpy(c->dense[1].v.buf, c->dense[0].v.buf, c->dense[0].v.n_elems * 2);
    }
    c->total_q = c->cu_q[s->B];
    c->total_k = c->cu_k[s->B];
    const int64_t rows_q = s->packed_q ? c->total_q : maxq;
    const int64_t bq = s->packed_q ? 1 : s->B;
    c->q = v3_alloc(bq, rows_q, s->Hq, s->Dqk, 2, s->dt);
    c->dq = v3_alloc(bq, rows_q, s->Hq, s->Dqk, 1, s->dt);
    c->o = v3_alloc(bq, rows_q, s->Hq, s->Dv, 3, s->dt);
    c->dout = v3_alloc(bq, rows_q, s->Hq, s->Dv, 0, s->dt);
    if (s->packed_q) { /* stride[0] is ignored for packed tensors: make it absurd */
        c->q.st[0] = 1 << 30; c->dq.st[0] = 7; c->o.st[0] = 0; c->dout.st[0] = 3;
    }
    c->n_lse = (size_t)(s->Hq * (rows_q + 1) * bq) + 1;
    c->lse = malloc(c->n_lse * sizeof(float));
    for (size_t x = 0; x < c->n_lse; x++) c->lse[x] = NAN;
    c->lse_st[2] = 1; c->lse_st[1] = rows_q + 1; c->lse_st[0] = s->packed_q ? 12345 : s->Hq * (rows_q + 1);
    if (s->kv == V3_KV_PAGED) {
        c->max_pages = (maxused + s->page_size - 1) / s->page_size;
        if (c->max_pages < 1) c->max_pages = 1;
        c->table_stride = c->max_pages + s->table_pad;
        c->num_pages = s->spare_pages;
        for (int64_t b = 0; b < s->B; b++) {
            c->npages[b] = (s->used[b] + s->page_size - 1) / s->page_size;
            if (!(s->share && b == 1)) c->num_pages += c->npages[b];
        }
        if (c->num_pages < 1) c->num_pages = 1;
        int32_t *perm = malloc(sizeof(int32_t) * (size_t)c->num_pages);
        for (int64_t x = 0; x < c->num_pages; x++) perm[x] = (int32_t)x;
        for (int64_t x = c->num_pages - 1; x > 0 && !s->in_order; x--) { /* shuffle */
            int64_t y = (int64_t)(tt_next(&r) % (uint64_t)(x + 1));
            int32_t t = perm[x]; perm[x] = perm[y]; perm[y] = t;
        }
        c->table = malloc(sizeof(int32_t) * (size_t)(s->B * c->table_stride + 1));
        for (int64_t x = 0; x < s->B * c->table_stride + 1; x++) c->table[x] = -5; /* never read */
        int64_t next = 0;
        for (int64_t b = 0; b < s->B; b++)
            for (int64_t pg = 0; pg < c->npages[b]; pg++)
                c->table[b * c->table_stride + pg] =
                    (s->share && b == 1) ? c->table[pg] : perm[next++];
        free(perm);
        c->k = v3_alloc(c->num_pages, s->page_size, s->Hkv, s->Dqk, 1, s->dt);
        c->v = v3_alloc(c->num_pages, s->page_size, s->Hkv, s->Dv, 0, s->dt);
        c->dk = v3_alloc(c->num_pages, s->page_size, s->Hkv, s->Dqk, 0, s->dt);
        c->dv = v3_alloc(c->num_pages, s->page_size, s->Hkv, s->Dv, 2, s->dt);
    } else {
        const int64_t rows_k = s->kv == V3_KV_PACKED ? c->total_k : maxalloc;
        const int64_t bk = s->kv == V3_KV_PACKED ? 1 : s->B;
        c->k = v3_alloc(bk, rows_k, s->Hkv, s->Dqk, 1, s->dt);
        c->v = v3_alloc(bk, rows_k, s->Hkv, s->Dv, 0, s->dt);
        c->dk = v3_alloc(bk, rows_k, s->Hkv, s->Dqk, 0, s->dt);
        c->dv = v3_alloc(bk, rows_k, s->Hkv, s->Dv, 2, s->dt);
        if (s->kv == V3_KV_PACKED) { c->k.st[0] = 5; c->dv.st[0] = 1 << 20; }
    }
    /* K elements never to be read hold a finite 16 rather than NaN: a NaN score is hidden
     * by the max (NaN > m is false), 16 shifts the softmax visibly (V stays NaN) */
    for (size_t x = 0; x < c->k.n; x++) c->k.p[x] = s->dt == FA_BF16 ? 0x4180 : 0x4c00;
    /* copy the sequences in (K/V only for the used keys; everything else stays NaN / 16) */
    for (int64_t b = 0; b < s->B; b++) {
        const tt_case *d = &c->dense[b];
        for (int64_t i = 0; i < s->sq[b]; i++)
            for (int64_t h = 0; h < s->Hq; h++) {
                for (int64_t x = 0; x < s->Dqk; x++)
                    c->q.p[v3_qoff(c, c->q.st, b, i, h) + (size_t)x] = d->q.buf[tt_off(&d->q, 0, i, h, x)];
                for (int64_t x = 0; x < s->Dv; x++)
                    c->dout.p[v3_qoff(c, c->dout.st, b, i, h) + (size_t)x] = d->dout.buf[tt_off(&d->dout, 0, i, h, x)];
            }
        for (int64_t j = 0; j < s->used[b]; j++)
            for (int64_t h = 0; h < s->Hkv; h++) {
                for (int64_t x = 0; x < s->Dqk; x++)
                    c->k.p[v3_koff(c, c->k.st, b, j, h) + (size_t)x] = d->k.buf[tt_off(&d->k, 0, j, h, x)];
                for (int64_t x = 0; x < s->Dv; x++)
                    c->v.p[v3_koff(c, c->v.st, b, j, h) + (size_t)x] = d->v.buf[tt_off(&d->v, 0, j, h, x)];
            }
    }
    c->p = v3_seq_problem(s, rows_q, s->kv == V3_KV_PAGED ? maxused : maxalloc);
    c->p.batch = s->B;
    c->p.seqlen_q = maxq;
    if (s->kv == V3_KV_PAGED) c->p.page_size = s->page_size;
}

static TT_UNUSED fa_fwd_args v3_fwd_args(v3_case *c) {
    fa_fwd_args a;
    memset(&a, 0, sizeof(a));
    a.p = c->p;
    a.q = v3_view(&c->q); a.k = v3_view(&c->k); a.v = v3_view(&c->v); a.o = v3_view(&c->o);
    a.lse.ptr = c->lse;
    memcpy(a.lse.stride, c->lse_st, sizeof(a.lse.stride));
    if (c->s.packed_q) a.varlen.cu_seqlens_q = c->cu_q;
    if (c->s.kv == V3_KV_PACKED) a.varlen.cu_seqlens_k = c->cu_k;
    if (c->s.seqused) a.varlen.seqused_k = c->used;
    if (c->s.kv == V3_KV_PAGED) {
        a.paged.block_table = c->table; a.paged.table_stride = c->table_stride;
        a.paged.max_pages_per_seq = c->max_pages; a.paged.num_pages = c->num_pages;
    }
    if (c->s.sinks) a.sinks = c->sinks;
    return a;
}

static TT_UNUSED fa_bwd_args v3_bwd_args(v3_case *c) {
    fa_fwd_args f = v3_fwd_args(c);
    fa_bwd_args a;
    memset(&a, 0, sizeof(a));
    a.p = f.p; a.q = f.q; a.k = f.k; a.v = f.v; a.o = f.o; a.lse = f.lse;
    a.dout = v3_view(&c->dout); a.dq = v3_view(&c->dq); a.dk = v3_view(&c->dk); a.dv = v3_view(&c->dv);
    a.varlen = f.varlen; a.paged = f.paged; a.sinks = f.sinks;
    if (c->s.sinks) { a.dsinks = c->dsinks; for (int64_t h = 0; h < c->s.Hq; h++) c->dsinks[h] = NAN; }
    a.deterministic = 1;
    return a;
}

/* Run the combined forward + backward and every sequence's dense forward + backward on
 * backend be (the backward of each gets its own forward's O and LSE). FA_OK or the first
 * failing status (err filled). */
static TT_UNUSED fa_status v3_run(v3_case *c, const fa_backend *be, fa_error *err) {
    fa_fwd_args fa = v3_fwd_args(c);
    fa_status st = be->forward(&fa, err);
    if (st != FA_OK) return st;
    fa_bwd_args ba = v3_bwd_args(c);
    if ((st = be->backward(&ba, err)) != FA_OK) return st;
    for (int64_t b = 0; b < c->s.B; b++) {
        tt_case *d = &c->dense[b];
        fa_fwd_args df = tt_fwd_args(d);
        if (c->s.sinks) df.sinks = c->sinks;
        if ((st = be->forward(&df, err)) != FA_OK) return st;
        fa_bwd_args db = tt_bwd_args(d);
        if (c->s.sinks) { db.sinks = c->sinks; db.dsinks = c->dense_dsinks[b]; }
        if ((st = be->backward(&db, err)) != FA_OK) return st;
    }
    return FA_OK;
}

/* Bitwise disagreements between the combined call and the dense sequences (0 = identical).
 * Shared sequences (0 and 1 with share) are left out of the dK/dV comparison. */
static TT_UNUSED long v3_compare(const v3_case *c, int verbose) {
    const v3_spec *s = &c->s;
    long bad = 0;
#define V3_NOTE(what, b, i, h, x, got, want)                                                          \
    do {                                                                                              \
        if (verbose && bad < 5)                                                                       \
            print_message("    %s seq %lld row %lld head %lld [%lld]: 0x%x != dense 0x%x\n", what,    \
                          (long long)(b), (long long)(i), (long long)(h), (long long)(x),             \
                          (unsigned)(got), (unsigned)(want));                                         \
        bad++;                                                                                        \
    } while (0)
    for (int64_t b = 0; b < s->B; b++) {
        const tt_case *d = &c->dense[b];
        for (int64_t h = 0; h < s->Hq; h++)
            for (int64_t i = 0; i < s->sq[b]; i++) {
                uint32_t g, w;
                memcpy(&g, &c->lse[v3_lseoff(c, b, h, i)], 4);
                memcpy(&w, &d->lse[h * s->sq[b] + i], 4);
                if (g != w) V3_NOTE("lse", b, i, h, 0, g, w);
                for (int64_t x = 0; x < s->Dv; x++) {
                    uint16_t go = c->o.p[v3_qoff(c, c->o.st, b, i, h) + (size_t)x], wo = d->o.buf[tt_off(&d->o, 0, i, h, x)];
                    if (go != wo) V3_NOTE("o", b, i, h, x, go, wo);
                }
                for (int64_t x = 0; x < s->Dqk; x++) {
                    uint16_t gq = c->dq.p[v3_qoff(c, c->dq.st, b, i, h) + (size_t)x], wq = d->dq.buf[tt_off(&d->dq, 0, i, h, x)];
                    if (gq != wq) V3_NOTE("dq", b, i, h, x, gq, wq);
                }
            }
        if (s->share && b <= 1) continue;
        const int64_t keys = s->kv == V3_KV_PAGED ? s->used[b] : (s->kv == V3_KV_PACKED ? s->alloc[b] : c->p.seqlen_k);
        for (int64_t j = 0; j < keys; j++)
            for (int64_t h = 0; h < s->Hkv; h++) {
                for (int64_t x = 0; x < s->Dqk; x++) {
                    uint16_t g = c->dk.p[v3_koff(c, c->dk.st, b, j, h) + (size_t)x];
                    uint16_t w = j < s->used[b] ? d->dk.buf[tt_off(&d->dk, 0, j, h, x)] : 0;
                    if (g != w) V3_NOTE("dk", b, j, h, x, g, w);
                }
                for (int64_t x = 0; x < s->Dv; x++) {
                    uint16_t g = c->dv.p[v3_koff(c, c->dv.st, b, j, h) + (size_t)x];
                    uint16_t w = j < s->used[b] ? d->dv.buf[tt_off(&d->dv, 0, j, h, x)] : 0;
                    if (g != w) V3_NOTE("dv", b, j, h, x, g, w);
                }
            }
    }
    if (s->kv == V3_KV_PAGED) { /* pages no sequence uses: dK = dV = 0 */
        char *usedp = calloc((size_t)c->num_pages, 1);
        for (int64_t b = 0; b < s->B; b++)
            for (int64_t pg = 0; pg < c->npages[b]; pg++) usedp[c->table[b * c->table_stride + pg]] = 1;
        for (int64_t pg = 0; pg < c->num_pages; pg++) {
            if (usedp[pg]) continue;
            for (int64_t sl = 0; sl < s->page_size; sl++)
                for (int64_t h = 0; h < s->Hkv; h++) {
                    for (int64_t x = 0; x < s->Dqk; x++) {
                        uint16_t g = c->dk.p[(size_t)(pg * c->dk.st[0] + sl * c->dk.st[1] + h * c->dk.st[2] + x)];
                        if (g != 0) V3_NOTE("dk unused page", pg, sl, h, x, g, 0);
                    }
                    for (int64_t x = 0; x < s->Dv; x++) {
                        uint16_t g = c->dv.p[(size_t)(pg * c->dv.st[0] + sl * c->dv.st[1] + h * c->dv.st[2] + x)];
                        if (g != 0) V3_NOTE("dv unused page", pg, sl, h, x, g, 0);
                    }
                }
        }
        free(usedp);
    }
    if (s->sinks) /* combined = -(sum_b part_b), dense_b = 0 - part_b: rebuild the sum in order */
        for (int64_t h = 0; h < s->Hq; h++) {
            float sum = 0.0f;
            for (int64_t b = 0; b < s->B; b++) sum += -c->dense_dsinks[b][h];
            float want = 0.0f - sum;
            uint32_t g, w;
            memcpy(&g, &c->dsinks[h], 4);
            memcpy(&w, &want, 4);
            if (g != w) V3_NOTE("dsinks", 0, 0, h, 0, g, w);
        }
#undef V3_NOTE
    return bad;
}

/* Out-of-bound elements of the dense sequences' outputs against the fp64 reference and its
 * derived bounds (api_test_ref.h, incl. S1/S2): O, LSE, dQ, dK, dV, dsinks. */
static TT_UNUSED long v3_ref_violations(const v3_case *c, int verbose) {
    const v3_spec *s = &c->s;
    const int bf16 = s->dt == FA_BF16;
    long bad = 0;
    for (int64_t b = 0; b < s->B; b++) {
        const tt_case *d = &c->dense[b];
        const fa_problem *p = &d->p;
        ref_in in = ref_from_case(d);
        in.sinks = c->sinks;
        const size_t no = (size_t)(p->seqlen_q * p->heads_q * p->head_dim_v) + 1;
        const size_t nl = (size_t)(p->seqlen_q * p->heads_q) + 1;
        const size_t nq = (size_t)(p->seqlen_q * p->heads_q * p->head_dim_qk) + 1;
        const size_t nk = (size_t)(p->seqlen_k * p->heads_kv * p->head_dim_qk) + 1;
        const size_t nv = (size_t)(p->seqlen_k * p->heads_kv * p->head_dim_v) + 1;
        double *o = malloc(no * 8), *to = malloc(no * 8), *l = malloc(nl * 8), *tl = malloc(nl * 8);
        double *dq = malloc(nq * 8), *tq = malloc(nq * 8), *dk = malloc(nk * 8), *tk = malloc(nk * 8);
        double *dv = malloc(nv * 8), *tv = malloc(nv * 8), ds[64], tds[64];
        ref_forward(&in, (ref_fwd_out){o, l, to, tl});
        ref_backward(&in, o, to, tl, (ref_bwd_out){dq, dk, dv, tq, tk, tv, ds, tds});
#define V3_CHECK(what, got, want, tol)                                                              \
        do {                                                                                        \
            double g_ = (got), w_ = (want), t_ = (tol);                                             \
            int ok_ = (g_ == w_) || fabs(g_ - w_) <= t_;                                            \
            if (!ok_) {                                                                             \
                if (verbose && bad < 5)                                                             \
                    print_message("    seq %lld %s: got %.9g want %.12g |err| %.3g > %.3g\n",       \
                                  (long long)b, what, g_, w_, fabs(g_ - w_), t_);                   \
                bad++;                                                                              \
            }                                                                                       \
        } while (0)
        for (int64_t i = 0; i < p->seqlen_q; i++)
            for (int64_t h = 0; h < p->heads_q; h++) {
                V3_CHECK("lse", d->lse[h * p->seqlen_q + i], l[REF_L_IDX(p, 0, h, i)], tl[REF_L_IDX(p, 0, h, i)]);
                for (int64_t x = 0; x < p->head_dim_v; x++)
                    V3_CHECK("o", tt_get(&d->o, 0, i, h, x, bf16), o[REF_O_IDX(p, 0, i, h, x)], to[REF_O_IDX(p, 0, i, h, x)]);
                for (int64_t x = 0; x < p->head_dim_qk; x++)
                    V3_CHECK("dq", tt_get(&d->dq, 0, i, h, x, bf16), dq[REF_DQ_IDX(p, 0, i, h, x)], tq[REF_DQ_IDX(p, 0, i, h, x)]);
            }
        for (int64_t j = 0; j < p->seqlen_k; j++)
            for (int64_t h = 0; h < p->heads_kv; h++) {
                for (int64_t x = 0; x < p->head_dim_qk; x++)
                    V3_CHECK("dk", tt_get(&d->dk, 0, j, h, x, bf16), dk[REF_DK_IDX(p, 0, j, h, x)], tk[REF_DK_IDX(p, 0, j, h, x)]);
                for (int64_t x = 0; x < p->head_dim_v; x++)
                    V3_CHECK("dv", tt_get(&d->dv, 0, j, h, x, bf16), dv[REF_DV_IDX(p, 0, j, h, x)], tv[REF_DV_IDX(p, 0, j, h, x)]);
            }
        if (s->sinks)
            for (int64_t h = 0; h < p->heads_q; h++) V3_CHECK("dsinks", c->dense_dsinks[b][h], ds[h], tds[h]);
#undef V3_CHECK
        free(o); free(to); free(l); free(tl); free(dq); free(tq); free(dk); free(tk); free(dv); free(tv);
        ref_free(&in);
    }
    return bad;
}

/* Shared pages (share: sequences 0 and 1 map the same pages): the pool's dK/dV must lie
 * within the sum of the two references and their bounds, plus one fp32 addition (u) on
 * the two unrounded accumulators (each bound already contains a dtype rounding, which the
 * shared path does once instead of twice) and the final rounding. */
static TT_UNUSED long v3_shared_violations(const v3_case *c, int verbose) {
    const v3_spec *s = &c->s;
    const int bf16 = s->dt == FA_BF16;
    long bad = 0;
    double *r[2][4];
    const fa_problem *p0 = &c->dense[0].p;
    const size_t nk = (size_t)(p0->seqlen_k * p0->heads_kv * p0->head_dim_qk) + 1;
    const size_t nv = (size_t)(p0->seqlen_k * p0->heads_kv * p0->head_dim_v) + 1;
    for (int b = 0; b < 2; b++) {
        const tt_case *d = &c->dense[b];
        const fa_problem *p = &d->p;
        ref_in in = ref_from_case(d);
        in.sinks = c->sinks;
        const size_t no = (size_t)(p->seqlen_q * p->heads_q * p->head_dim_v) + 1;
        const size_t nl = (size_t)(p->seqlen_q * p->heads_q) + 1;
        const size_t nq = (size_t)(p->seqlen_q * p->heads_q * p->head_dim_qk) + 1;
        double *o = malloc(no * 8), *to = malloc(no * 8), *l = malloc(nl * 8), *tl = malloc(nl * 8);
        double *dq = malloc(nq * 8), *tq = malloc(nq * 8);
        for (int t = 0; t < 4; t++) r[b][t] = malloc((t < 2 ? nk : nv) * 8);
        ref_forward(&in, (ref_fwd_out){o, l, to, tl});
        ref_backward(&in, o, to, tl, (ref_bwd_out){dq, r[b][0], r[b][2], tq, r[b][1], r[b][3], NULL, NULL});
        free(o); free(to); free(l); free(tl); free(dq); free(tq);
        ref_free(&in);
    }
    const double ud = ref_ud(p0), out_abs = ref_out_abs(p0);
    for (int64_t j = 0; j < s->used[0]; j++)
        for (int64_t h = 0; h < s->Hkv; h++)
            for (int t = 0; t < 2; t++) {
                const int64_t D = t == 0 ? s->Dqk : s->Dv;
                const v3_buf *out = t == 0 ? &c->dk : &c->dv;
                for (int64_t x = 0; x < D; x++) {
                    const size_t ri = (size_t)((j * s->Hkv + h) * D + x);
                    const double w = r[0][2 * t][ri] + r[1][2 * t][ri];
                    const double e = r[0][2 * t + 1][ri] + r[1][2 * t + 1][ri];
                    const double a = fabs(r[0][2 * t][ri]) + fabs(r[1][2 * t][ri]) + e;
                    const double tol = 1.01 * (e + 2 * REF_U * a + ud * (fabs(w) + e + 2 * REF_U * a) + out_abs);
                    const double g = fa_cpu_to_f32(out->p[v3_koff(c, out->st, 0, j, h) + (size_t)x], bf16);
                    if (!(fabs(g - w) <= tol)) {
                        if (verbose && bad < 5)
                            print_message("    shared %s key %lld: got %.9g want %.12g > %.3g\n", t ? "dv" : "dk",
                                          (long long)j, g, w, tol);
                        bad++;
                    }
                }
            }
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 4; t++) free(r[b][t]);
    return bad;
}

static TT_UNUSED void v3_free(v3_case *c) {
    for (int64_t b = 0; b < c->s.B; b++) tt_case_free(&c->dense[b]);
    v3_buf *bufs[8] = {&c->q, &c->k, &c->v, &c->o, &c->dout, &c->dq, &c->dk, &c->dv};
    for (int i = 0; i < 8; i++) free(bufs[i]->p);
    free(c->lse);
    free(c->table);
}
#endif /* FLASHCHECK_API_TEST_V3_H */
