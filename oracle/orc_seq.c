/* orc_seq.c: the layouts of contract v3 (packed varlen batches, seqused_k, paged K/V)
 * for the oracle, written from kernels/flash_api.h (fa_varlen, fa_paged); nothing is
 * shared with a kernel. BOUNDS.md section 13.
 *
 * A packed or paged problem is B independent dense problems: sequence b has Sq_b
 * queries and Sk_b keys, its own causal/window diagonals (bottom-right aligns its own
 * ends), and reads its rows at the packed offsets (cu_q[b] + i, cu_k[b] + j) or its keys
 * through the block table. orc_seq_sub_* builds sequence b's dense view (batch 1,
 * seqlen_q = Sq_b, seqlen_k = Sk_b): a strided view into the caller's tensors, or for a
 * paged K/V an exact copy of the keys the table names (a gather: decoding is exact, so
 * the copy changes no value). The dense tiers then evaluate it unchanged: every bound of
 * sections 2-12 holds per sequence, because no sum of the contract runs across
 * sequences, except dK/dV of a shared page (section 13.3) and dsinks (section 14.4).
 *
 * No arithmetic here besides integer offsets (int64, checked against overflow in
 * orc_seqs_init). */
#include <stdio.h>
#include <string.h>

#include "oracle/orc_internal.h"

int orc_seq_active(const fa_problem *p, const fa_varlen *vl) {
    return p->page_size != 0 || (vl && (vl->cu_seqlens_q || vl->cu_seqlens_k || vl->seqused_k));
}

void orc_seqs_free(orc_seqs *s) {
    if (!s) return;
    free(s->sq); free(s->sk); free(s->ka); free(s->q0); free(s->k0);
    memset(s, 0, sizeof *s);
}

/* cu [B+1]: cu[0] = 0, non-decreasing, every span <= max. */
static fa_status seq_check_cu(const int32_t *cu, int64_t B, int64_t max, const char *name, fa_error *err) {
    if (cu[0] != 0)
        return orc_fail(err, FA_ERR_INVALID, name, "%s[0] = %d; it must be 0.", name, (int)cu[0]);
    for (int64_t b = 0; b < B; b++) {
        int64_t len = (int64_t)cu[b + 1] - (int64_t)cu[b];
        if (len < 0)
            return orc_fail(err, FA_ERR_INVALID, name, "%s decreases at %lld (%d > %d); it must be "
                            "non-decreasing.", name, (long long)b, (int)cu[b], (int)cu[b + 1]);
        if (len > max)
            return orc_fail(err, FA_ERR_INVALID, name, "sequence %lld of %s has %lld rows, above the "
                            "maximum %lld (p.seqlen_%c).", (long long)b, name, (long long)len,
                            (long long)max, name[11]);
    }
    return FA_OK;
}

fa_status orc_seqs_init(orc_seqs *s, const fa_problem *p, const fa_varlen *vl, const fa_paged *pg,
                        fa_error *err) {
    fa_status st;
    memset(s, 0, sizeof *s);
    int64_t B = p->batch;
    const int32_t *cq = vl ? vl->cu_seqlens_q : NULL, *ck = vl ? vl->cu_seqlens_k : NULL;
    const int32_t *used = vl ? vl->seqused_k : NULL;
    if (p->page_size < 0)
        return orc_fail(err, FA_ERR_INVALID, "page_size", "page_size = %lld; it must be >= 0 (0: not paged).",
                        (long long)p->page_size);
    if (cq && (st = seq_check_cu(cq, B, p->seqlen_q, "cu_seqlens_q", err))) return st;
    if (ck && (st = seq_check_cu(ck, B, p->seqlen_k, "cu_seqlens_k", err))) return st;
    if (p->page_size >= 1) {
        if (ck)
            return orc_fail(err, FA_ERR_INVALID, "cu_seqlens_k", "cu_seqlens_k with a paged K/V; the two are "
                            "exclusive (pass seqused_k for per-sequence lengths).");
        if (!pg || !pg->block_table)
            return orc_fail(err, FA_ERR_INVALID, "block_table", "page_size = %lld without a block table.",
                            (long long)p->page_size);
        if (pg->max_pages_per_seq < 1 || pg->num_pages < 1 || pg->table_stride < pg->max_pages_per_seq)
            return orc_fail(err, FA_ERR_INVALID, "max_pages_per_seq", "the paged view needs max_pages_per_seq "
                            ">= 1, num_pages >= 1 and table_stride >= max_pages_per_seq.");
        if ((__int128)pg->max_pages_per_seq * p->page_size < p->seqlen_k)
            return orc_fail(err, FA_ERR_INVALID, "max_pages_per_seq", "max_pages_per_seq * page_size < seqlen_k.");
    } else if (pg && pg->block_table) {
        return orc_fail(err, FA_ERR_INVALID, "page_size", "a block table with page_size 0.");
    }
    s->B = B;
    size_t nb = (size_t)(B > 0 ? B : 1) * sizeof(int64_t);
    s->sq = malloc(nb); s->sk = malloc(nb); s->ka = malloc(nb); s->q0 = malloc(nb); s->k0 = malloc(nb);
    if (!s->sq || !s->sk || !s->ka || !s->q0 || !s->k0) {
        orc_seqs_free(s);
        return orc_fail(err, FA_ERR_NOMEM, "", "out of memory for %lld sequences.", (long long)B);
    }
    s->paged = p->page_size >= 1;
    if (s->paged) {
        s->table = pg->block_table;
        s->tstride = pg->table_stride;
        s->page_size = p->page_size;
        s->num_pages = pg->num_pages;
    }
    for (int64_t b = 0; b < B; b++) {
        s->sq[b] = cq ? (int64_t)cq[b + 1] - cq[b] : p->seqlen_q;
        s->q0[b] = cq ? cq[b] : -1;
        s->k0[b] = ck ? ck[b] : -1;
        int64_t alloc = ck ? (int64_t)ck[b + 1] - ck[b]
                        : s->paged ? pg->max_pages_per_seq * p->page_size : p->seqlen_k;
        int64_t sk = ck ? alloc : p->seqlen_k;
        s->ka[b] = alloc;
        if (used) {
            if (used[b] < 0 || used[b] > alloc) {
                orc_seqs_free(s);
                return orc_fail(err, FA_ERR_INVALID, "seqused_k", "seqused_k[%lld] = %d; it must be in [0, %lld] "
                                "(the sequence's allocated keys).", (long long)b, (int)used[b], (long long)alloc);
            }
            sk = used[b];
        }
        if (sk > p->seqlen_k) {
            orc_seqs_free(s);
            return orc_fail(err, FA_ERR_INVALID, "seqused_k", "sequence %lld uses %lld keys, above seqlen_k = %lld.",
                            (long long)b, (long long)sk, (long long)p->seqlen_k);
        }
        s->sk[b] = sk;
        if (s->paged)
            for (int64_t t = 0; t < (sk + p->page_size - 1) / p->page_size; t++) {
                int32_t pgi = s->table[b * s->tstride + t];
                if (pgi < 0 || pgi >= s->num_pages) {
                    orc_seqs_free(s);
                    return orc_fail(err, FA_ERR_INVALID, "block_table", "block_table[%lld][%lld] = %d is outside "
                                    "[0, num_pages = %lld).", (long long)b, (long long)t, (int)pgi,
                                    (long long)s->num_pages);
                }
            }
    }
    s->rows_q = cq ? cq[B] : 0;
    s->rows_k = ck ? ck[B] : 0;
    return FA_OK;
}

int64_t orc_seq_qoff(const orc_seqs *s, const int64_t st[4], int64_t b, int64_t i, int64_t h, int64_t d) {
    if (s->q0[b] >= 0) return (s->q0[b] + i) * st[1] + h * st[2] + d * st[3];
    return b * st[0] + i * st[1] + h * st[2] + d * st[3];
}

int64_t orc_seq_lse_off(const orc_seqs *s, const int64_t st[3], int64_t b, int64_t h, int64_t i) {
    if (s->q0[b] >= 0) return h * st[1] + (s->q0[b] + i) * st[2];
    return b * st[0] + h * st[1] + i * st[2];
}

int64_t orc_seq_koff(const orc_seqs *s, const int64_t st[4], int64_t b, int64_t j, int64_t h, int64_t d) {
    if (s->paged) {
        int64_t page = s->table[b * s->tstride + j / s->page_size];
        return page * st[0] + (j % s->page_size) * st[1] + h * st[2] + d * st[3];
    }
    if (s->k0[b] >= 0) return (s->k0[b] + j) * st[1] + h * st[2] + d * st[3];
    return b * st[0] + j * st[1] + h * st[2] + d * st[3];
}

/* The K-side input of sequence b as a dense [1, Sk_b, H, Dm] view: strided into the
 * caller's tensor, or (paged) gathered into a contiguous copy. */
static int seq_kview(const orc_seqs *s, const fa_tensor *t, int64_t b, int64_t H, int64_t Dm, fa_tensor *out,
                     uint16_t **buf) {
    const uint16_t *base = t->ptr;
    memset(out, 0, sizeof *out);
    *buf = NULL;
    if (!s->paged) {
        out->ptr = (void *)(base + orc_seq_koff(s, t->stride, b, 0, 0, 0));
        out->stride[0] = 0;
        for (int k = 1; k < 4; k++) out->stride[k] = t->stride[k];
        return 1;
    }
    int64_t sk = s->sk[b];
    uint16_t *x = malloc((size_t)(sk * H * Dm > 0 ? sk * H * Dm : 1) * 2);
    if (!x) return 0;
    for (int64_t j = 0; j < sk; j++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < Dm; d++) x[(j * H + h) * Dm + d] = base[orc_seq_koff(s, t->stride, b, j, h, d)];
    out->ptr = x;
    out->stride[0] = sk * H * Dm; out->stride[1] = H * Dm; out->stride[2] = Dm; out->stride[3] = 1;
    *buf = x;
    return 1;
}

static void seq_qview(const orc_seqs *s, const fa_tensor *t, int64_t b, fa_tensor *out) {
    memset(out, 0, sizeof *out);
    if (!t->ptr) return;
    out->ptr = (void *)((const uint16_t *)t->ptr + orc_seq_qoff(s, t->stride, b, 0, 0, 0));
    out->stride[0] = 0;
    for (int k = 1; k < 4; k++) out->stride[k] = t->stride[k];
}

static void seq_sub_problem(const fa_problem *p, const orc_seqs *s, int64_t b, fa_problem *q) {
    *q = *p;
    q->batch = 1;
    q->seqlen_q = s->sq[b];
    q->seqlen_k = s->sk[b];
    q->page_size = 0;
}

int orc_seq_sub_fwd(const fa_fwd_args *a, const orc_seqs *s, int64_t b, fa_fwd_args *sub,
                    uint16_t **kbuf, uint16_t **vbuf) {
    memset(sub, 0, sizeof *sub);
    *kbuf = *vbuf = NULL;
    seq_sub_problem(&a->p, s, b, &sub->p);
    seq_qview(s, &a->q, b, &sub->q);
    if (!seq_kview(s, &a->k, b, a->p.heads_kv, a->p.head_dim_qk, &sub->k, kbuf) ||
        !seq_kview(s, &a->v, b, a->p.heads_kv, a->p.head_dim_v, &sub->v, vbuf)) {
        free(*kbuf); free(*vbuf); *kbuf = *vbuf = NULL;
        return 0;
    }
    if (a->mask.ptr) { /* dense Q and K only (the contract refuses a mask with cu_seqlens) */
        sub->mask = a->mask;
        sub->mask.ptr = a->mask.ptr + b * a->mask.stride[0];
        sub->mask.stride[0] = 0;
    }
    sub->sinks = a->sinks;
    return 1;
}

int orc_seq_sub_bwd(const fa_bwd_args *a, const orc_seqs *s, int64_t b, fa_bwd_args *sub,
                    uint16_t **kbuf, uint16_t **vbuf) {
    memset(sub, 0, sizeof *sub);
    *kbuf = *vbuf = NULL;
    seq_sub_problem(&a->p, s, b, &sub->p);
    seq_qview(s, &a->q, b, &sub->q);
    seq_qview(s, &a->o, b, &sub->o);
    seq_qview(s, &a->dout, b, &sub->dout);
    if (!seq_kview(s, &a->k, b, a->p.heads_kv, a->p.head_dim_qk, &sub->k, kbuf) ||
        !seq_kview(s, &a->v, b, a->p.heads_kv, a->p.head_dim_v, &sub->v, vbuf)) {
        free(*kbuf); free(*vbuf); *kbuf = *vbuf = NULL;
        return 0;
    }
    sub->lse.ptr = a->lse.ptr + orc_seq_lse_off(s, a->lse.stride, b, 0, 0);
    sub->lse.stride[0] = 0; sub->lse.stride[1] = a->lse.stride[1]; sub->lse.stride[2] = a->lse.stride[2];
    if (a->mask.ptr) {
        sub->mask = a->mask;
        sub->mask.ptr = a->mask.ptr + b * a->mask.stride[0];
        sub->mask.stride[0] = 0;
    }
    sub->sinks = a->sinks;
    return 1;
}

orc_index *orc_sample_seq(int64_t B, int64_t H, const int64_t *len, int64_t max, uint64_t seed, int64_t *n) {
    /* one dense sample over the concatenated (b, h, s) list, mapped back */
    int64_t total = 0;
    for (int64_t b = 0; b < B; b++) total += H * len[b];
    int64_t m;
    orc_index *flat = orc_sample(1, 1, total, max, seed, &m);
    if (!flat) return NULL;
    int64_t b = 0, base = 0; /* flat index base of sequence b */
    for (int64_t x = 0; x < m; x++) {
        int64_t t = flat[x].s;
        while (t >= base + H * len[b]) { base += H * len[b]; b++; }
        int64_t r = t - base;
        flat[x].b = b;
        flat[x].h = r / len[b];
        flat[x].s = r % len[b];
    }
    *n = m;
    return flat;
}
