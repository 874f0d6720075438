/* prop_v3.c: the contract-v3 properties packing and paging (properties.h).
 *
 * Both are oracle-free bitwise relations:
 *   packing  every sequence of a packed / seqused / paged batch, run alone as a dense B = 1
 *            case on the same data, gives the same bits. Exact on flashcheck's CPU backends,
 *            whose work units never span two sequences and start their tiles at each
 *            sequence's first key (kernels/cpu/cpu_fwd.c, cpu_bwd.c); on other backends
 *            nothing promises bit equality, so the property is skipped there until the
 *            oracle's v3 bounds can judge it.
 *   paging   which physical page holds a key is not part of the math: permuting the pool's
 *            pages and the table's entries alike must give the same bits on ANY backend
 *            (forward and backward; dK, dV move with their pages). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "properties/prop_internal.h"
#include "properties/properties.h"


static int v3_run(fc_run *r, const fc_case *c, int poison, fc_verdict *v, const char *prop) {
    char msg[300];
    if (fc_run_init(r, c, poison, msg, sizeof msg)) {
        fc_prop_fail(v, prop, "harness: %s", msg);
        return -1;
    }
    return 0;
}


/* Logical indices in a run of query row i / key j of sequence b (head h, component d). */
static void q_index(const fc_run *r, int64_t b, int64_t i, int64_t h, int64_t d, int64_t idx[4]) {
    if (r->cu_q) { idx[0] = 0; idx[1] = r->cu_q[b] + i; }
    else { idx[0] = b; idx[1] = i; }
    idx[2] = h; idx[3] = d;
}
static void lse_index(const fc_run *r, int64_t b, int64_t i, int64_t h, int64_t idx[4]) {
    if (r->cu_q) { idx[0] = 0; idx[2] = r->cu_q[b] + i; }
    else { idx[0] = b; idx[2] = i; }
    idx[1] = h; idx[3] = 0;
}
static void k_index(const fc_run *r, int64_t b, int64_t j, int64_t h, int64_t d, int64_t idx[4]) {
    if (r->table) {
        const int64_t ps = r->c.p.page_size;
        idx[0] = r->table[b * r->table_stride + j / ps]; idx[1] = j % ps;
    } else if (r->cu_k) {
        idx[0] = 0; idx[1] = r->cu_k[b] + j;
    } else {
        idx[0] = b; idx[1] = j;
    }
    idx[2] = h; idx[3] = d;
}

static int same16(const fc_buf *a, const int64_t ia[4], const fc_buf *b, const int64_t ib[4]) {
    const char *pa = (const char *)a->alloc + fc_buf_index(a, ia) * (int64_t)a->elem_size;
    const char *pb = (const char *)b->alloc + fc_buf_index(b, ib) * (int64_t)b->elem_size;
    return memcmp(pa, pb, a->elem_size) == 0;
}

static int is_zero16(const fc_buf *a, const int64_t ia[4]) {
    const uint16_t *pa = (const uint16_t *)a->alloc + fc_buf_index(a, ia);
    return *pa == 0;
}

static int cpu_backend(const fa_backend *be) {
    return be->name && (strcmp(be->name, "cpu") == 0 || strcmp(be->name, "cpu_ftz") == 0);
}

/* ---------------------------------------------------------------------------
 * packing
 * ------------------------------------------------------------------------- */
fc_outcome fc_prop_packing(const fa_backend *be, const fc_case *c, fc_verdict *v) {
    const char *prop = "packing";
    fc_verdict_init(v);
    const fa_problem *p = &c->p;
    if (!(c->v3.varlen_q || c->v3.varlen_k || c->v3.has_seqused || p->page_size >= 1)) {
        fc_verdict_skip(v, "%s: no packed sequences, seqused_k or paged cache", prop);
        return v->outcome;
    }
    if (c->mask.kind != FC_MASK_NONE) {
        fc_verdict_skip(v, "%s: a case with an additive mask", prop);
        return v->outcome;
    }
    if (!cpu_backend(be)) {
        fc_verdict_skip(v, "%s: bitwise only on flashcheck's CPU backends (a bound needs the v3 oracle)", prop);
        return v->outcome;
    }
    const int bwd = c->backward && be->backward;
    fc_run ra;
    if (v3_run(&ra, c, FC_POISON_A, v, prop)) return v->outcome;
    if (fc_prop_call(be, &ra, bwd, v, prop) != 1) {
        fc_run_free(&ra);
        return v->outcome;
    }
    /* how many (sequence, used key) map to each page: dK/dV of a shared page are sums */
    int32_t *uses = NULL;
    if (ra.table) {
        uses = calloc((size_t)c->v3.num_pages, sizeof(int32_t));
        for (int64_t b = 0; b < p->batch; b++)
            for (int64_t j = 0; j < fc_case_seq_k(c, b); j += p->page_size)
                uses[ra.table[b * ra.table_stride + j / p->page_size]]++;
    }
    fc_case dflt;
    fc_case_default(&dflt);
    float *dsum = calloc((size_t)p->heads_q + 1, sizeof(float));
    int64_t bad[6] = {0, 0, 0, 0, 0, 0}; /* o, lse, dq, dk, dv, dk/dv of unused keys */
    int ok = 1;
    for (int64_t b = 0; b < p->batch && ok; b++) {
        const int64_t sq = fc_case_seq_q(c, b), sk = fc_case_seq_k(c, b);
        fc_case cs = *c;
        memset(&cs.v3, 0, sizeof cs.v3);
        cs.v3.sinks = c->v3.sinks;
        memcpy(cs.layout, dflt.layout, sizeof cs.layout);
        cs.p.batch = 1; cs.p.seqlen_q = sq; cs.p.seqlen_k = sk; cs.p.page_size = 0;
        fc_run rs;
        if (v3_run(&rs, &cs, FC_POISON_B, v, prop)) { ok = 0; break; }
        int64_t is[4], ia[4];
        for (int64_t i = 0; i < sq; i++)
            for (int64_t h = 0; h < p->heads_q; h++) {
                for (int64_t d = 0; d < p->head_dim_qk; d++) {
                    q_index(&ra, b, i, h, d, ia); q_index(&rs, 0, i, h, d, is);
                    fc_buf_set(&rs.buf[FC_T_Q], is, fc_buf_get(&ra.buf[FC_T_Q], ia));
                }
                for (int64_t d = 0; bwd && d < p->head_dim_v; d++) {
                    q_index(&ra, b, i, h, d, ia); q_index(&rs, 0, i, h, d, is);
                    fc_buf_set(&rs.buf[FC_T_DO], is, fc_buf_get(&ra.buf[FC_T_DO], ia));
                }
            }
        for (int64_t j = 0; j < sk; j++)
            for (int64_t h = 0; h < p->heads_kv; h++) {
                for (int64_t d = 0; d < p->head_dim_qk; d++) {
                    k_index(&ra, b, j, h, d, ia); k_index(&rs, 0, j, h, d, is);
                    fc_buf_set(&rs.buf[FC_T_K], is, fc_buf_get(&ra.buf[FC_T_K], ia));
                }
                for (int64_t d = 0; d < p->head_dim_v; d++) {
                    k_index(&ra, b, j, h, d, ia); k_index(&rs, 0, j, h, d, is);
                    fc_buf_set(&rs.buf[FC_T_V], is, fc_buf_get(&ra.buf[FC_T_V], ia));
                }
            }
        if (fc_prop_call(be, &rs, bwd, v, prop) != 1) { fc_run_free(&rs); ok = 0; break; }
        for (int64_t i = 0; i < sq; i++)
            for (int64_t h = 0; h < p->heads_q; h++) {
                lse_index(&ra, b, i, h, ia); lse_index(&rs, 0, i, h, is);
                bad[1] += !same16(&ra.buf[FC_T_LSE], ia, &rs.buf[FC_T_LSE], is);
                for (int64_t d = 0; d < p->head_dim_v; d++) {
                    q_index(&ra, b, i, h, d, ia); q_index(&rs, 0, i, h, d, is);
                    bad[0] += !same16(&ra.buf[FC_T_O], ia, &rs.buf[FC_T_O], is);
                }
                for (int64_t d = 0; bwd && d < p->head_dim_qk; d++) {
                    q_index(&ra, b, i, h, d, ia); q_index(&rs, 0, i, h, d, is);
                    bad[2] += !same16(&ra.buf[FC_T_DQ], ia, &rs.buf[FC_T_DQ], is);
                }
            }
        if (bwd) {
            const int64_t alloc = ra.table ? sk : fc_case_seq_alloc(c, b);
            for (int64_t j = 0; j < alloc; j++)
                for (int64_t h = 0; h < p->heads_kv; h++) {
                    k_index(&ra, b, j, h, 0, ia);
                    if (uses && uses[ia[0]] > 1) continue; /* a shared page: a sum of sequences */
                    for (int t = 0; t < 2; t++) {
                        const int tid = t ? FC_T_DV : FC_T_DK;
                        const int64_t D = t ? p->head_dim_v : p->head_dim_qk;
                        for (int64_t d = 0; d < D; d++) {
                            k_index(&ra, b, j, h, d, ia);
                            if (j < sk) {
                                k_index(&rs, 0, j, h, d, is);
                                bad[3 + t] += !same16(&ra.buf[tid], ia, &rs.buf[tid], is);
                            } else {
                                bad[5] += !is_zero16(&ra.buf[tid], ia);
                            }
                        }
                    }
                }
            if (rs.dsinks)
                for (int64_t h = 0; h < p->heads_q; h++) dsum[h] += -rs.dsinks[h];
        }
        fc_run_free(&rs);
    }
    if (ok && bwd && ra.dsinks) /* the CPU backend sums the sequences' parts in order, in fp32 */
        for (int64_t h = 0; h < p->heads_q; h++) {
            float want = 0.0f - dsum[h];
            if (memcmp(&want, &ra.dsinks[h], sizeof want) != 0) {
                fc_prop_fail(v, prop, "dsinks[%lld] = %.9g, the sequences' parts sum to %.9g", (long long)h,
                       (double)ra.dsinks[h], (double)want);
                break;
            }
        }
    static const char *const what[6] = {"o", "lse", "dq", "dk", "dv", "dk/dv of unused keys (must be 0)"};
    for (int k = 0; k < 6; k++)
        if (bad[k])
            fc_prop_fail(v, prop, "%s: %lld elements differ from the sequences run alone", what[k], (long long)bad[k]);
    free(uses);
    free(dsum);
    fc_run_free(&ra);
    return v->outcome;
}

/* ---------------------------------------------------------------------------
 * paging
 * ------------------------------------------------------------------------- */
/* The elements of tensor t the relation compared bitwise (checked, elements) and those that
 * differed (violations), in v's statistics: what was judged, for reports and the sweep. */
static void judged(fc_verdict *v, int t, int64_t total, int64_t bad) {
    v->t[t].checked = 1;
    v->t[t].elements += total;
    v->t[t].violations += bad;
}

fc_outcome fc_prop_paging(const fa_backend *be, const fc_case *c, fc_verdict *v) {
    const char *prop = "paging";
    fc_verdict_init(v);
    const fa_problem *p = &c->p;
    if (p->page_size < 1) {
        fc_verdict_skip(v, "%s: not a paged case", prop);
        return v->outcome;
    }
    const int64_t np = c->v3.num_pages;
    if (np < 2) {
        fc_verdict_skip(v, "%s: one page, nothing to permute", prop);
        return v->outcome;
    }
    const int bwd = c->backward && be->backward;
    /* a permutation of the pages from the seed (Fisher-Yates on counter hashes), never the identity */
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)np);
    for (int64_t x = 0; x < np; x++) perm[x] = (int32_t)x;
    for (int64_t x = np - 1; x > 0; x--) {
        int64_t y = (int64_t)(fc_rng_hash(c->seed, 0x9A61ull, (uint64_t)x, 0) % (uint64_t)(x + 1));
        int32_t t = perm[x]; perm[x] = perm[y]; perm[y] = t;
    }
    int identity = 1;
    for (int64_t x = 0; x < np; x++) identity &= perm[x] == x;
    if (identity) { int32_t t = perm[0]; perm[0] = perm[1]; perm[1] = t; }
    fc_case cb = *c;
    for (int64_t e = 0; e < p->batch * c->v3.max_pages; e++)
        if (cb.v3.block_table[e] >= 0 && cb.v3.block_table[e] < np) cb.v3.block_table[e] = perm[cb.v3.block_table[e]];
    fc_run ra, rb;
    if (v3_run(&ra, c, FC_POISON_A, v, prop)) { free(perm); return v->outcome; }
    if (v3_run(&rb, &cb, FC_POISON_B, v, prop)) { fc_run_free(&ra); free(perm); return v->outcome; }
    /* page x of run a is page perm[x] of run b */
    int64_t ia[4], ib[4];
    for (int t = FC_T_K; t <= FC_T_V; t++)
        for (ia[0] = 0; ia[0] < np; ia[0]++)
            for (ia[1] = 0; ia[1] < p->page_size; ia[1]++)
                for (ia[2] = 0; ia[2] < p->heads_kv; ia[2]++)
                    for (ia[3] = 0; ia[3] < (t == FC_T_K ? p->head_dim_qk : p->head_dim_v); ia[3]++) {
                        ib[0] = perm[ia[0]]; ib[1] = ia[1]; ib[2] = ia[2]; ib[3] = ia[3];
                        fc_buf_set(&rb.buf[t], ib, fc_buf_get(&ra.buf[t], ia));
                    }
    /* a backend may decline the paged backward (fa_limits.supports_paged claims the forward): the
       relation is then judged on the forward alone, beside the backward's decline (a SKIP whose O
       and LSE were judged: the sweep's FC_SWEEP_EXPECT_FWD_BWD_MAY_DECLINE) */
    const int sa = fc_prop_call(be, &ra, bwd, v, prop);
    const int jb = bwd && sa == 1;   /* the backward's outputs are judged */
    if (sa && fc_prop_call(be, &rb, jb, v, prop) == 1) {
        const int same_shape[3] = {FC_T_O, FC_T_LSE, FC_T_DQ};
        for (int k = 0; k < 3; k++) {
            const int t = same_shape[k];
            if (t == FC_T_DQ && !jb) break;
            const fc_buf *x = &ra.buf[t];
            int64_t total = 1, bad = 0;
            for (int d = 0; d < x->ndim; d++) total *= x->dim[d];
            for (int64_t e = 0; e < total; e++) {
                int64_t idx[4] = {0, 0, 0, 0}, rem = e;
                for (int d = x->ndim - 1; d >= 0; d--) { idx[d] = rem % x->dim[d]; rem /= x->dim[d]; }
                bad += !same16(x, idx, &rb.buf[t], idx);
            }
            judged(v, t, total, bad);
            if (bad) fc_prop_fail(v, prop, "%s: %lld elements change when the pages are permuted", fc_tensor_name(t),
                                  (long long)bad);
        }
        for (int t = FC_T_DK; jb && t <= FC_T_DV; t++) {
            int64_t bad = 0, total = 0;
            for (ia[0] = 0; ia[0] < np; ia[0]++)
                for (ia[1] = 0; ia[1] < p->page_size; ia[1]++)
                    for (ia[2] = 0; ia[2] < p->heads_kv; ia[2]++)
                        for (ia[3] = 0; ia[3] < (t == FC_T_DK ? p->head_dim_qk : p->head_dim_v); ia[3]++) {
                            ib[0] = perm[ia[0]]; ib[1] = ia[1]; ib[2] = ia[2]; ib[3] = ia[3];
                            bad += !same16(&ra.buf[t], ia, &rb.buf[t], ib);
                            total++;
                        }
            judged(v, t, total, bad);
            if (bad)
                fc_prop_fail(v, prop, "%s: %lld elements differ from their page's in the permuted run",
                             fc_tensor_name(t),
                       (long long)bad);
        }
        if (jb && ra.dsinks && memcmp(ra.dsinks, rb.dsinks, sizeof(float) * (size_t)p->heads_q) != 0)
            fc_prop_fail(v, prop, "dsinks change when the pages are permuted");
    }
    fc_run_free(&ra);
    fc_run_free(&rb);
    free(perm);
    return v->outcome;
}
