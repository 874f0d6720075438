/* masked_nf.c: the reach of masked pairs with a non-finite input (check.h fc_mnf;
 * kernels/flash_api.h fa_masked_nonfinite; properties/PROPERTIES.md "Masked non-finite").
 *
 * A backend that declares FA_MASKED_NF_PROPAGATES may turn O_i, LSE_i, dQ_i, dK_j, dV_j into
 * NaN when Q_i, K_j, V_j or dO_i of a masked pair (i, j) holds a NaN or an Inf, or (backward) the
 * O_i it is given does (D_i = dO_i . O_i is then non-finite): a product with an exact-zero weight
 * (P_ij = 0 times V_j, dS_ij = 0 times K_j or Q_i, dS_ij = 0 (dP_ij - D_i)) or a -inf bias added
 * to a NaN score. This file marks those rows and columns; check.c accepts a NaN there. Pairs are the
 * problem's own: key j < Sk_b of sequence b, row i < Sq_b; a key outside the problem is never a
 * pair, so garbage there reaching an output stays a failure for every profile. Exact: integer
 * index arithmetic and non-finite tests of the stored values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "properties/check/check.h"

/* logical index of Q / dO element (b, i, h, d) and of K / V element (b, j, hkv, d) of a run
 * (packed rows at cu[b] + i; a paged key through the block table) */
static void mnf_q_index(const fc_run *r, int64_t b, int64_t i, int64_t h, int64_t d, int64_t idx[4]) {
    if (r->cu_q) { idx[0] = 0; idx[1] = r->cu_q[b] + i; }
    else { idx[0] = b; idx[1] = i; }
    idx[2] = h; idx[3] = d;
}

static void mnf_k_pos(const fc_run *r, int64_t b, int64_t j, int64_t *pb, int64_t *ps) {
    if (r->table) {
        const int64_t sz = r->c.p.page_size;
        *pb = r->table[b * r->table_stride + j / sz]; *ps = j % sz;
    } else if (r->cu_k) {
        *pb = 0; *ps = r->cu_k[b] + j;
    } else {
        *pb = b; *ps = j;
    }
}

/* 1 when some component of vector (idx[0], idx[1], idx[2], .) of buffer t is NaN or Inf */
static int mnf_bad(const fc_run *r, int t, int64_t idx[4], int64_t dim) {
    const fc_buf *b = &r->buf[t];
    if (!b->alloc) return 0;
    for (int64_t d = 0; d < dim; d++) {
        idx[3] = d;
        if (!isfinite(fc_buf_get(b, idx))) return 1;
    }
    return 0;
}

/* key j visible to row i of sequence b, head h: the causal/window rule on the sequence's own
 * lengths (flash_api.h), then a -inf entry of the additive mask */
static int mnf_visible(const fc_run *r, const fa_problem *pb, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (!orc_visible(pb, i, j)) return 0;
    if (r->buf[FC_T_MASK].alloc) {
        int64_t idx[4] = {b, h, i, j};
        if (fc_buf_get(&r->buf[FC_T_MASK], idx) == -INFINITY) return 0;
    }
    return 1;
}

void fc_mnf_free(fc_mnf *m) {
    free(m->row);
    free(m->col);
    memset(m, 0, sizeof *m);
}

int fc_mnf_init(fc_mnf *m, const fc_run *r, const fa_precision *prof, int bwd) {
    memset(m, 0, sizeof *m);
    if (!prof || prof->masked_nonfinite != FA_MASKED_NF_PROPAGATES) return 0;
    const fa_problem *p = &r->c.p;
    const int64_t B = p->batch, Hq = p->heads_q, Hkv = p->heads_kv, Sq = p->seqlen_q, Sk = p->seqlen_k;
    if (B <= 0 || Hq <= 0 || Hkv <= 0 || Sq <= 0 || Sk <= 0) return 0;
    const int64_t G = Hq / Hkv, Dqk = p->head_dim_qk, Dv = p->head_dim_v;
    m->B = B; m->H = Hq; m->S = Sq;
    m->CB = r->table ? r->c.v3.num_pages : B;
    m->CH = Hkv;
    m->CS = r->table ? p->page_size : Sk;
    /* rbad [B, Hq, Sq]: Q_i (or dO_i) non-finite; kbad [B, Hkv, Sk]: K_j or V_j non-finite */
    unsigned char *rbad = calloc((size_t)(B * Hq * Sq), 1), *kbad = calloc((size_t)(B * Hkv * Sk), 1);
    unsigned char *kany = calloc((size_t)(B * Hkv), 1);
    m->row = calloc((size_t)(B * Hq * Sq), 1);
    m->col = calloc((size_t)(m->CB * m->CH * m->CS), 1);
    if (!rbad || !kbad || !kany || !m->row || !m->col) {
        free(rbad); free(kbad); free(kany);
        fc_mnf_free(m);
        return -1;
    }
    int64_t nbad = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t sq = fc_case_seq_q(&r->c, b), sk = fc_case_seq_k(&r->c, b);
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < sq; i++) {
                int64_t idx[4];
                mnf_q_index(r, b, i, h, 0, idx);
                /* the backward also reads O_i: D_i = dO_i . O_i (or sum_j P dP, the same row) is
                   non-finite when O_i is, and a masked pair's dS_ij = 0 (dP_ij - D_i) is then NaN */
                int bad = mnf_bad(r, FC_T_Q, idx, Dqk) ||
                          (bwd && (mnf_bad(r, FC_T_DO, idx, Dv) || mnf_bad(r, FC_T_O, idx, Dv)));
                rbad[(b * Hq + h) * Sq + i] = (unsigned char)bad;
                nbad += bad;
            }
        for (int64_t hk = 0; hk < Hkv; hk++)
            for (int64_t j = 0; j < sk; j++) {
                int64_t idx[4];
                mnf_k_pos(r, b, j, &idx[0], &idx[1]);
                idx[2] = hk;
                int bad = mnf_bad(r, FC_T_K, idx, Dqk) || mnf_bad(r, FC_T_V, idx, Dv);
                kbad[(b * Hkv + hk) * Sk + j] = (unsigned char)bad;
                kany[b * Hkv + hk] |= (unsigned char)bad;
                nbad += bad;
            }
    }
    for (int64_t b = 0; nbad > 0 && b < B; b++) {
        fa_problem pb = *p; /* the sequence's own lengths for the causal / window diagonals */
        pb.seqlen_q = fc_case_seq_q(&r->c, b);
        pb.seqlen_k = fc_case_seq_k(&r->c, b);
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t hk = h / G;
            for (int64_t i = 0; i < pb.seqlen_q; i++) {
                const int rb = rbad[(b * Hq + h) * Sq + i];
                if (!rb && !kany[b * Hkv + hk]) continue;
                for (int64_t j = 0; j < pb.seqlen_k; j++) {
                    if (!rb && !kbad[(b * Hkv + hk) * Sk + j]) continue;
                    if (mnf_visible(r, &pb, b, h, i, j)) continue;
                    int64_t cb, cs;
                    if (r->table) mnf_k_pos(r, b, j, &cb, &cs);
                    else { cb = b; cs = j; }
                    m->row[(b * Hq + h) * Sq + i] = 1;
                    m->col[(cb * Hkv + hk) * m->CS + cs] = 1;
                    m->pairs++;
                }
            }
        }
    }
    free(rbad); free(kbad); free(kany);
    m->on = m->pairs > 0;
    return 0;
}

int fc_mnf_row(const fc_mnf *m, int64_t b, int64_t h, int64_t i) {
    return m->on && b >= 0 && b < m->B && h >= 0 && h < m->H && i >= 0 && i < m->S && m->row[(b * m->H + h) * m->S + i];
}

int fc_mnf_col(const fc_mnf *m, int64_t b, int64_t hkv, int64_t j) {
    return m->on && b >= 0 && b < m->CB && hkv >= 0 && hkv < m->CH && j >= 0 && j < m->CS &&
           m->col[(b * m->CH + hkv) * m->CS + j];
}
