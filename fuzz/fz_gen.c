/* fz_gen.c: biased case generation, byte decoding, mutation and fitting.
 * See fz_gen.h. No floating-point results are computed here except the
 * (exactly representable) parameter choices below. */
#include "fuzz/fz_gen.h"

#include <string.h>

/* ------------------------------------------------------------------------- */
/* PRNG (xorshift64*)                                                        */

void fz_rng_seed(fz_rng *r, uint64_t seed)
{
    r->s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    if (r->s == 0) r->s = 1;
}

uint64_t fz_rng_next(fz_rng *r)
{
    uint64_t x = r->s;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

uint64_t fz_rng_below(fz_rng *r, uint64_t n)
{
    return n ? fz_rng_next(r) % n : 0;
}

void fz_budget_default(fz_budget *b)
{
    b->max_batch = 3;
    b->max_heads_q = 8;
    b->max_seq = 256;
    b->max_head_dim = 128;
    b->max_work = (int64_t)1 << 24;
    b->max_scores = (int64_t)1 << 62;
    b->backward = -1;
}

int fz_budget_preset(const char *name, fz_budget *b)
{
    int bwd = b->backward;
    if (strcmp(name, "small") == 0) {
        fz_budget_default(b);
    } else if (strcmp(name, "production") == 0) {
        b->max_batch = 4;
        b->max_heads_q = 16;
        b->max_seq = 16384;
        b->max_head_dim = 128;
        b->max_work = (int64_t)1 << 37;
        b->max_scores = (int64_t)1 << 29;
    } else {
        return -1;
    }
    b->backward = bwd;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* entropy source: either a PRNG or the tail of a byte string                */

typedef struct {
    fz_rng *rng;            /* non-NULL: draw from it */
    const uint8_t *data;    /* else: consume bytes from the end */
    size_t size;
} fz_src;

/* A value in [0, n). From bytes: the fewest whole bytes that cover n, read
 * from the end; an exhausted input yields 0 (the first choice of each table,
 * which is the plain, common case). */
static uint64_t src_below(fz_src *s, uint64_t n)
{
    if (n <= 1) return 0;
    if (s->rng) return fz_rng_below(s->rng, n);
    uint64_t v = 0;
    int bytes = n <= 256 ? 1 : n <= 65536 ? 2 : 8;
    for (int i = 0; i < bytes && s->size > 0; i++) v = (v << 8) | s->data[--s->size];
    return v % n;
}

#define PICK(s, table) (table[src_below((s), sizeof(table) / sizeof(table[0]))])

/* ------------------------------------------------------------------------- */
/* biased field choices                                                      */

static const int64_t fz_tiles[] = { 16, 32, 64, 128, 256 };
static const int64_t fz_primes[] = { 2, 3, 5, 7, 11, 13, 17, 31, 37, 61, 97, 113, 127, 131, 193, 251 };

/* a sequence length: 0, 1, a tile size +-1, a prime, small, or uniform */
static int64_t pick_len(fz_src *s)
{
    switch (src_below(s, 10)) {
    case 0: return 1 + (int64_t)src_below(s, 64);                 /* small, common */
    case 1: return 0;
    case 2: return 1;
    case 3: case 4: case 5: {
        int64_t t = PICK(s, fz_tiles);
        return t - 1 + (int64_t)src_below(s, 3);                  /* t-1, t, t+1 */
    }
    case 6: case 7: return PICK(s, fz_primes);
    case 8: return 2 * PICK(s, fz_tiles) - 1 + (int64_t)src_below(s, 3);
    default: return (int64_t)src_below(s, 257);
    }
}

static const int64_t fz_head_dims[] = { 32, 64, 128, 16, 8, 24, 40, 48, 56, 72, 80, 96, 104, 112, 120, 160, 192, 256 };

static int64_t pick_head_dim(fz_src *s)
{
    switch (src_below(s, 6)) {
    case 0: case 1: case 2: case 3: return PICK(s, fz_head_dims);
    case 4: return 1 + (int64_t)src_below(s, 16);                 /* tiny, odd */
    default: return 1 + (int64_t)src_below(s, 256);
    }
}

static const int64_t fz_windows[] = { -1, 0, 1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 255 };
static const float fz_scales[] = { 0.0f, 0.0f, 0.0f, 0.125f, 0.0625f, 1.0f, 0.5f, 2.0f, 8.0f, 0.001f, 1.0f / 1024 };
static const double fz_densities[] = { 0.0, 0.05, 0.3, 0.5, 0.9, 0.99, 1.0 };
static const double fz_amps[] = { 0.0, 0.0, 0.0, 0.5, 4.0, 30.0, 1000.0 };
static const double fz_probs[] = { 0.0, 0.0, 0.01, 0.5, 0.99 };
static const int64_t fz_pads[] = { 1, 2, 3, 7, 8 };
static const int64_t fz_offsets[] = { 1, 2, 3, 7, 8, 64 };
static const int64_t fz_batches[] = { 1, 1, 2, 3 };
static const int64_t fz_kv_heads[] = { 1, 1, 2, 3 };
static const int64_t fz_groups[] = { 1, 1, 2, 3, 4, 8 };
static const int64_t fz_widths[] = { 0, 1, 2, 4, 16, 64 };
static const int64_t fz_shifts[] = { 1, 0, 2, 3 };

static void pick_shape(fz_src *s, fc_case *c)
{
    c->p.batch = PICK(s, fz_batches);
    c->p.heads_kv = PICK(s, fz_kv_heads);
    c->p.heads_q = c->p.heads_kv * PICK(s, fz_groups);
    c->p.seqlen_q = pick_len(s);
    c->p.seqlen_k = src_below(s, 4) == 0 ? c->p.seqlen_q : pick_len(s);
    c->p.head_dim_qk = pick_head_dim(s);
    c->p.head_dim_v = src_below(s, 3) == 0 ? pick_head_dim(s) : c->p.head_dim_qk;
}

static void pick_causal(fz_src *s, fc_case *c)
{
    c->p.causal = (fa_causal)src_below(s, 3);
}

static void pick_window(fz_src *s, fc_case *c)
{
    int w = (int)src_below(s, 4);               /* 0: none, 1: left, 2: right, 3: both */
    c->p.window_left = (w & 1) ? PICK(s, fz_windows) : -1;
    c->p.window_right = (w & 2) ? PICK(s, fz_windows) : -1;
    c->p.window_align = (fa_align)src_below(s, 2);
}

static void pick_scale(fz_src *s, fc_case *c)
{
    c->p.softmax_scale = PICK(s, fz_scales);
}

static void pick_dtype(fz_src *s, fc_case *c)
{
    c->p.dtype = (fa_dtype)src_below(s, 2);
}

static void pick_mask(fz_src *s, fc_case *c)
{
    fc_mask_spec *m = &c->mask;
    memset(m, 0, sizeof *m);
    /* the kinds before RANDOM_MIXED: a later kind would change every generated case after this draw */
    m->kind = src_below(s, 3) == 0 ? FC_MASK_NONE : (fc_mask_kind)src_below(s, FC_MASK_RANDOM_MIXED);
    m->density = PICK(s, fz_densities);
    m->amp = src_below(s, 2) ? 0.0 : PICK(s, fz_amps);
    m->width = PICK(s, fz_widths);
    m->shift = PICK(s, fz_shifts);
    int bc = (int)src_below(s, 4);
    m->broadcast_batch = bc & 1;
    m->broadcast_heads = (bc >> 1) & 1;
}

/* A random permutation of 0..n-1 (Fisher-Yates), written into order[0..n-1]. */
static void pick_order(fz_src *s, int n, int order[4])
{
    for (int i = 0; i < 4; i++) order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)src_below(s, (uint64_t)i + 1);
        int t = order[i]; order[i] = order[j]; order[j] = t;
    }
}

static void pick_layout(fz_src *s, fc_case *c, int t)
{
    fc_layout *l = &c->layout[t];
    int n = t == FC_T_LSE ? 3 : 4;
    memset(l, 0, sizeof *l);
    for (int i = 0; i < 4; i++) l->order[i] = i;
    int kind = (int)src_below(s, 8);   /* 0..3 dense; 4 permuted; 5 gaps; 6 offset; 7 all three */
    if (kind == 4 || kind == 7) pick_order(s, n, l->order);
    if (kind == 5 || kind == 7) l->pad[src_below(s, (uint64_t)n)] = PICK(s, fz_pads);
    if (kind == 6 || kind == 7) l->offset = PICK(s, fz_offsets);
}

static void pick_dist(fz_src *s, fc_case *c, int t)
{
    fc_dist *d = &c->dist[t];
    d->kind = src_below(s, 3) == 0 ? FC_DIST_GAUSSIAN : (fc_dist_kind)src_below(s, FC_DIST_COUNT);
    d->amp = src_below(s, 3) ? 0.0 : PICK(s, fz_amps);
    d->prob = PICK(s, fz_probs);
}

static void pick_all_dists(fz_src *s, fc_case *c)
{
    if (src_below(s, 2)) {             /* one distribution for all four inputs */
        pick_dist(s, c, FC_T_Q);
        for (int t = 1; t < FC_N_DIST_INPUTS; t++) c->dist[t] = c->dist[FC_T_Q];
    } else {
        for (int t = 0; t < FC_N_DIST_INPUTS; t++) pick_dist(s, c, t);
    }
}

static void pick_seed(fz_src *s, fc_case *c)
{
    c->seed = src_below(s, UINT64_MAX);
}

/* ------------------------------------------------------------------------- */
/* contract v3: packed sequences, seqused_k, paged caches, softcap, sinks     */

static const int64_t fz_page_sizes[] = { 16, 1, 3, 8, 64, 256, 5 };
static const float fz_softcaps[] = { 30.0f, 50.0f, 5.0f, 1.0f, 0.5f };

/* a per-sequence length in [0, max]: the maximum, 0, 1, or uniform */
static int64_t pick_seq_len(fz_src *s, int64_t max)
{
    switch (src_below(s, 5)) {
    case 0: return max;
    case 1: return 0;
    case 2: return max >= 1 ? 1 : 0;
    default: return max > 0 ? (int64_t)src_below(s, (uint64_t)max + 1) : 0;
    }
}

/* Block table of a paged case: the sequences' pages shuffled over the pool, some pages shared
 * (an entry repeating an earlier one), spare pages no sequence uses. */
static void pick_table(fz_src *s, fc_case *c)
{
    fc_v3 *v = &c->v3;
    const int64_t n = c->p.batch * v->max_pages;
    v->num_pages = n + (int64_t)src_below(s, 4);
    if (v->num_pages < 1) v->num_pages = 1;
    for (int64_t e = 0; e < n && e < FC_MAX_TABLE; e++) v->block_table[e] = (int32_t)e;
    for (int64_t e = n - 1; e > 0; e--) {          /* shuffle */
        int64_t f = (int64_t)src_below(s, (uint64_t)e + 1);
        int32_t t = v->block_table[e]; v->block_table[e] = v->block_table[f]; v->block_table[f] = t;
    }
    for (int64_t e = 1; e < n; e++)                /* shared pages */
        if (src_below(s, 6) == 1) v->block_table[e] = v->block_table[src_below(s, (uint64_t)e)];
}

/* Off (the common case, and an exhausted input) three times in four. */
static void pick_v3(fz_src *s, fc_case *c)
{
    fc_v3 *v = &c->v3;
    memset(v, 0, sizeof *v);
    v->sinks.kind = FC_DIST_GAUSSIAN;
    c->p.softcap = 0.0f;
    c->p.has_sinks = 0;
    c->p.page_size = 0;
    if (src_below(s, 4) != 3) return;
    const int64_t B = c->p.batch < FC_MAX_SEQS ? c->p.batch : FC_MAX_SEQS;
    int kv = (int)src_below(s, 3);                 /* 0: dense K, 1: packed K, 2: paged */
    v->varlen_q = (int)src_below(s, 2);
    for (int64_t b = 0; v->varlen_q && b < B; b++) v->seqlens_q[b] = pick_seq_len(s, c->p.seqlen_q);
    if (kv == 1) {
        v->varlen_k = 1;
        for (int64_t b = 0; b < B; b++) v->seqlens_k[b] = pick_seq_len(s, c->p.seqlen_k);
    }
    if (kv == 2) {
        c->p.page_size = PICK(s, fz_page_sizes);
        v->max_pages = (c->p.seqlen_k + c->p.page_size - 1) / c->p.page_size + (int64_t)src_below(s, 2);
        if (v->max_pages < 1) v->max_pages = 1;
        v->table_pad = (int64_t)src_below(s, 4);
    }
    v->has_seqused = (int)src_below(s, 2);         /* caches longer than used */
    for (int64_t b = 0; v->has_seqused && b < B; b++) {
        int64_t cap = fc_case_seq_alloc(c, b) < c->p.seqlen_k ? fc_case_seq_alloc(c, b) : c->p.seqlen_k;
        v->seqused_k[b] = pick_seq_len(s, cap);
    }
    if (kv == 2 && v->max_pages <= FC_MAX_PAGES && B * v->max_pages <= FC_MAX_TABLE) pick_table(s, c);
    if (src_below(s, 4) == 1) c->p.softcap = PICK(s, fz_softcaps);
    if (src_below(s, 4) == 1) {
        c->p.has_sinks = 1;
        v->sinks.kind = src_below(s, 3) == 0 ? FC_DIST_LARGE : FC_DIST_GAUSSIAN;
    }
}

/* The v3 draws of a PRNG source come from a side stream keyed by the main one's state (read,
 * not advanced): a backend that claims no v3 feature sees exactly the pre-v3 sequence of cases
 * and mutations (fz_case_fit drops the features it does not claim). */
static fz_rng side_stream(const fz_rng *r, uint64_t salt)
{
    fz_rng t = { (r->s ^ salt) | 1 };
    fz_rng_next(&t);
    return t;
}

static void pick_case(fz_src *s, fc_case *c)
{
    fc_case_default(c);
    pick_shape(s, c);
    pick_dtype(s, c);
    pick_causal(s, c);
    if (src_below(s, 3) == 0) pick_window(s, c);
    pick_scale(s, c);
    pick_mask(s, c);
    int layouts = (int)src_below(s, 3);     /* 0: all dense, 1: some, 2: all drawn */
    for (int t = 0; t < FC_T_COUNT && layouts; t++)
        if (layouts == 2 || src_below(s, 3) == 0) pick_layout(s, c, t);
    pick_all_dists(s, c);
    c->backward = (int)src_below(s, 2);
    c->deterministic = (int)src_below(s, 2);
    pick_seed(s, c);
    if (s->rng) {                           /* last: earlier fields decode as before */
        fz_rng side = side_stream(s->rng, 0x76335F67656E3031ull);
        fz_src s3 = { &side, NULL, 0 };
        pick_v3(&s3, c);
    } else {
        pick_v3(s, c);
    }
}

void fz_case_from_bytes(const uint8_t *data, size_t size, fc_case *c)
{
    fz_src s = { NULL, data, size };
    pick_case(&s, c);
}

void fz_case_random(fz_rng *r, fc_case *c)
{
    fz_src s = { r, NULL, 0 };
    pick_case(&s, c);
}

/* ------------------------------------------------------------------------- */
/* mutation                                                                  */

static int64_t nudge(fz_src *s, int64_t v)
{
    static const int64_t deltas[] = { -1, 1, -2, 2, -16, 16 };
    int64_t r = v + PICK(s, deltas);
    return r < 0 ? 0 : r;
}

/* one contract-v3 mutation */
static void mutate_v3(fz_rng *r3, fz_src *s3, fc_case *c)
{
    switch (fz_rng_below(r3, 5) + 20) {
        case 20: pick_v3(s3, c); break;
        case 21: {                          /* one sequence: empty, a single row/key, nudged */
            int64_t b = (int64_t)fz_rng_below(r3, (uint64_t)(c->p.batch > 0 ? c->p.batch : 1)) % FC_MAX_SEQS;
            int64_t *len = fz_rng_below(r3, 2) ? c->v3.seqlens_q : c->v3.seqlens_k;
            int64_t x = fz_rng_below(r3, 3);
            len[b] = x == 2 ? nudge(s3, len[b]) : x;
            break;
        }
        case 22: {                          /* a cache longer than used */
            int64_t b = (int64_t)fz_rng_below(r3, (uint64_t)(c->p.batch > 0 ? c->p.batch : 1)) % FC_MAX_SEQS;
            c->v3.has_seqused = 1;
            c->v3.seqused_k[b] = (int64_t)fz_rng_below(r3, (uint64_t)c->v3.seqused_k[b] + 2);
            break;
        }
        case 23: if (c->p.page_size >= 1 && c->v3.max_pages <= FC_MAX_PAGES &&
                     c->p.batch * c->v3.max_pages <= FC_MAX_TABLE) pick_table(s3, c);
            break;
        case 24:
            if (fz_rng_below(r3, 2)) c->p.softcap = c->p.softcap > 0 ? 0.0f : PICK(s3, fz_softcaps);
            else c->p.has_sinks = !c->p.has_sinks;
            break;
    }
}

void fz_case_mutate(fz_rng *r, fc_case *c)
{
    fz_src s = { r, NULL, 0 };
    c->gen = FC_GEN_LATEST; /* a mutant is a new case: the latest input generator (case.h) */
    int n = 1 + (int)fz_rng_below(r, 3);
    for (int k = 0; k < n; k++) {
        switch (fz_rng_below(r, 20)) {
        case 0: c->p.seqlen_q = pick_len(&s); break;
        case 1: c->p.seqlen_k = pick_len(&s); break;
        case 2: c->p.seqlen_q = nudge(&s, c->p.seqlen_q); break;
        case 3: c->p.seqlen_k = nudge(&s, c->p.seqlen_k); break;
        case 4: c->p.head_dim_qk = pick_head_dim(&s); if (fz_rng_below(r, 2)) c->p.head_dim_v = c->p.head_dim_qk; break;
        case 5: c->p.head_dim_v = pick_head_dim(&s); break;
        case 6: {
            int64_t g = c->p.heads_kv > 0 ? c->p.heads_q / c->p.heads_kv : 1;
            if (fz_rng_below(r, 2)) c->p.heads_kv = PICK(&s, fz_kv_heads);
            else g = PICK(&s, fz_groups);
            c->p.heads_q = c->p.heads_kv * (g > 0 ? g : 1);
            break;
        }
        case 7: c->p.batch = PICK(&s, fz_batches); break;
        case 8: pick_dtype(&s, c); break;
        case 9: pick_causal(&s, c); break;
        case 10: pick_window(&s, c); break;
        case 11: pick_scale(&s, c); break;
        case 12: pick_mask(&s, c); break;
        case 13: pick_layout(&s, c, (int)fz_rng_below(r, FC_T_COUNT)); break;
        case 14: pick_dist(&s, c, (int)fz_rng_below(r, FC_N_DIST_INPUTS)); break;
        case 15: pick_all_dists(&s, c); break;
        case 16: c->backward = !c->backward; break;
        case 17: c->deterministic = !c->deterministic; break;
        case 18: pick_shape(&s, c); break;
        default: pick_seed(&s, c); break;
        }
    }
    /* contract v3: one op in six, from the side stream */
    fz_rng side = side_stream(r, 0x76335F6D75743031ull);
    if (fz_rng_below(&side, 6) != 0) return;
    fz_src s3 = { &side, NULL, 0 };
    mutate_v3(&side, &s3, c);
}

void fz_case_crossover(fz_rng *r, const fc_case *a, const fc_case *b, fc_case *out)
{
    *out = *a;
    out->gen = FC_GEN_LATEST; /* a new case: the latest input generator */
    if (fz_rng_below(r, 2)) {
        out->p.batch = b->p.batch; out->p.heads_q = b->p.heads_q; out->p.heads_kv = b->p.heads_kv;
        out->p.seqlen_q = b->p.seqlen_q; out->p.seqlen_k = b->p.seqlen_k;
        out->p.head_dim_qk = b->p.head_dim_qk; out->p.head_dim_v = b->p.head_dim_v;
    }
    if (fz_rng_below(r, 2)) {
        out->p.causal = b->p.causal; out->p.window_left = b->p.window_left;
        out->p.window_right = b->p.window_right; out->p.window_align = b->p.window_align;
    }
    if (fz_rng_below(r, 2)) out->mask = b->mask;
    if (fz_rng_below(r, 2)) memcpy(out->layout, b->layout, sizeof out->layout);
    if (fz_rng_below(r, 2)) memcpy(out->dist, b->dist, sizeof out->dist);
    if (fz_rng_below(r, 2)) { out->p.dtype = b->p.dtype; out->p.softmax_scale = b->p.softmax_scale; }
    fz_rng side = side_stream(r, 0x76335F786F763031ull);
    if (fz_rng_below(&side, 2)) {
        out->v3 = b->v3;
        out->p.softcap = b->p.softcap; out->p.has_sinks = b->p.has_sinks; out->p.page_size = b->p.page_size;
    }
}

/* ------------------------------------------------------------------------- */
/* fitting into a budget and a backend's limits                              */

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* a head dim in [1, cap] that is a multiple of m (m >= 1, cap >= m) */
static int64_t fit_head_dim(int64_t d, int64_t cap, int64_t m)
{
    d = clamp64(d, 1, cap);
    if (m > 1) {
        d = (d + m - 1) / m * m;
        if (d > cap) d = cap / m * m;
        if (d < m) d = m;
    }
    return d;
}

static int is_4d_data(int t)
{
    return t != FC_T_MASK && t != FC_T_LSE;
}

/* Contract-v3 fields made consistent with the (fitted) shape and the backend's claims:
 * features the limits do not claim are dropped, lengths clamped to the maxima, the table
 * re-laid when the pages per sequence change, entries wrapped into the pool. */
static void fit_v3(fc_case *c, const fa_limits *lim)
{
    fa_problem *p = &c->p;
    fc_v3 *v = &c->v3;
    if (lim) {
        if (!lim->supports_varlen) v->varlen_q = v->varlen_k = v->has_seqused = 0;
        if (!lim->supports_paged) p->page_size = 0;
        if (!lim->supports_softcap) p->softcap = 0.0f;
        if (!lim->supports_sinks) p->has_sinks = 0;
    }
    if (!(p->softcap >= 0.0f && p->softcap <= 1e4f)) p->softcap = 0.0f;
    p->has_sinks = !!p->has_sinks;
    if ((unsigned)v->sinks.kind >= FC_DIST_COUNT) v->sinks.kind = FC_DIST_GAUSSIAN;
    if (!(v->sinks.amp >= 0.0 && v->sinks.amp <= 100.0)) v->sinks.amp = 0.0;
    if (p->page_size < 0) p->page_size = 0;
    if (p->page_size >= 1) v->varlen_k = 0;
    v->varlen_q = !!v->varlen_q; v->varlen_k = !!v->varlen_k; v->has_seqused = !!v->has_seqused;
    if (!fc_case_is_v3(c)) { memset(v, 0, sizeof *v); v->sinks.kind = FC_DIST_GAUSSIAN; return; }
    if (p->batch > FC_MAX_SEQS) p->batch = FC_MAX_SEQS;
    const int64_t B = p->batch;
    if (v->varlen_q || v->varlen_k) c->mask.kind = FC_MASK_NONE;
    for (int64_t k = 0; k < B; k++) {
        v->seqlens_q[k] = clamp64(v->seqlens_q[k], 0, p->seqlen_q);
        v->seqlens_k[k] = clamp64(v->seqlens_k[k], 0, p->seqlen_k);
    }
    if (p->page_size >= 1) {
        p->page_size = clamp64(p->page_size, 1, 4096);
        if ((p->seqlen_k + p->page_size - 1) / p->page_size > FC_MAX_PAGES)
            p->page_size = (p->seqlen_k + FC_MAX_PAGES - 1) / FC_MAX_PAGES;
        int64_t need = (p->seqlen_k + p->page_size - 1) / p->page_size;
        if (need < 1) need = 1;
        int64_t mp = clamp64(v->max_pages, need, FC_MAX_PAGES);
        while (B * mp > FC_MAX_TABLE && mp > need) mp--;
        v->num_pages = clamp64(v->num_pages, 1, 99999);
        if (mp != v->max_pages) { /* re-laid in order */
            v->max_pages = mp;
            for (int64_t e = 0; e < B * mp; e++) v->block_table[e] = (int32_t)(e % v->num_pages);
        }
        for (int64_t e = 0; e < B * mp; e++)
            v->block_table[e] = (int32_t)(((int64_t)v->block_table[e] % v->num_pages + v->num_pages) % v->num_pages);
        v->table_pad = clamp64(v->table_pad, 0, 8);
    }
    for (int64_t k = 0; k < B; k++) {
        int64_t cap = fc_case_seq_alloc(c, k) < p->seqlen_k ? fc_case_seq_alloc(c, k) : p->seqlen_k;
        v->seqused_k[k] = clamp64(v->seqused_k[k], 0, cap);
    }
}

static int64_t long_len(fz_rng *r, int64_t max)
{
    if (fz_rng_below(r, 4) == 0) return 1 + (int64_t)fz_rng_below(r, (uint64_t)max);
    int64_t l = (max >> fz_rng_below(r, 6)) - 1 + (int64_t)fz_rng_below(r, 3);
    return l < 1 ? 1 : l > max ? max : l;
}

void fz_case_stretch(fz_rng *r, fc_case *c, const fz_budget *b)
{
    if (b->max_seq <= 512 || fz_rng_below(r, 2)) return;
    c->p.seqlen_q = long_len(r, b->max_seq);
    c->p.seqlen_k = fz_rng_below(r, 2) ? c->p.seqlen_q : long_len(r, b->max_seq);
}

int fz_case_fit(fc_case *c, const fz_budget *b, const fa_limits *lim, int backend_has_backward)
{
    fa_problem *p = &c->p;
    p->dtype = p->dtype == FA_BF16 ? FA_BF16 : FA_F16;
    if ((unsigned)p->causal > FA_CAUSAL_BOTTOM_RIGHT) p->causal = FA_CAUSAL_NONE;
    if ((unsigned)p->window_align > FA_ALIGN_BOTTOM_RIGHT) p->window_align = FA_ALIGN_TOP_LEFT;
    if (!(p->softmax_scale == p->softmax_scale) || p->softmax_scale > 1e30f || p->softmax_scale < -1e30f)
        p->softmax_scale = 0.0f;

    /* shape */
    p->batch = clamp64(p->batch, 1, b->max_batch);
    p->heads_kv = clamp64(p->heads_kv, 1, b->max_heads_q);
    int64_t g = p->heads_q > 0 && p->heads_q % p->heads_kv == 0 ? p->heads_q / p->heads_kv : 1;
    g = clamp64(g, 1, b->max_heads_q / p->heads_kv);
    p->heads_q = p->heads_kv * g;
    p->seqlen_q = clamp64(p->seqlen_q, 0, b->max_seq);
    p->seqlen_k = clamp64(p->seqlen_k, 0, b->max_seq);
    int64_t dcap = b->max_head_dim, mult = 1;
    if (lim) {
        if (lim->max_head_dim > 0 && lim->max_head_dim < dcap) dcap = lim->max_head_dim;
        if (lim->head_dim_multiple > 1) mult = lim->head_dim_multiple;
    }
    if (dcap < mult) dcap = mult;
    p->head_dim_qk = fit_head_dim(p->head_dim_qk, dcap, mult);
    p->head_dim_v = fit_head_dim(p->head_dim_v, dcap, mult);
    if (lim && lim->dqk_must_equal_dv) p->head_dim_v = p->head_dim_qk;

    /* work budget: shrink batch, then heads, then the longer sequence */
    for (;;) {
        int64_t d = p->head_dim_qk > p->head_dim_v ? p->head_dim_qk : p->head_dim_v;
        int64_t sq = p->seqlen_q > 0 ? p->seqlen_q : 1, sk = p->seqlen_k > 0 ? p->seqlen_k : 1;
        /* 64-bit and saturating: production budgets (S up to 2^20, thousands of heads) overflow
           the plain product */
        int64_t w = p->batch, f[4] = { p->heads_q, sq, sk, d }, s = INT64_MAX;
        for (int k = 0; k < 4 && w <= b->max_work; k++) {
            if (k == 3) s = w;   /* B*Hq*Sq*Sk */
            if (__builtin_mul_overflow(w, f[k], &w)) w = INT64_MAX;
        }
        if (w <= b->max_work && s <= b->max_scores) break;
        if (p->batch > 1) p->batch--;
        else if (p->heads_q > p->heads_kv) p->heads_q -= p->heads_kv;
        else if (p->heads_kv > 1) p->heads_q = --p->heads_kv;
        else if (p->seqlen_q >= p->seqlen_k) p->seqlen_q /= 2;
        else p->seqlen_k /= 2;
    }

    /* windows are meaningful up to the sequence lengths; keep them small */
    p->window_left = p->window_left < 0 ? -1 : clamp64(p->window_left, 0, 4 * b->max_seq);
    p->window_right = p->window_right < 0 ? -1 : clamp64(p->window_right, 0, 4 * b->max_seq);

    /* mask parameters in range */
    fc_mask_spec *m = &c->mask;
    if ((unsigned)m->kind >= FC_MASK_COUNT) m->kind = FC_MASK_NONE;
    if (!(m->density >= 0.0 && m->density <= 1.0)) m->density = 0.0;
    if (!(m->amp >= 0.0 && m->amp <= 1e4)) m->amp = 0.0;
    m->width = clamp64(m->width, 0, 1024);
    m->shift = clamp64(m->shift, 0, 1024);
    m->broadcast_batch = !!m->broadcast_batch;
    m->broadcast_heads = !!m->broadcast_heads;

    /* distributions in range */
    for (int t = 0; t < FC_N_DIST_INPUTS; t++) {
        fc_dist *d = &c->dist[t];
        if ((unsigned)d->kind >= FC_DIST_COUNT) d->kind = FC_DIST_GAUSSIAN;
        if (!(d->amp >= 0.0 && d->amp <= 1e6)) d->amp = 0.0;
        if (!(d->prob >= 0.0 && d->prob <= 1.0)) d->prob = 0.0;
    }

    /* layouts: valid permutations, small pads, offsets that keep the backend's alignment */
    for (int t = 0; t < FC_T_COUNT; t++) {
        fc_layout *l = &c->layout[t];
        int n = t == FC_T_LSE ? 3 : 4, seen = 0, ok = 1;
        for (int i = 0; i < n; i++) {
            if (l->order[i] < 0 || l->order[i] >= n || (seen >> l->order[i]) & 1) ok = 0;
            else seen |= 1 << l->order[i];
        }
        if (!ok) for (int i = 0; i < 4; i++) l->order[i] = i;
        if (n == 3) { l->order[3] = 3; l->pad[3] = 0; }
        for (int i = 0; i < 4; i++) l->pad[i] = clamp64(l->pad[i], 0, 64);
        l->offset = clamp64(l->offset, 0, 4096);
        if (lim && is_4d_data(t)) {
            if (lim->unit_last_stride) {
                /* move dim 3 innermost, keep the relative order of the others */
                int k = 0, ord[4];
                for (int i = 0; i < 4; i++) if (l->order[i] != 3) ord[k++] = l->order[i];
                ord[3] = 3;
                memcpy(l->order, ord, sizeof ord);
                l->pad[3] = 0;
            }
            int64_t es = (int64_t)fa_dtype_size(p->dtype);
            int64_t align_elems = lim->ptr_align_bytes > es ? lim->ptr_align_bytes / es : 1;
            l->offset = l->offset / align_elems * align_elems;
        }
    }

    fit_v3(c, lim);

    if (!backend_has_backward || b->backward == 0) c->backward = 0;
    else if (b->backward == 1) c->backward = 1;
    else c->backward = !!c->backward;
    c->deterministic = !!c->deterministic;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* inputs                                                                    */

int fz_case_from_input(const uint8_t *data, size_t size, const fz_budget *b,
                       const fa_limits *lim, int backend_has_backward, fc_case *c)
{
    int parsed = 0;
    /* text form: must be NUL-free, bounded, and parse */
    if (size > 0 && size < 16384 && memchr(data, 0, size) == NULL) {
        char text[16384];
        memcpy(text, data, size);
        text[size] = 0;
        char msg[256];
        parsed = fc_case_parse(text, c, msg, sizeof msg) == 0;
    }
    if (!parsed) fz_case_from_bytes(data, size, c);
    fz_case_fit(c, b, lim, backend_has_backward);
    return parsed;
}

size_t fz_mutate_input(const uint8_t *in, size_t size, uint8_t *out, size_t max, uint64_t seed,
                       const fz_budget *b, const fa_limits *lim, int backend_has_backward)
{
    fc_case c;
    fz_rng r;
    fz_rng_seed(&r, seed);
    fz_case_from_input(in, size, b, lim, backend_has_backward, &c);
    if (fz_rng_below(&r, 16) == 0) fz_case_random(&r, &c);
    else fz_case_mutate(&r, &c);
    fz_case_fit(&c, b, lim, backend_has_backward);
    size_t need = fc_case_write(&c, (char *)out, max);
    return need < max ? need : 0;
}
