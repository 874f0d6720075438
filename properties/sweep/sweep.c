/* sweep.c: the fixed certification sweeps (sweep.h). */
#define _POSIX_C_SOURCE 200809L
#include "properties/sweep/sweep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fz_gen.h"
#include "properties/properties.h"

/* ------------------------------------------------------------------------- */
/* categories                                                                */

static const char *cat_names[FC_SWEEP_CAT_COUNT] = {
    "shapes", "causal", "window", "mask", "gqa", "layout", "values", "empty", "varlen", "paged", "softcap", "sinks",
    "properties",
    "cuda_grid", "cuda_leak", "cuda_determinism", "cuda_declined", "cuda_findings", "cuda_big", "production",
};
static const char *cat_what[FC_SWEEP_CAT_COUNT] = {
    "Sq, Sk at 0, 1, primes, tile sizes +-1; head dims 32..256",
    "top-left and bottom-right causal with Sq <, =, > Sk",
    "sliding windows at tile edges, decode (Sq = 1)",
    "additive masks: random -inf, stripes, fully masked rows/columns, finite, broadcast",
    "grouped-query and multi-query attention",
    "permuted dimension orders, stride gaps, storage offsets",
    "value distributions in fp16 and bf16 (large, tiny, sparse, heavy tail, spikes, ties)",
    "empty sequences (Sq = 0, Sk = 0)",
    "packed variable-length batches (sequences of 0, 1, tile +-1 tokens), seqused_k",
    "paged K/V caches: page sizes 1..256, shuffled, shared and spare pages, padded tables, decode rows",
    "logit softcapping (tanh) forward and backward",
    "attention sinks (a per-head logit in the denominator), dsinks, rows that see no key",
    "metamorphic relations (properties/properties.h)",
    "device grid: seqlens 1..4224 (Sq = Sk and not), head dims 8..256, 13 mask kinds, GQA 1/2/8, "
    "BHSD/padded/fused-QKV layouts, dO/dQ layouts, scales, empty, 76800 (batch, head) pairs",
    "NaN/Inf in K and V at keys hidden from a row inside tiles other rows see (leak property); one NaN/Inf "
    "in K, V, Q or dO at a time, every output judged by the oracle (nonfinite property)",
    "batch-heavy deterministic backward repeated 30 times (determinism property, 6 x 5 runs; 5 quick)",
    "layouts a device backend may decline (misaligned pointer, strides not a multiple of 8, head dim "
    "past the limit): correct or UNSUPPORTED with nothing written",
    "GPU fuzz findings replayed from their case text (fuzz/gpu_findings, fuzz/regressions)",
    "a Q/O (and dO/dQ) tensor of more than 2^31 elements (64-bit offsets)",
    "S >= 8k with GQA and causal masks; one call of more than 2^31 elements per tensor (S = 2048)",
};

const char *fc_sweep_cat_name(int cat) { return cat >= 0 && cat < FC_SWEEP_CAT_COUNT ? cat_names[cat] : "?"; }
const char *fc_sweep_cat_what(int cat) { return cat >= 0 && cat < FC_SWEEP_CAT_COUNT ? cat_what[cat] : "?"; }

int fc_sweep_cat_by_name(const char *name) {
    for (int i = 0; i < FC_SWEEP_CAT_COUNT; i++)
        if (strcmp(name, cat_names[i]) == 0) return i;
    return -1;
}

int fc_sweep_cat_set(int cat) {
    if (cat <= FC_SWEEP_PROPERTIES) return FC_SWEEP_SET_BASE;
    if (cat == FC_SWEEP_PRODUCTION) return FC_SWEEP_SET_PRODUCTION;
    return FC_SWEEP_SET_CUDA;
}

void fc_sweep_opts_default(fc_sweep_opts *o) {
    memset(o, 0, sizeof *o);
    o->sets = FC_SWEEP_SET_BASE;
    o->big = 1;
    o->has_bwd = 1;
}

/* ------------------------------------------------------------------------- */
/* the list                                                                  */

typedef struct {
    const fc_sweep_opts *o;
    fc_sweep_entry *e;
    int64_t n, cap;
    int oom;
} sweep_list;

static fc_sweep_entry *push(sweep_list *s, int cat, const fc_case *c, int prop, const char *label) {
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 256;
        fc_sweep_entry *e = realloc(s->e, (size_t)cap * sizeof *e);
        if (!e) { s->oom = 1; return NULL; }
        s->e = e;
        s->cap = cap;
    }
    fc_sweep_entry *x = &s->e[s->n++];
    memset(x, 0, sizeof *x);
    x->c = *c;
    x->category = cat;
    x->prop = prop;
    x->determinism = 1;
    x->expect = FC_SWEEP_EXPECT_PASS;
    snprintf(x->label, sizeof x->label, "%s", label ? label : "");
    return x;
}

/* BASE: fitted into the backend's limits only (no size budget), seed 1000 + position */
static void add_base(sweep_list *s, int cat, const fc_case *c, int prop) {
    fc_case f = *c;
    fz_budget b;
    fz_budget_default(&b);
    b.max_batch = b.max_heads_q = 1 << 12;
    b.max_seq = 1 << 20;
    b.max_head_dim = 1 << 12;
    b.max_work = INT64_MAX / 4;
    b.backward = -1;
    fz_case_fit(&f, &b, s->o->lim, s->o->has_bwd);
    f.seed = 1000 + (uint64_t)s->n;
    char label[120];
    snprintf(label, sizeof label, "%s B%lld Sq%lld Sk%lld H%lld/%lld D%lld/%lld", cat_names[cat], (long long)f.p.batch,
             (long long)f.p.seqlen_q, (long long)f.p.seqlen_k, (long long)f.p.heads_q, (long long)f.p.heads_kv,
             (long long)f.p.head_dim_qk, (long long)f.p.head_dim_v);
    push(s, cat, &f, prop, label);
}

static fc_case base_case(int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d, int bwd) {
    fc_case c;
    fc_case_default(&c);
    c.p.batch = b; c.p.seqlen_q = sq; c.p.seqlen_k = sk; c.p.heads_q = hq; c.p.heads_kv = hkv;
    c.p.head_dim_qk = c.p.head_dim_v = d;
    c.backward = bwd;
    return c;
}

/* ------------------------------------------------------------------------- */
/* BASE, contract v3: data and builders                                      */

/* sequences of a v3 case: per-sequence lengths (q, allocated k, used k; -1 ends) */
static void v3_set_seqs(fc_case *c, const int64_t *sq, const int64_t *sk, const int64_t *used) {
    int64_t B = 0, mq = 0, mk = 0;
    for (; sq[B] >= 0; B++) {
        if (sq[B] > mq) mq = sq[B];
        if (sk && sk[B] > mk) mk = sk[B];
        if (used && used[B] > mk && !sk) mk = used[B];
    }
    c->p.batch = B;
    c->p.seqlen_q = mq;
    if (mk) c->p.seqlen_k = mk;
    for (int64_t b = 0; b < B; b++) {
        c->v3.seqlens_q[b] = sq[b];
        if (sk) c->v3.seqlens_k[b] = sk[b];
        if (used) c->v3.seqused_k[b] = used[b];
    }
    c->v3.varlen_q = 1;
    c->v3.varlen_k = sk != NULL;
    c->v3.has_seqused = used != NULL;
}

/* A paged cache for c (batch, seqlen_k, seqused set): pages of page_size shuffled over a pool with
 * `spare` unused pages, the table padded by `pad`; share: sequence 1 starts with sequence 0's pages. */
static void v3_set_pages(fc_case *c, int64_t page_size, int64_t pad, int64_t spare, int share) {
    fc_v3 *v = &c->v3;
    c->p.page_size = page_size;
    v->max_pages = (c->p.seqlen_k + page_size - 1) / page_size;
    if (v->max_pages < 1) v->max_pages = 1;
    v->table_pad = pad;
    const int64_t n = c->p.batch * v->max_pages;
    v->num_pages = n + spare;
    uint64_t st = 0x9E3779B97F4A7C15ull ^ (uint64_t)(n * 31 + page_size);
    for (int64_t e = 0; e < n; e++) v->block_table[e] = (int32_t)e;
    for (int64_t e = n - 1; e > 0; e--) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        int64_t f = (int64_t)((st >> 33) % (uint64_t)(e + 1));
        int32_t t = v->block_table[e]; v->block_table[e] = v->block_table[f]; v->block_table[f] = t;
    }
    if (share && c->p.batch >= 2)
        for (int64_t j = 0; j < v->max_pages / 2; j++) v->block_table[v->max_pages + j] = v->block_table[j];
}

static fc_case v3_varlen_case(int k, int bwd) {
    fc_case c = base_case(1, 1, 1, 4, 2, 64, bwd);
    static const int64_t q0[] = { 65, 0, 1, 129, -1 }, k0[] = { 97, 3, 0, 129 };
    static const int64_t q1[] = { 1, 17, 64, -1 }, u1[] = { 50, 3, 0 }, k1[] = { 97, 5, 64 };
    static const int64_t q2[] = { 33, 1, 64, -1 };
    switch (k) {
    case 0: v3_set_seqs(&c, q0, k0, NULL); c.p.causal = FA_CAUSAL_BOTTOM_RIGHT; break;
    case 1: v3_set_seqs(&c, q1, k1, u1); break;                                   /* caches longer than used */
    case 2: v3_set_seqs(&c, q2, NULL, NULL); c.p.seqlen_k = 97; break;           /* packed Q, dense K */
    default: v3_set_seqs(&c, q0, k0, NULL); c.p.head_dim_qk = 96; c.p.head_dim_v = 64; /* Dqk != Dv */
             c.p.window_left = 16; c.p.window_right = 0; c.p.window_align = FA_ALIGN_BOTTOM_RIGHT; break;
    }
    return c;
}

static fc_case v3_paged_case(int k, int bwd) {
    fc_case c = base_case(1, 1, 1, 4, 1, 64, bwd);
    static const int64_t dq[] = { 1, 1, 1, -1 }, du[] = { 1000, 17, 0 };       /* decode rows, long caches */
    static const int64_t sq[] = { 33, 17, -1 }, su[] = { 200, 200 };
    static const int64_t vq[] = { 5, 9, -1 }, vu[] = { 37, 5 };
    switch (k) {
    case 0: v3_set_seqs(&c, dq, NULL, du); v3_set_pages(&c, 16, 2, 3, 0); c.p.causal = FA_CAUSAL_BOTTOM_RIGHT; break;
    case 1: v3_set_seqs(&c, vq, NULL, vu); v3_set_pages(&c, 1, 1, 2, 0); break;
    case 2: v3_set_seqs(&c, sq, NULL, su); v3_set_pages(&c, 64, 0, 1, 1); break;  /* shared pages */
    default: v3_set_seqs(&c, vq, NULL, vu); c.p.seqlen_k = 300; v3_set_pages(&c, 256, 3, 0, 0); break;
    }
    return c;
}

int fc_sweep_v3_claimed(const fa_limits *l, const fc_case *c) {
    int varlen = c->v3.varlen_q || c->v3.varlen_k || c->v3.has_seqused, paged = c->p.page_size >= 1;
    int softcap = c->p.softcap > 0, sinks = c->p.has_sinks;
    if (!varlen && !paged && !softcap && !sinks) return 1;
    if (!l) return 0;
    return !(varlen && !l->supports_varlen) && !(paged && !l->supports_paged) && !(softcap && !l->supports_softcap) &&
           !(sinks && !l->supports_sinks);
}

static void add_v3(sweep_list *s, int cat, const fc_case *c, int prop) {
    if (!fc_sweep_v3_claimed(s->o->lim, c)) return;
    add_base(s, cat, c, prop);
    /* a paged call: the contract's supports_paged covers the forward, a backend may decline the
       backward (fa_limits); the forward is judged either way (the full check, and the paging
       property: prop_v3.c) */
    if (!s->oom && (prop < 0 || !strcmp(fc_prop_table[prop].name, "paging")) && c->p.page_size >= 1 &&
        s->e[s->n - 1].c.backward)
        s->e[s->n - 1].expect = FC_SWEEP_EXPECT_FWD_BWD_MAY_DECLINE;
}

static void build_base_v3(sweep_list *s) {
    int quick = s->o->quick, bwd = s->o->has_bwd;
    for (int k = 0; k < 4; k++) {
        if (quick && k % 2) continue;
        fc_case c = v3_varlen_case(k, bwd);
        add_v3(s, FC_SWEEP_VARLEN, &c, -1);
        fc_case d = v3_paged_case(k, bwd);
        add_v3(s, FC_SWEEP_PAGED, &d, -1);
    }
    /* long keys at head dim 128 (in --quick too): a packed batch whose sequences run several
       interior key blocks (every key visible to every row of a 128-row query tile) through a
       kernel's K/V pipeline; a missing barrier between consuming a stage and refilling it, a
       wrong block offset or a dropped ragged tail shows there under --stress, and not in the
       short cases above (on the CUDA backend: the Hopper wgmma kernel, which takes the packed
       calls). Forward only: the pipelines it aims at are the forward's; it costs little on a
       host backend. */
    {
        static const int64_t lq[] = { 300, 700, 450, -1 };
        fc_case c = base_case(1, 1, 1, 4, 2, 128, 0);
        v3_set_seqs(&c, lq, lq, NULL);
        c.p.dtype = FA_BF16;
        add_v3(s, FC_SWEEP_VARLEN, &c, -1);
        /* top-left causal with Sq_b > Sk_b: the query tiles past Sk_b see every key, so their
           last, partial key block has no causal edge: only Sk_b makes it a boundary block (the
           packed keys past it are the next sequence's) */
        static const int64_t tq[] = { 520, 300, -1 }, tk[] = { 300, 200 };
        fc_case d = base_case(1, 1, 1, 2, 1, 128, 0);
        v3_set_seqs(&d, tq, tk, NULL);
        d.p.causal = FA_CAUSAL_TOP_LEFT;
        add_v3(s, FC_SWEEP_VARLEN, &d, -1);
    }
    static const float caps[] = { 30.0f, 5.0f, 50.0f, 1.0f };
    for (int k = 0; k < 4; k++) {
        if (quick && k % 2) continue;
        fc_case c = k == 3 ? v3_varlen_case(0, bwd) : base_case(2, 97, 129, 4, 2, 64, bwd);
        c.p.softcap = caps[k];
        if (k == 1) c.p.causal = FA_CAUSAL_BOTTOM_RIGHT;
        if (k == 2) c.p.dtype = FA_BF16;
        add_v3(s, FC_SWEEP_SOFTCAP, &c, -1);
    }
    for (int k = 0; k < 4; k++) {
        if (quick && k % 2) continue;
        fc_case c = k == 3 ? v3_paged_case(0, bwd) : base_case(2, 97, 129, 4, 2, 64, bwd);
        c.p.has_sinks = 1;
        if (k == 1) c.v3.sinks.kind = FC_DIST_LARGE;                             /* sinks that dominate */
        if (k == 2) { c.p.causal = FA_CAUSAL_BOTTOM_RIGHT; c.p.seqlen_q = 129; c.p.seqlen_k = 65; } /* empty rows */
        add_v3(s, FC_SWEEP_SINKS, &c, -1);
    }
}

static void build_base(sweep_list *s) {
    int quick = s->o->quick, bwd = s->o->has_bwd;
    /* shapes */
    static const int64_t seqs[][2] = { { 1, 1 }, { 3, 3 }, { 17, 17 }, { 63, 63 }, { 64, 64 }, { 65, 65 }, { 97, 97 },
                                       { 113, 113 }, { 127, 127 }, { 128, 128 }, { 129, 129 }, { 239, 239 }, { 256, 256 },
                                       { 257, 257 }, { 1, 128 }, { 128, 1 }, { 97, 239 }, { 239, 97 }, { 513, 129 } };
    int nseq = (int)(sizeof seqs / sizeof seqs[0]);
    for (int i = 0; i < nseq; i++) {
        if (quick && i % 3) continue;
        fc_case c = base_case(1, seqs[i][0], seqs[i][1], 2, 1, 64, bwd);
        add_base(s, FC_SWEEP_SHAPES, &c, -1);
    }
    static const int64_t dims[] = { 32, 40, 72, 96, 104, 128, 256 };
    for (int i = 0; i < 7; i++) {
        if (quick && i % 2) continue;
        fc_case c = base_case(1, 97, 129, 2, 1, dims[i], bwd);
        if (dims[i] == 256) c.p.seqlen_q = c.p.seqlen_k = 65;
        add_base(s, FC_SWEEP_SHAPES, &c, -1);
    }
    { fc_case c = base_case(2, 65, 97, 2, 1, 64, bwd); c.p.head_dim_v = 32; add_base(s, FC_SWEEP_SHAPES, &c, -1); }
    /* long keys (in --quick too): 8 key blocks of 128 with a ragged last one (1000 = 7 * 128 +
       104), no mask, at head dims 128 and 64: the dense calls' K/V pipelines (on an H100 the
       warp-specialized kernel's TMA ring) run many stages, where a stage released before its
       reads complete, a wrong V block offset or a dropped ragged tail shows (with --stress: at
       many CTAs under load). Forward only: the pipelines it aims at are the forward's. */
    { fc_case c = base_case(1, 1000, 1000, 8, 2, 128, 0); c.p.dtype = FA_BF16; add_base(s, FC_SWEEP_SHAPES, &c, -1); }
    { fc_case c = base_case(1, 640, 1000, 2, 2, 64, 0); add_base(s, FC_SWEEP_SHAPES, &c, -1); }
    /* causal */
    static const int64_t cs[][2] = { { 64, 64 }, { 65, 129 }, { 129, 65 }, { 1, 200 }, { 200, 1 }, { 127, 256 } };
    for (int m = 1; m <= 2; m++)
        for (int i = 0; i < 6; i++) {
            if (quick && i % 2) continue;
            fc_case c = base_case(1, cs[i][0], cs[i][1], 2, 1, 64, bwd);
            c.p.causal = (fa_causal)m;
            add_base(s, FC_SWEEP_CAUSAL, &c, -1);
        }
    /* window */
    static const int64_t w[][3] = { { 0, 0, 0 }, { 16, 15, 0 }, { 127, 0, 1 }, { 63, 64, 1 }, { -1, 16, 0 }, { 16, -1, 1 } };
    for (int i = 0; i < 6; i++) {
        if (quick && i % 2) continue;
        fc_case c = base_case(1, 129, 129, 2, 1, 64, bwd);
        c.p.window_left = w[i][0]; c.p.window_right = w[i][1]; c.p.window_align = (fa_align)w[i][2];
        add_base(s, FC_SWEEP_WINDOW, &c, -1);
    }
    { fc_case c = base_case(1, 1, 200, 4, 1, 64, bwd); c.p.causal = FA_CAUSAL_BOTTOM_RIGHT; c.p.window_left = 127; c.p.window_right = 0; add_base(s, FC_SWEEP_WINDOW, &c, -1); }
    { fc_case c = base_case(1, 97, 161, 2, 1, 64, bwd); c.p.causal = FA_CAUSAL_TOP_LEFT; c.p.window_left = 64; add_base(s, FC_SWEEP_WINDOW, &c, -1); }
    /* mask */
    for (int k = 1; k < FC_MASK_COUNT; k++)
        for (int bc = 0; bc < 2; bc++) {
            if (quick && bc) continue;
            fc_case c = base_case(2, 97, 129, 2, 1, 64, bwd);
            c.mask.kind = (fc_mask_kind)k;
            c.mask.broadcast_batch = c.mask.broadcast_heads = bc;
            add_base(s, FC_SWEEP_MASK, &c, -1);
        }
    { fc_case c = base_case(1, 65, 441, 1, 1, 64, bwd); c.mask.kind = FC_MASK_FULL_COLS; c.mask.density = 0.5; add_base(s, FC_SWEEP_MASK, &c, -1); }
    /* gqa */
    static const int64_t g[][2] = { { 2, 1 }, { 4, 2 }, { 8, 1 }, { 8, 2 }, { 6, 3 } };
    for (int i = 0; i < 5; i++) {
        if (quick && i % 2) continue;
        fc_case c = base_case(2, 65, 97, g[i][0], g[i][1], 64, bwd);
        add_base(s, FC_SWEEP_GQA, &c, -1);
    }
    /* layout */
    for (int v = 0; v < 6; v++) {
        if (quick && v % 2) continue;
        fc_case c = base_case(2, 63, 65, 4, 2, 64, bwd);
        for (int t = 0; t < FC_T_COUNT; t++) {
            fc_layout *l = &c.layout[t];
            int n = t == FC_T_LSE ? 3 : 4;
            if ((v == 0 && t <= FC_T_V) || (v == 1 && t >= FC_T_O) || v >= 4) { l->order[0] = 2 % n; l->order[1] = 0; l->order[2] = 1; }
            if ((v == 2 && t != FC_T_LSE) || v == 4) l->pad[1] = 3;
            if (v == 3 || v == 5) l->offset = 8 * (t + 1);
            if (v == 5) l->pad[0] = 5;
        }
        add_base(s, FC_SWEEP_LAYOUT, &c, -1);
    }
    /* values */
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < FC_DIST_COUNT; k++) {
            if (quick && (k + dt) % 2) continue;
            int small = k == FC_DIST_HEAVY_TAIL || k == FC_DIST_LARGE;   /* slow for the oracle's backward */
            fc_case c = small ? base_case(1, 17, 33, 2, 1, 16, bwd) : base_case(1, 64, 96, 2, 1, 64, bwd);
            c.p.dtype = (fa_dtype)dt;
            for (int t = 0; t < FC_N_DIST_INPUTS; t++) c.dist[t].kind = (fc_dist_kind)k;
            add_base(s, FC_SWEEP_VALUES, &c, -1);
        }
    /* empty */
    { fc_case c = base_case(1, 0, 17, 2, 1, 64, bwd); add_base(s, FC_SWEEP_EMPTY, &c, -1); }
    { fc_case c = base_case(1, 17, 0, 2, 1, 64, bwd); add_base(s, FC_SWEEP_EMPTY, &c, -1); }
    { fc_case c = base_case(2, 0, 0, 2, 1, 64, bwd); add_base(s, FC_SWEEP_EMPTY, &c, -1); }
    build_base_v3(s);
    /* properties: each on two cases (packing and paging on contract-v3 cases) */
    for (int p = 0; p < fc_prop_count(); p++) {
        const char *pn = fc_prop_table[p].name;
        if (!strcmp(pn, "packing") || !strcmp(pn, "paging")) {
            fc_case a = !strcmp(pn, "packing") ? v3_varlen_case(0, bwd) : v3_paged_case(0, bwd);
            add_v3(s, FC_SWEEP_PROPERTIES, &a, p);
            if (quick) continue;
            fc_case b = !strcmp(pn, "packing") ? v3_paged_case(1, bwd) : v3_paged_case(2, bwd);
            add_v3(s, FC_SWEEP_PROPERTIES, &b, p);
            continue;
        }
        if (!strcmp(pn, "gradient_fd") && !bwd) continue;   /* a gradient needs a backward */
        fc_case a = base_case(2, 65, 97, 4, 2, 64, bwd);
        fc_case b = base_case(1, 33, 47, 2, 1, 32, bwd);
        b.p.causal = FA_CAUSAL_BOTTOM_RIGHT;
        b.mask.kind = FC_MASK_RANDOM_NEGINF;
        /* each property's precondition (properties.h) met by construction, so that every entry
           is judged (a SKIP here would be a sweep defect): keys hidden from some rows for leak and
           nonfinite (a: top-left causal, Sq < Sk), no causal mask or window for key_permutation
           and split_merge (b: its -inf mask only), a second batch for slices and
           batch_invariance (b: B = 2) */
        if (!strcmp(pn, "leak") || !strcmp(pn, "nonfinite")) a.p.causal = FA_CAUSAL_TOP_LEFT;
        if (!strcmp(pn, "key_permutation") || !strcmp(pn, "split_merge")) b.p.causal = FA_CAUSAL_NONE;
        if (!strcmp(pn, "slices") || !strcmp(pn, "batch_invariance")) b.p.batch = 2;
        add_base(s, FC_SWEEP_PROPERTIES, &a, p);
        if (quick) continue;
        add_base(s, FC_SWEEP_PROPERTIES, &b, p);
    }
}

/* ------------------------------------------------------------------------- */
/* CUDA: the device grid                                                      */

/* Additive mask kinds of the grid (as fc_mask_spec), the old cc_tests' patterns: finite values in
 * [-3, 3] mixed with 10% -inf entries over a full [B, Hq, Sq, Sk] mask, the same broadcast over batch
 * and heads, key padding (the last keys of each batch element, broadcast over heads), fully masked
 * rows (every fifth row, from row 2) in a [Sq, Sk] mask of finite values and 20% -inf. */
enum { MK_NONE = 0, MK_FULL, MK_BCAST, MK_KEYPAD, MK_ROWS, MK_COUNT };
static const char *mk_name[MK_COUNT] = { "none", "full", "bcast", "keypad", "rows-inf" };
/* Layouts of Q, K, V, O (and dK, dV): [B, S, H, D] dense, [B, H, S, D], padded strides
 * (head step D + 24, row step H (D + 24) + 40, batch step S * row + 16), and fused QKV
 * (one [B, S, Hq + 2 Hkv, D] buffer: q, k, v are head slices at offsets 0, Hq D, (Hq + Hkv) D). */
enum { LAY_BSHD = 0, LAY_BHSD, LAY_PAD, LAY_QKV, LAY_COUNT };
static const char *lay_name[LAY_COUNT] = { "bshd", "bhsd", "pad", "qkv" };

typedef struct {
    int64_t B, Sq, Sk, Hq, Hkv, D;
    int64_t Dv; /* head dim of V, O (0: D) */
    fa_dtype dt;
    fa_causal causal;
    int64_t wl, wr;
    fa_align align;
    int mask, layout;
    float scale;
} grid_spec;

static grid_spec spec(int64_t Sq, int64_t Sk, int64_t D, fa_dtype dt) {
    grid_spec g;
    memset(&g, 0, sizeof g);
    g.B = 2; g.Sq = Sq; g.Sk = Sk; g.Hq = 2; g.Hkv = 2; g.D = D; g.dt = dt;
    g.causal = FA_CAUSAL_NONE; g.wl = g.wr = -1; g.align = FA_ALIGN_TOP_LEFT;
    return g;
}

/* The 13 geometric / additive mask kinds of the grid, by number. */
static void set_mask_kind(grid_spec *g, int kind) {
    g->causal = FA_CAUSAL_NONE; g->wl = g->wr = -1; g->align = FA_ALIGN_TOP_LEFT; g->mask = MK_NONE;
    switch (kind % 13) {
    case 0: break;
    case 1: g->causal = FA_CAUSAL_TOP_LEFT; break;
    case 2: g->causal = FA_CAUSAL_BOTTOM_RIGHT; break;
    case 3: g->wl = 37; g->wr = 5; break;
    case 4: g->wl = 100; g->wr = 0; g->align = FA_ALIGN_BOTTOM_RIGHT; break;
    case 5: g->wl = -1; g->wr = 20; g->align = FA_ALIGN_BOTTOM_RIGHT; break;
    case 6: g->causal = FA_CAUSAL_BOTTOM_RIGHT; g->wl = 64; break;
    case 7: g->causal = FA_CAUSAL_TOP_LEFT; g->wl = 129; g->wr = 3; break;
    case 8: g->mask = MK_FULL; break;
    case 9: g->mask = MK_BCAST; g->causal = FA_CAUSAL_BOTTOM_RIGHT; break;
    case 10: g->mask = MK_KEYPAD; break;
    case 11: g->mask = MK_ROWS; g->wl = 50; g->wr = 50; break;
    case 12: g->wl = 0; g->wr = 0; break; /* one key per row at most */
    }
}

static void set_layout(fc_case *c, int t, int lay, int64_t S, int64_t H, int64_t D, int64_t Hq, int64_t Hkv) {
    fc_layout *l = &c->layout[t];
    memset(l, 0, sizeof *l);
    for (int k = 0; k < 4; k++) l->order[k] = k;
    (void)S;
    switch (lay) {
    case LAY_BHSD: l->order[1] = 2; l->order[2] = 1; break;
    case LAY_PAD: l->pad[2] = 24; l->pad[1] = 40; l->pad[0] = 16; break;
    case LAY_QKV:
        /* row step (Hq + 2 Hkv) D: the other heads of the fused buffer are the pad */
        l->pad[1] = (Hq + 2 * Hkv - H) * D;
        l->offset = t == FC_T_Q ? 0 : t == FC_T_K ? Hq * D : (Hq + Hkv) * D;
        break;
    default: break;
    }
}

/* grid_spec -> case. idx: position in the grid (seed, dO layout rotation). */
static fc_case grid_case(const grid_spec *g, int64_t idx, int bwd, int big) {
    fc_case c;
    fc_case_default(&c);
    fa_problem *p = &c.p;
    p->batch = g->B; p->seqlen_q = g->Sq; p->seqlen_k = g->Sk; p->heads_q = g->Hq; p->heads_kv = g->Hkv;
    p->head_dim_qk = g->D; p->head_dim_v = g->Dv ? g->Dv : g->D; p->dtype = g->dt; p->softmax_scale = g->scale;
    p->causal = g->causal; p->window_left = g->wl; p->window_right = g->wr; p->window_align = g->align;
    switch (g->mask) {
    case MK_FULL: c.mask.kind = FC_MASK_RANDOM_MIXED; c.mask.density = 0.1; c.mask.amp = 3; break;
    case MK_BCAST: c.mask.kind = FC_MASK_RANDOM_MIXED; c.mask.density = 0.1; c.mask.amp = 3; c.mask.broadcast_batch = c.mask.broadcast_heads = 1; break;
    case MK_KEYPAD: c.mask.kind = FC_MASK_KEY_PADDING; c.mask.density = 0.25; c.mask.broadcast_heads = 1; break;
    case MK_ROWS: c.mask.kind = FC_MASK_RANDOM_MIXED; c.mask.density = 0.2; c.mask.amp = 3; c.mask.width = 5; c.mask.broadcast_batch = c.mask.broadcast_heads = 1; break;
    default: break;
    }
    const int64_t Hq = g->Hq, Hkv = g->Hkv, D = g->D, Dv = p->head_dim_v;
    set_layout(&c, FC_T_Q, g->layout, g->Sq, Hq, D, Hq, Hkv);
    set_layout(&c, FC_T_K, g->layout, g->Sk, Hkv, D, Hq, Hkv);
    set_layout(&c, FC_T_V, g->layout, g->Sk, Hkv, Dv, Hq, Hkv); /* LAY_QKV: equal head dims only */
    const int olay = g->layout == LAY_QKV ? LAY_BSHD : g->layout;
    set_layout(&c, FC_T_O, olay, g->Sq, Hq, Dv, Hq, Hkv);
    /* dO (and dQ) non-contiguous in two of three cases: the stride assumption on dout */
    const int dolay = big ? LAY_BSHD : idx % 3 == 0 ? LAY_BSHD : idx % 3 == 1 ? LAY_BHSD : LAY_PAD;
    set_layout(&c, FC_T_DO, dolay, g->Sq, Hq, D, Hq, Hkv);
    set_layout(&c, FC_T_DQ, dolay, g->Sq, Hq, D, Hq, Hkv);
    set_layout(&c, FC_T_DK, olay, g->Sk, Hkv, D, Hq, Hkv);
    set_layout(&c, FC_T_DV, olay, g->Sk, Hkv, D, Hq, Hkv);
    c.seed = 0x5eed0000ull + (uint64_t)idx * 7919;
    c.backward = bwd;
    c.deterministic = 1;
    return c;
}

static void grid_label(char *buf, size_t len, const char *sec, int64_t idx, const grid_spec *g, const fc_case *c) {
    char dv[24] = "";
    if (g->Dv && g->Dv != g->D) snprintf(dv, sizeof dv, "/%lld", (long long)g->Dv);
    snprintf(buf, len, "%s#%lld B%lld Sq%lld Sk%lld H%lld/%lld D%lld%s %s c%d w%lld,%lld a%d m=%s %s dO=%s%s", sec,
             (long long)idx, (long long)g->B, (long long)g->Sq, (long long)g->Sk, (long long)g->Hq, (long long)g->Hkv,
             (long long)g->D, dv, g->dt == FA_BF16 ? "bf16" : "fp16", (int)g->causal, (long long)g->wl, (long long)g->wr,
             (int)g->align, mk_name[g->mask], lay_name[g->layout],
             c->layout[FC_T_DO].order[1] == 2 ? "bhsd" : c->layout[FC_T_DO].pad[2] ? "pad" : "bshd",
             g->scale != 0 ? " scale" : "");
}

/* sanitize subset: short sequences (the tools slow kernels 10-100x), every third case */
static int sanitize_skip(const sweep_list *s, const grid_spec *g, int64_t idx) {
    return s->o->sanitize && (g->Sq > 300 || g->Sk > 300 || g->B * g->Hq > 64 || idx % 3 != 0);
}

static int64_t grid_idx;

static void add_grid(sweep_list *s, const char *sec, const grid_spec *g) {
    int64_t idx = grid_idx++;
    if (sanitize_skip(s, g, idx)) return;
    fc_case c = grid_case(g, idx, s->o->has_bwd, 0);
    /* the backward's two modes alternate over the grid: deterministic (with the bitwise re-run)
       and the shipped default (atomic dQ accumulation) */
    c.deterministic = idx % 2 == 0;
    char label[120];
    grid_label(label, sizeof label, sec, idx, g, &c);
    if (s->o->has_bwd) {
        size_t l = strlen(label);
        snprintf(label + l, sizeof label - l, c.deterministic ? " det" : " atomic");
    }
    push(s, FC_SWEEP_CUDA_GRID, &c, -1, label);
}

static const int64_t seqlens[17] = { 1, 3, 17, 63, 64, 65, 97, 113, 127, 128, 239, 513, 799, 1023, 1025, 2048, 4224 };
static const int64_t special_d[6] = { 32, 64, 96, 128, 192, 256 };

/* A GPU finding, replayed from its case text. */
typedef struct {
    const char *name, *text;
} finding;
static const finding findings[2] = {
    /* fuzz/gpu_findings/cuda-h100-2026-11-22/a63605906157a3f1.case: fp16 dS past 65504 rounded
       to Inf, then Inf - Inf in dS K gave NaN dQ/dK */
    { "a63605906157a3f1",
      "shape = 2 193 20 8 1 128 128\ndtype = fp16\nscale = 0.00100000005\ncausal = none\nwindow = -1 127\n"
      "window_align = bottom_right\nmask = full_rows density=0.050000000000000003 amp=0.5 width=2 shift=3\n"
      "mask_broadcast = heads\ndist.q = gaussian amp=0 prob=0.01\ndist.k = gaussian amp=0 prob=0\n"
      "dist.v = gaussian amp=1000 prob=0\ndist.do = large amp=0 prob=0.5\nseed = 0xd6820771424faf39\n"
      "backward = 1\ndeterministic = 0\n" },
    /* fuzz/regressions/bwd/dq_nan_fp16_large_qk_lse_ulp.case: fp16 q, k ~ 3e4 at D = 8: the
       recomputed P was e^16 (LSE's ulp), fp16 Inf, dS = Inf * 0 = NaN in dQ. Rows whose forward O
       overflowed are UNCHECKABLE for the oracle: judged where a bound exists */
    { "cuda_dq_nan",
      "shape = 1 37 1 1 1 8 8\ndtype = fp16\nscale = 0\ncausal = none\nwindow = -1 -1\nwindow_align = top_left\n"
      "dist.q = large amp=0 prob=0.5\ndist.k = large amp=0 prob=0.5\ndist.v = gaussian amp=0 prob=0\n"
      "dist.do = gaussian amp=0 prob=0\nseed = 0xbbee36f88e84db3b\nbackward = 1\ndeterministic = 1\n" },
};

static void build_cuda(sweep_list *s) {
    const int quick = s->o->quick || s->o->sanitize, bwd = s->o->has_bwd;
    grid_idx = 0;
    /* A: sequence lengths, Sq == Sk and Sq != Sk both ways; head dims, masks, GQA, dtypes rotate */
    const int gq[3] = { 1, 2, 8 };
    int r = 0;
    for (int i = 0; i < 17; ++i)
        for (int v = 0; v < 3; ++v, ++r) {
            if (quick && (i % 4) != 0) { grid_idx++; continue; }
            int64_t a = seqlens[i], b = seqlens[(i + 5 + v) % 17];
            int64_t Sq = v == 0 ? a : (v == 1 ? a : b), Sk = v == 0 ? a : (v == 1 ? b : a);
            grid_spec g = spec(Sq, Sk, special_d[r % 6], (r & 1) ? FA_F16 : FA_BF16);
            set_mask_kind(&g, r);
            g.Hkv = 1 + (r % 2);
            g.Hq = gq[r % 3] * g.Hkv;
            g.B = Sq * Sk > 1000000 ? 1 : 2;
            add_grid(s, "A", &g);
        }
    /* B: every head dim 8..256 (step 8), both dtypes, ragged lengths */
    for (int64_t D = 8; D <= 256; D += 8)
        for (int dt = 0; dt < 2; ++dt) {
            if (quick && D % 32 != 8 && D % 64 != 0) { grid_idx++; continue; }
            grid_spec g = spec(97 + D % 31, 65 + (D * 7) % 129, D, dt ? FA_BF16 : FA_F16);
            set_mask_kind(&g, (int)(D / 8) + dt);
            g.Hkv = 1; g.Hq = dt ? 2 : 1;
            add_grid(s, "B", &g);
        }
    /* C: every mask kind on Sq < Sk, Sq > Sk, and both ~1k */
    const int64_t qk[3][2] = { { 127, 513 }, { 513, 127 }, { 1023, 1025 } };
    for (int kind = 0; kind < 13; ++kind)
        for (int sI = 0; sI < 3; ++sI) {
            if (quick && sI == 2) { grid_idx++; continue; }
            grid_spec g = spec(qk[sI][0], qk[sI][1], sI == 1 ? 64 : 128, sI == 1 ? FA_F16 : FA_BF16);
            set_mask_kind(&g, kind);
            g.Hq = 4; g.Hkv = 2;
            add_grid(s, "C", &g);
        }
    /* D: a single query row against a window (window offset vs corner), windows past the ends */
    {
        grid_spec g = spec(1, 239, 64, FA_BF16);
        g.wl = 127; g.wr = 0; g.align = FA_ALIGN_BOTTOM_RIGHT; add_grid(s, "D", &g);
        g.causal = FA_CAUSAL_BOTTOM_RIGHT; g.wl = 127; g.wr = -1; add_grid(s, "D", &g);
        g = spec(65, 97, 128, FA_F16);
        g.wl = 1000000; g.wr = 1000000; add_grid(s, "D", &g);
        g.causal = FA_CAUSAL_TOP_LEFT; g.wl = 0; g.wr = -1; add_grid(s, "D", &g); /* only the diagonal */
        g = spec(300, 40, 64, FA_BF16); /* Sq > Sk, causal bottom-right: top rows see nothing */
        g.causal = FA_CAUSAL_BOTTOM_RIGHT; add_grid(s, "D", &g);
        g.causal = FA_CAUSAL_TOP_LEFT; g.mask = MK_ROWS; add_grid(s, "D", &g);
    }
    /* E: layouts */
    for (int lay = 1; lay < LAY_COUNT; ++lay)
        for (int d = 0; d < 3; ++d) {
            int64_t D = d == 0 ? 64 : (d == 1 ? 128 : 72);
            grid_spec g = spec(239, lay == LAY_QKV ? 239 : 513, D, d == 1 ? FA_F16 : FA_BF16);
            set_mask_kind(&g, d == 0 ? 2 : (d == 1 ? 8 : 3));
            g.layout = lay; g.Hq = 4; g.Hkv = lay == LAY_QKV ? 4 : 1;
            if (lay == LAY_QKV) g.mask = MK_NONE;
            add_grid(s, "E", &g);
        }
    /* F: scales (negative, large), empty problems, many (batch, head) pairs */
    {
        grid_spec g = spec(97, 113, 64, FA_BF16);
        g.scale = -0.3f; add_grid(s, "F", &g);
        g.scale = 2.0f; g.causal = FA_CAUSAL_TOP_LEFT; add_grid(s, "F", &g);
        g = spec(0, 17, 64, FA_F16); add_grid(s, "F", &g);
        g = spec(17, 0, 64, FA_F16); add_grid(s, "F", &g);
        g = spec(3, 17, 32, FA_BF16); g.B = 0; add_grid(s, "F", &g);
        g = spec(3, 5, 8, FA_BF16); g.B = 300; g.Hq = 256; g.Hkv = 32; add_grid(s, "F", &g); /* 76800 pairs */
    }
    /* M: Dqk != Dv. The MLA pair 192/128 (its own tiles: fwd_tiles.h fwd_pair_tiles, bwd_sm80_tile)
       under every mask kind, both dtypes, GQA, the [B, H, S, D] and padded layouts, ragged and
       1-row query blocks; and pairs that run the larger dim's tile with zero-filled columns
       (Dv > Dqk, Dv < Dqk, 136/72 at the edges of the pair's padding) */
    {
        static const int64_t mq[4][2] = { { 129, 257 }, { 257, 129 }, { 1, 300 }, { 700, 700 } };
        for (int kind = 0; kind < 13; ++kind) {
            if (quick && kind % 2) { grid_idx++; continue; }
            const int64_t *sqk = mq[kind % 4];
            grid_spec g = spec(sqk[0], sqk[1], 192, (kind & 1) ? FA_F16 : FA_BF16);
            g.Dv = 128;
            set_mask_kind(&g, kind);
            g.Hkv = 1 + kind % 2; g.Hq = (kind % 3 == 0 ? 4 : 1) * g.Hkv;
            g.layout = kind % 3 == 2 ? LAY_PAD : (kind % 3 == 1 ? LAY_BHSD : LAY_BSHD);
            add_grid(s, "M", &g);
        }
        static const int64_t pairs[4][2] = { { 136, 72 }, { 64, 128 }, { 128, 64 }, { 256, 32 } };
        for (int i = 0; i < 4; ++i) {
            if (quick && i % 2) { grid_idx++; continue; }
            grid_spec g = spec(97, 161, pairs[i][0], i % 2 ? FA_F16 : FA_BF16);
            g.Dv = pairs[i][1];
            set_mask_kind(&g, 2 + 4 * i);
            g.Hq = 2; g.Hkv = 1;
            add_grid(s, "M", &g);
        }
    }

    /* leak: NaN/Inf in K and V at keys hidden from probe rows, inside key blocks other rows of
       the CTA see (causal diagonal, window edges, -inf mask entries, key padding, fully masked
       rows); both dtypes; 64- and 128-row query blocks; small |q| so that no visible P rounds to
       0 in fp16 */
    {
        typedef struct { int64_t Sq, Sk, D; int kind; int64_t wl, wr; } leak_spec;
        static const leak_spec ls[9] = {
            { 200, 200, 128, 1, -1, -1 },   /* causal top-left, diagonal block */
            { 130, 300, 64, 2, -1, -1 },    /* causal bottom-right, D = 64 */
            { 257, 257, 128, 3, 37, 5 },    /* window both sides */
            { 300, 400, 64, 4, 100, 0 },    /* window left + diagonal, bottom-right */
            { 150, 190, 128, 8, -1, -1 },   /* full additive mask with -inf entries */
            { 300, 300, 128, 10, -1, -1 },  /* key padding */
            { 210, 210, 64, 11, 50, 50 },   /* fully masked rows + window */
            { 2100, 2100, 128, 1, -1, -1 }, /* causal, long: 128-row blocks */
            { 1100, 1100, 128, 0, 300, -1 },/* left window only: the left edge */
        };
        const int leak = fc_prop_by_name("leak") - fc_prop_table;
        for (int sp = 0; sp < 9; ++sp)
            for (int dt = 0; dt < 2; ++dt) {
                const leak_spec *z = &ls[sp];
                if (s->o->sanitize && (z->Sq > 300 || z->Sk > 300 || dt)) continue;
                if (quick && sp % 2 && dt) continue;
                grid_spec g = spec(z->Sq, z->Sk, z->D, dt ? FA_BF16 : FA_F16);
                set_mask_kind(&g, z->kind);
                if (z->wl >= 0 || z->wr >= 0) { g.wl = z->wl; g.wr = z->wr; }
                g.B = 1; g.Hq = 2; g.Hkv = 1;
                int64_t idx = 1000 + sp * 2 + dt;
                fc_case c = grid_case(&g, idx, bwd, 0);
                c.dist[FC_T_Q].amp = 0.5;
                char label[120];
                grid_label(label, sizeof label, "leak", idx, &g, &c);
                push(s, FC_SWEEP_CUDA_LEAK, &c, leak, label);
            }
        /* Dqk != Dv: the MLA pair's kernels (the forward's V guard at Dv, the backward's exact
           instantiations) under a bottom-right causal mask and a window, both dtypes */
        for (int dt = 0; dt < 2; ++dt) {
            if (s->o->sanitize && dt) continue;
            grid_spec g = spec(200, 300, 192, dt ? FA_BF16 : FA_F16);
            g.Dv = 128;
            set_mask_kind(&g, dt ? 2 : 3);
            g.B = 1; g.Hq = 2; g.Hkv = 1;
            int64_t idx = 1018 + dt;
            fc_case c = grid_case(&g, idx, bwd, 0);
            c.dist[FC_T_Q].amp = 0.5;
            char label[120];
            grid_label(label, sizeof label, "leak", idx, &g, &c);
            push(s, FC_SWEEP_CUDA_LEAK, &c, leak, label);
        }
    }
    /* determinism: a batch-heavy causal backward, deterministic mode, five runs bitwise equal */
    if (!s->o->sanitize) {
        grid_spec g = spec(257, 321, 128, FA_BF16);
        g.B = 48; g.Hq = 8; g.Hkv = 2; g.causal = FA_CAUSAL_BOTTOM_RIGHT;
        fc_case c = grid_case(&g, 2000, bwd, 1);
        char label[120];
        grid_label(label, sizeof label, "determinism", 2000, &g, &c);
        push(s, FC_SWEEP_CUDA_DETERMINISM, &c, fc_prop_by_name("determinism") - fc_prop_table, label);
    }
    /* declined layouts: correct, or UNSUPPORTED with nothing written */
    {
        fc_case c;
        fc_case_default(&c);
        c.p.batch = 1; c.p.seqlen_q = c.p.seqlen_k = 64; c.p.heads_q = c.p.heads_kv = 2;
        c.p.head_dim_qk = c.p.head_dim_v = 64; c.p.dtype = FA_BF16; c.backward = bwd;
        fc_case k = c;  /* a K row stride that is not a multiple of 8 elements */
        k.layout[FC_T_K].pad[2] = 2;
        fc_case q = c;  /* a Q pointer 2 bytes off a 16-byte boundary */
        q.layout[FC_T_Q].offset = 1;
        fc_case d = c;  /* a dQ with a non-unit last stride */
        d.layout[FC_T_DQ].pad[3] = 1;
        fc_case h = c;  /* head dim past the limit */
        h.p.head_dim_qk = h.p.head_dim_v = 264;
        const fc_case *dc[4] = { &k, &q, &d, &h };
        static const char *dn[4] = { "declined k row stride 66 (not a multiple of 8)", "declined q pointer 2 bytes off 16",
                                     "declined dq last stride 2", "declined head dim 264" };
        for (int i = 0; i < 4; i++) {
            if (i == 2 && !bwd) continue;
            fc_sweep_entry *e = push(s, FC_SWEEP_CUDA_DECLINED, dc[i], -1, dn[i]);
            if (e) e->expect = FC_SWEEP_EXPECT_DECLINE;
        }
    }
    /* GPU findings from their case text (backward findings: with a backward only) */
    for (int i = 0; i < 2 && bwd; i++) {
        fc_case c;
        char msg[200];
        if (fc_case_parse(findings[i].text, &c, msg, sizeof msg) != 0) continue; /* fixed text: sweep_test parses it */
        char label[120];
        snprintf(label, sizeof label, "finding %s", findings[i].name);
        fc_sweep_entry *e = push(s, FC_SWEEP_CUDA_FINDINGS, &c, -1, label);
        if (e) e->expect = FC_SWEEP_EXPECT_JUDGED;
    }
    /* big: more than 2^31 elements in Q and O (and dO, dQ): Sq * Hq * D = 150001 * 128 * 128 =
       2.46e9; rows i >= 131072 (13% of them) start past element 2^31. Every row sees all 65 keys
       (window 40 on the backward's causal variant: the key-side loop bounds at 64-bit offsets).
       No determinism re-run (it doubles the memory); the unwritten scan covers every row. */
    if (s->o->big && !s->o->sanitize) {
        grid_spec g = spec(150001, 65, 128, FA_BF16);
        g.B = 1; g.Hq = 128; g.Hkv = 1;
        fc_case c = grid_case(&g, 3000, 0, 1);
        char label[120];
        grid_label(label, sizeof label, "big fwd", 3000, &g, &c);
        fc_sweep_entry *e = push(s, FC_SWEEP_CUDA_BIG, &c, -1, label);
        if (e) e->determinism = 0;
        if (bwd) {
            g = spec(131073, 65, 128, FA_BF16);
            g.B = 1; g.Hq = 128; g.Hkv = 1; g.causal = FA_CAUSAL_BOTTOM_RIGHT; g.wl = 40;
            c = grid_case(&g, 3001, 1, 1);
            grid_label(label, sizeof label, "big bwd", 3001, &g, &c);
            e = push(s, FC_SWEEP_CUDA_BIG, &c, -1, label);
            if (e) e->determinism = 0;
        }
    }
}

/* ------------------------------------------------------------------------- */
/* CUDA: what the GPU cc_tests checked besides the grid                      */

/* The old cc_tests' special cases (kernels/cuda/tests/{fwd,bwd}_certify_test.c before the sweep):
 *   nonfinite: one NaN/Inf at a time in K, V, Q or dO (the nonfinite property), every output judged
 *     by the oracle on the poisoned inputs: the rows that see it per BOUNDS.md 11.1, the rows that
 *     cannot see it finite within their bound, rows with no visible key exactly 0. Geometries: the
 *     backward's four (Sq = Sk = 150, H 2/1, D 64 fp16 / D 128 bf16: causal diagonal, window edge,
 *     -inf entries of a finite mask, fully masked rows) and Sq > Sk bottom-right (top rows see
 *     nothing), then the nine leak geometries (alternating dtype);
 *   findings: the two GPU findings also in the backward mode their case text does not name, and
 *     a63605906157a3f1 with dK and dV judged (FC_SWEEP_EXPECT_JUDGED_ALL);
 *   determinism: the batch-heavy deterministic backward 30 times (the old 30 repetitions), as 5
 *     more determinism-property entries of 5 runs each beside build_cuda's one.
 * The nonfinite entries alternate the backward mode (the old special cases ran both). */
static void build_cuda_coverage(sweep_list *s) {
    const int quick = s->o->quick || s->o->sanitize, bwd = s->o->has_bwd;
    const int nonfinite = fc_prop_by_name("nonfinite") - fc_prop_table;
    typedef struct { int64_t Sq, Sk, D; int kind; int64_t wl, wr; fa_causal causal; } nf_spec;
    static const nf_spec nf[5] = {
        { 150, 150, 0, 1, -1, -1, FA_CAUSAL_NONE },         /* causal top-left: the diagonal */
        { 150, 150, 0, 0, 20, 5, FA_CAUSAL_NONE },          /* window edges */
        { 150, 150, 0, 8, -1, -1, FA_CAUSAL_NONE },         /* -inf entries of a finite mask */
        { 150, 150, 0, 11, 50, 50, FA_CAUSAL_NONE },        /* fully masked rows + window */
        { 300, 40, 64, 0, -1, -1, FA_CAUSAL_BOTTOM_RIGHT }, /* Sq > Sk: the top rows see nothing */
    };
    for (int sp = 0; sp < 5; sp++)
        for (int dt = 0; dt < 2; dt++) {
            /* quick: the diagonal in fp16 and the fully masked rows in bf16; sanitize: the
               diagonal and the mask entries, fp16 */
            if (s->o->sanitize ? !((sp == 0 || sp == 2) && dt == 0) : quick && !((sp == 0 && dt == 0) || (sp == 3 && dt == 1)))
                continue;
            const nf_spec *z = &nf[sp];
            grid_spec g = spec(z->Sq, z->Sk, z->D ? z->D : dt ? 128 : 64, dt ? FA_BF16 : FA_F16);
            set_mask_kind(&g, z->kind);
            if (z->wl >= 0 || z->wr >= 0) { g.wl = z->wl; g.wr = z->wr; }
            if (z->causal != FA_CAUSAL_NONE) g.causal = z->causal;
            g.B = 1; g.Hq = 2; g.Hkv = 1;
            int64_t idx = 4000 + sp * 2 + dt;
            fc_case c = grid_case(&g, idx, bwd, 0);
            c.deterministic = dt;   /* both backward modes on every geometry: fp16 atomic, bf16 deterministic */
            char label[120];
            grid_label(label, sizeof label, "nonfinite", idx, &g, &c);
            push(s, FC_SWEEP_CUDA_LEAK, &c, nonfinite, label);
        }
    /* the leak geometries of build_cuda (same order), one dtype each */
    {
        typedef struct { int64_t Sq, Sk, D; int kind; int64_t wl, wr; } leak_spec;
        static const leak_spec ls[9] = {
            { 200, 200, 128, 1, -1, -1 }, { 130, 300, 64, 2, -1, -1 }, { 257, 257, 128, 3, 37, 5 },
            { 300, 400, 64, 4, 100, 0 }, { 150, 190, 128, 8, -1, -1 }, { 300, 300, 128, 10, -1, -1 },
            { 210, 210, 64, 11, 50, 50 }, { 2100, 2100, 128, 1, -1, -1 }, { 1100, 1100, 128, 0, 300, -1 },
        };
        for (int sp = 0; sp < 9 && !quick; sp++) {
            const leak_spec *z = &ls[sp];
            grid_spec g = spec(z->Sq, z->Sk, z->D, sp % 2 ? FA_BF16 : FA_F16);
            set_mask_kind(&g, z->kind);
            if (z->wl >= 0 || z->wr >= 0) { g.wl = z->wl; g.wr = z->wr; }
            /* key padding hides the same keys from every row of a batch element: what can leak
               there is a key one batch element pads and another sees (B = 2: the last 38 and 76
               keys), placed where its own rows cannot see it (prop_nonfinite.c nf_plan) */
            g.B = z->kind == 10 ? 2 : 1; g.Hq = 2; g.Hkv = 1;
            int64_t idx = 4100 + sp;
            /* the two long geometries (128-row query blocks) forward only, as the old forward test
               ran them: seven backward oracle calls at S = 2100 would near certify's watchdog */
            fc_case c = grid_case(&g, idx, bwd && z->Sq < 1000, 0);
            c.deterministic = sp % 2;
            char label[120];
            grid_label(label, sizeof label, "nonfinite", idx, &g, &c);
            push(s, FC_SWEEP_CUDA_LEAK, &c, nonfinite, label);
        }
    }
    /* the GPU findings in their other backward mode too (the old test ran both) */
    for (int i = 0; i < 2 && bwd && !quick; i++) {
        fc_case c;
        char msg[200];
        if (fc_case_parse(findings[i].text, &c, msg, sizeof msg) != 0) continue; /* fixed text: sweep_test parses it */
        c.deterministic = !c.deterministic;
        char label[120];
        snprintf(label, sizeof label, "finding %s (%s mode)", findings[i].name, c.deterministic ? "deterministic" : "atomic");
        fc_sweep_entry *e = push(s, FC_SWEEP_CUDA_FINDINGS, &c, -1, label);
        if (e) e->expect = FC_SWEEP_EXPECT_JUDGED;
    }
    /* finding a63605906157a3f1: dK and dV must have judged elements too (the old need_dkdv) */
    for (int64_t i = 0; i < s->n; i++)
        if (s->e[i].category == FC_SWEEP_CUDA_FINDINGS && strstr(s->e[i].label, findings[0].name))
            s->e[i].expect = FC_SWEEP_EXPECT_JUDGED_ALL;
    /* determinism: 5 more entries of 5 runs (other seeds) beside build_cuda's: 30 runs */
    for (int k = 1; k < 6 && !quick; k++) {
        grid_spec g = spec(257, 321, 128, FA_BF16);
        g.B = 48; g.Hq = 8; g.Hkv = 2; g.causal = FA_CAUSAL_BOTTOM_RIGHT;
        fc_case c = grid_case(&g, 2000 + k, bwd, 1);
        char label[120];
        grid_label(label, sizeof label, "determinism", 2000 + k, &g, &c);
        push(s, FC_SWEEP_CUDA_DETERMINISM, &c, fc_prop_by_name("determinism") - fc_prop_table, label);
    }
}

/* Host pointers on a backend that declares device memory: the forward with q, k, v, o, lse in
 * host memory (malloc), and, with a backward, the backward with q, k, v, o, lse, dout, dq, dk, dv
 * there. Each call must be rejected (INVALID or UNSUPPORTED, an argument named, a message) with
 * the host outputs untouched. */
static int64_t misuse_host_ptr_one(const fa_backend *be, int bwd, fc_sweep_misuse_cb cb, void *user) {
    static fz_misuse_result res;
    memset(&res, 0, sizeof res);
    res.kind = -1;
    const char *kind = bwd ? "host_ptr_bwd" : "host_ptr";
    snprintf(res.kind_name, sizeof res.kind_name, "%s", kind);
    snprintf(res.what, sizeof res.what, bwd ? "backward: q, k, v, o, lse, dout, dq, dk, dv in host memory (malloc) on a "
                                              "backend that declares device memory"
                                            : "q, k, v, o, lse in host memory (malloc) on a backend that declares device memory");
    char msg[256];
    if (fc_case_parse(bwd ? "shape = 1 64 64 2 2 64 64\ndtype = bf16\nbackward = 1\nseed = 7\n"
                          : "shape = 1 64 64 2 2 64 64\ndtype = bf16\nbackward = 0\nseed = 7\n",
                      &res.c, msg, sizeof msg)) {
        snprintf(res.failure, sizeof res.failure, "harness");
        snprintf(res.detail, sizeof res.detail, "%s case: %s", kind, msg);
        if (cb) cb(user, &res);
        return 1;
    }
    /* the inputs (filled), then the outputs (poisoned, compared with a snapshot after the call) */
    static const int fwd_in[3] = { FC_T_Q, FC_T_K, FC_T_V }, fwd_out[2] = { FC_T_O, FC_T_LSE };
    static const int bwd_in[6] = { FC_T_Q, FC_T_K, FC_T_V, FC_T_DO, FC_T_O, FC_T_LSE }, bwd_out[3] = { FC_T_DQ, FC_T_DK, FC_T_DV };
    const int *tin = bwd ? bwd_in : fwd_in, *tout = bwd ? bwd_out : fwd_out;
    const int nin = bwd ? 6 : 3, nout = bwd ? 3 : 2, nfill = bwd ? 4 : 3; /* bwd: o, lse stay poisoned */
    fc_buf buf[FC_T_COUNT];
    memset(buf, 0, sizeof buf);
    void *snap[3] = { NULL, NULL, NULL };
    int ok = 1;
    for (int i = 0; i < nin && ok; i++) {
        ok = fc_buf_alloc(&res.c, tin[i], 64, FC_POISON_A, &buf[tin[i]], msg, sizeof msg) == 0;
        if (ok && i < nfill) fc_case_fill(&res.c, &buf[tin[i]]);
    }
    for (int i = 0; i < nout && ok; i++) {
        const fc_buf *b;
        ok = fc_buf_alloc(&res.c, tout[i], 64, FC_POISON_A, &buf[tout[i]], msg, sizeof msg) == 0;
        if (!ok) break;
        b = &buf[tout[i]];
        snap[i] = malloc((size_t)b->alloc_elems * b->elem_size);
        if (snap[i]) memcpy(snap[i], b->alloc, (size_t)b->alloc_elems * b->elem_size);
        else ok = 0;
    }
    if (!ok) {
        snprintf(res.failure, sizeof res.failure, "harness");
        snprintf(res.detail, sizeof res.detail, "%s buffers: %s", kind, msg);
    } else {
        fa_error err;
        memset(&err, 0, sizeof err);
        fa_status st;
#define HP_SET(tensor, t) do { (tensor).ptr = fc_buf_view(&buf[t]); memcpy((tensor).stride, buf[t].stride, sizeof (tensor).stride); } while (0)
        if (bwd) {
            fa_bwd_args a;
            memset(&a, 0, sizeof a);
            a.p = res.c.p;
            HP_SET(a.q, FC_T_Q); HP_SET(a.k, FC_T_K); HP_SET(a.v, FC_T_V); HP_SET(a.o, FC_T_O); HP_SET(a.dout, FC_T_DO);
            HP_SET(a.dq, FC_T_DQ); HP_SET(a.dk, FC_T_DK); HP_SET(a.dv, FC_T_DV); HP_SET(a.lse, FC_T_LSE);
            st = be->backward(&a, &err);
        } else {
            fa_fwd_args a;
            memset(&a, 0, sizeof a);
            a.p = res.c.p;
            HP_SET(a.q, FC_T_Q); HP_SET(a.k, FC_T_K); HP_SET(a.v, FC_T_V); HP_SET(a.o, FC_T_O); HP_SET(a.lse, FC_T_LSE);
            st = be->forward(&a, &err);
        }
#undef HP_SET
        res.status = st;
        res.err = err;
        int wrote = 0;
        for (int i = 0; i < nout; i++) {
            const fc_buf *b = &buf[tout[i]];
            wrote |= memcmp(snap[i], b->alloc, (size_t)b->alloc_elems * b->elem_size) != 0;
        }
        const char *f = st == FA_OK ? "accepted_invalid"
                        : st != FA_ERR_INVALID && st != FA_ERR_UNSUPPORTED ? "wrong_status"
                        : wrote ? "write_on_reject"
                        : !err.arg[0] ? "no_arg_name"
                        : !err.msg[0] ? "no_message" : "";
        snprintf(res.failure, sizeof res.failure, "%s", f);
        if (f[0])
            snprintf(res.detail, sizeof res.detail, "%s: %s\n%s returned %s%s; arg '%s', message '%s'", kind, res.what,
                     bwd ? "backward" : "forward", fa_status_name(st), wrote ? " and wrote the host outputs" : "", err.arg,
                     err.msg);
    }
    res.applied = 1;
    if (cb) cb(user, &res);
    for (int i = 0; i < 3; i++) free(snap[i]);
    for (int t = 0; t < FC_T_COUNT; t++) fc_buf_free(&buf[t]);
    return 1;
}

static int64_t misuse_host_ptr(const fa_backend *be, fc_sweep_misuse_cb cb, void *user) {
    if (be->memspace != FA_MEM_CUDA) return 0;
    return misuse_host_ptr_one(be, 0, cb, user) + (be->backward ? misuse_host_ptr_one(be, 1, cb, user) : 0);
}

/* ------------------------------------------------------------------------- */
/* PRODUCTION                                                                */

static void build_production(sweep_list *s) {
    typedef struct { int64_t B, Sq, Sk, Hq, Hkv, D; fa_dtype dt; fa_causal causal; int64_t wl; int huge; } prod_spec;
    static const prod_spec ps[4] = {
        { 1, 8192, 8192, 16, 2, 128, FA_BF16, FA_CAUSAL_BOTTOM_RIGHT, -1, 0 },   /* GQA 8, causal */
        { 2, 16384, 16384, 8, 8, 64, FA_F16, FA_CAUSAL_TOP_LEFT, -1, 0 },        /* MHA, long */
        { 1, 8192, 12288, 32, 4, 128, FA_BF16, FA_CAUSAL_BOTTOM_RIGHT, 1024, 0 },/* Sq < Sk, causal window */
        /* > 2^31 elements in Q, O, dO, dQ: 320 * 2048 * 32 * 128 = 2.68e9; batches 256..319 (20% of
           the rows) start past element 2^31: a batch offset computed in 32 bits reads and writes the
           wrong rows there. S = 2048 keeps the oracle's quadratic work (B Hq S^2 D = 5.5e12, a
           quarter of B80 S8192's) within the category's time on the GPU tier: 182 s for this
           entry on the H100, forward and backward on every element (B640 S1024 took 160 s: the
           tier's cost per (batch, head) pair is not negligible there; properties/sweep/
           RESULTS-2026-11-25.md); the long sequences are the other entries' */
        { 320, 2048, 2048, 32, 4, 128, FA_BF16, FA_CAUSAL_BOTTOM_RIGHT, -1, 1 },
    };
    for (int i = 0; i < 4; i++) {
        const prod_spec *p = &ps[i];
        if (p->huge && !s->o->big) continue;
        if (s->o->quick && i == 1) continue;
        fc_case c;
        fc_case_default(&c);
        c.p.batch = p->B; c.p.seqlen_q = p->Sq; c.p.seqlen_k = p->Sk; c.p.heads_q = p->Hq; c.p.heads_kv = p->Hkv;
        c.p.head_dim_qk = c.p.head_dim_v = p->D; c.p.dtype = p->dt; c.p.causal = p->causal; c.p.window_left = p->wl;
        c.backward = s->o->has_bwd;
        c.deterministic = 0;   /* the shipped default (atomic dQ) */
        c.seed = 0x9d0d0000ull + (uint64_t)i;
        char label[120];
        snprintf(label, sizeof label, "production B%lld Sq%lld Sk%lld H%lld/%lld D%lld %s c%d w%lld%s", (long long)p->B,
                 (long long)p->Sq, (long long)p->Sk, (long long)p->Hq, (long long)p->Hkv, (long long)p->D,
                 p->dt == FA_BF16 ? "bf16" : "fp16", (int)p->causal, (long long)p->wl, p->huge ? " (> 2^31 elements)" : "");
        fc_sweep_entry *e = push(s, FC_SWEEP_PRODUCTION, &c, -1, label);
        if (e && p->huge) e->determinism = 0;
    }
}

int64_t fc_sweep_build(const fc_sweep_opts *o, fc_sweep_entry **out) {
    sweep_list s;
    memset(&s, 0, sizeof s);
    s.o = o;
    *out = NULL;
    if (o->sets & FC_SWEEP_SET_BASE) build_base(&s);
    if (o->sets & FC_SWEEP_SET_CUDA) build_cuda(&s);
    if (o->sets & FC_SWEEP_SET_CUDA) build_cuda_coverage(&s);
    if (o->sets & FC_SWEEP_SET_PRODUCTION) build_production(&s);
    if (s.oom) {
        free(s.e);
        return -1;
    }
    if (!s.e) s.e = malloc(sizeof *s.e);
    *out = s.e;
    return s.e ? s.n : -1;
}

/* ------------------------------------------------------------------------- */
/* judging                                                                   */

fc_outcome fc_sweep_check(const fa_backend *be, const fc_sweep_entry *e, fc_verdict *v) {
    if (e->prop >= 0 && e->prop < fc_prop_count()) return fc_prop_table[e->prop].fn(be, &e->c, v);
    fc_check_opts o;
    fc_check_opts_default(&o);
    o.determinism = e->determinism;
    return fc_check_case(be, &e->c, &o, v);
}

int fc_sweep_met(const fc_sweep_entry *e, const fc_verdict *v, char *why, size_t whylen) {
    if (why && whylen) why[0] = 0;
    if (v->outcome == FC_PASS) return 1;
    if (v->outcome == FC_FAIL) {
        int k = 0;   /* the first failure's reason (skips and overflow notes may precede it) */
        while (k + 1 < v->n_reasons && !fc_reason_fails(v->reason[k].kind)) k++;
        if (why && whylen) snprintf(why, whylen, "failed: [%s] %s", v->n_reasons ? v->reason[k].check : "?",
                                    v->n_reasons ? v->reason[k].text : "");
        return 0;
    }
    const int judged = e->expect == FC_SWEEP_EXPECT_JUDGED || e->expect == FC_SWEEP_EXPECT_JUDGED_ALL;
    if (v->outcome == FC_OVERFLOW && !judged) {
        if (why && whylen) snprintf(why, whylen, "overflow-sensitive (not a pass): %s", v->n_reasons ? v->reason[0].text : "");
        return 0;
    }
    /* SKIP (or, for a finding, OVERFLOW): the reasons' kinds and phases, as their makers set them */
    int unsupported = 0, uncheckable = 0, other = 0, bwd_only = 1;
    for (int i = 0; i < v->n_reasons; i++) {
        const fc_reason *r = &v->reason[i];
        if (r->kind == FC_REASON_NOTE) continue; /* a rule applied (check.h), not a reason */
        if (r->kind == FC_REASON_OVERFLOW || r->kind == FC_REASON_UNCHECKABLE) uncheckable++; /* no finite bound (BOUNDS.md 11) */
        else if (r->kind == FC_REASON_UNSUPPORTED) unsupported++, bwd_only &= r->phase == FC_PHASE_BACKWARD;
        else other++;
    }
    if (e->expect == FC_SWEEP_EXPECT_DECLINE && unsupported && !other) return 1;
    /* every reason the backward's UNSUPPORTED, after a forward whose O had judged elements */
    if (e->expect == FC_SWEEP_EXPECT_FWD_BWD_MAY_DECLINE && v->outcome == FC_SKIP && !uncheckable && !other &&
        unsupported && bwd_only && v->t[FC_T_O].checked && v->t[FC_T_O].elements > 0)
        return 1;
    if (judged && uncheckable && !unsupported && !other) {
        /* the tensor the finding is about (dQ; O for a forward-only run) had judged elements */
        const fc_tensor_stats *ts = &v->t[e->c.backward ? FC_T_DQ : FC_T_O];
        const int dkdv = e->expect != FC_SWEEP_EXPECT_JUDGED_ALL || !e->c.backward ||
                         (v->t[FC_T_DK].checked && v->t[FC_T_DK].elements > 0 && v->t[FC_T_DV].checked &&
                          v->t[FC_T_DV].elements > 0);
        if (ts->checked && ts->elements > 0 && dkdv) return 1;
    }
    if (why && whylen) snprintf(why, whylen, "not judged (SKIP): %s", v->n_reasons ? v->reason[0].text : "");
    return 0;
}

int fc_sweep_miss(const fc_sweep_entry *e, const fc_verdict *v) {
    if (v->outcome == FC_FAIL || v->outcome == FC_PASS) return FC_SWEEP_MISS_FAIL;
    if (fc_sweep_cat_set(e->category) == FC_SWEEP_SET_BASE) return FC_SWEEP_MISS_SKIP;
    /* SKIP or OVERFLOW of a device entry: the backend's own UNSUPPORTED (where the entry allows
       no decline) is the backend's; anything else is the entry's */
    if (v->outcome == FC_SKIP)
        for (int i = 0; i < v->n_reasons; i++)
            if (v->reason[i].kind == FC_REASON_UNSUPPORTED) return FC_SWEEP_MISS_FAIL;
    return FC_SWEEP_MISS_DEFECT;
}

int64_t fc_sweep_misuse(const fa_backend *be, fc_sweep_misuse_cb cb, void *user) {
    fz_budget b;
    fz_budget_default(&b);
    static fz_misuse_result res;
    int64_t n = 0;
    for (int kind = 0; kind < 14; kind++)
        for (unsigned param = 0; param < 64; param += 7)
            for (int bwd = 0; bwd < 2; bwd++) {
                char text[256];
                int len = snprintf(text, sizeof text, "# misuse kind=%d param=%u\nshape = 2 17 33 4 2 64 40\nbackward = %d\n%s",
                                   kind, param, bwd, kind == 11 ? "mask = random_neginf\n" : "");
                fz_misuse_run(be, (const uint8_t *)text, (size_t)len, &b, &res);
                if (!res.applied) continue;
                n++;
                if (cb) cb(user, &res);
            }
    n += misuse_host_ptr(be, cb, user);
    return n;
}

int64_t fc_sweep_run(const fa_backend *be, const fc_sweep_entry *e, int64_t n, int only, FILE *log,
                     fc_sweep_tally tally[FC_SWEEP_CAT_COUNT]) {
    fc_sweep_tally local[FC_SWEEP_CAT_COUNT];
    if (!tally) tally = local;
    memset(tally, 0, sizeof(fc_sweep_tally) * FC_SWEEP_CAT_COUNT);
    fc_verdict *v = malloc(sizeof *v);
    if (!v) {
        if (log) fprintf(log, "FAIL sweep: out of memory for a verdict\n");
        return n > 0 ? n : 1;
    }
    int64_t failed = 0;
    for (int64_t i = 0; i < n; i++) {
        if (only >= 0 && e[i].category != only) continue;
        fc_sweep_tally *t = &tally[e[i].category];
        double t0 = fc_clock_s();
        fc_sweep_check(be, &e[i], v);
        double dt = fc_clock_s() - t0;
        char why[400];
        int ok = fc_sweep_met(&e[i], v, why, sizeof why);
        /* a BASE entry the backend declines or cannot have judged is skipped, as in `flashcheck
           certify` (these cases are built for any backend: a layout it does not take, a head dim
           pair it does not claim, values without a finite bound); the device sets keep their
           stated expectations. An overflow-sensitive BASE entry (oracle/BOUNDS.md 11: no finite
           bound where the profile's intermediates may overflow) is logged and counted with the
           skips, as certify counts it apart and does not fail on it */
        const int miss = ok ? 0 : fc_sweep_miss(&e[i], v);
        const int skip = miss == FC_SWEEP_MISS_SKIP, defect = miss == FC_SWEEP_MISS_DEFECT;
        t->ran++;
        t->seconds += dt;
        if (skip) t->skipped++;
        else if (defect) {
            t->defects++;
            failed++;
        } else if (!ok) {
            t->failed++;
            failed++;
        }
        if (log) {
            double worst = 0;
            int64_t elems = 0;
            for (int k = 0; k < FC_T_COUNT; k++)
                if (v->t[k].checked) {
                    elems += v->t[k].elements;
                    if (v->t[k].max_ratio > worst) worst = v->t[k].max_ratio;
                }
            if (skip)
                fprintf(log, "skip %s%s%s: %s (%.1f s)\n", e[i].label, e[i].prop >= 0 ? " property " : "",
                        e[i].prop >= 0 ? fc_prop_table[e[i].prop].name : "", why, dt);
            else if (defect)
                fprintf(log, "DEFECT %s%s%s: harness defect, the sweep built an entry it cannot judge (not a finding "
                             "against the backend, not a pass): %s (%.1f s)\n", e[i].label,
                        e[i].prop >= 0 ? " property " : "", e[i].prop >= 0 ? fc_prop_table[e[i].prop].name : "", why, dt);
            else if (ok)
                fprintf(log, "ok   %s%s%s: %s, %lld elements judged, worst error/bound %.3g (%.1f s)\n", e[i].label,
                        e[i].prop >= 0 ? " property " : "", e[i].prop >= 0 ? fc_prop_table[e[i].prop].name : "",
                        fc_outcome_name(v->outcome), (long long)elems, worst, dt);
            else {
                fprintf(log, "FAIL %s%s%s: %s (%.1f s)\n", e[i].label, e[i].prop >= 0 ? " property " : "",
                        e[i].prop >= 0 ? fc_prop_table[e[i].prop].name : "", why, dt);
                fc_verdict_print(v, log);
            }
            fflush(log);
        }
    }
    free(v);
    if (log) {
        fprintf(log, "%-18s %7s %7s %7s %7s %9s\n", "category", "cases", "failed", "skipped", "defects", "seconds");
        for (int k = 0; k < FC_SWEEP_CAT_COUNT; k++)
            if (tally[k].ran)
                fprintf(log, "%-18s %7lld %7lld %7lld %7lld %9.1f\n", cat_names[k], (long long)tally[k].ran,
                        (long long)tally[k].failed, (long long)tally[k].skipped, (long long)tally[k].defects,
                        tally[k].seconds);
    }
    return failed;
}
