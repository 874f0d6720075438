/* mpmath_dump.c: write random small problems and the oracle's results (value
 * and orc_err of O, LSE, dQ, dK, dV) to a text file that mpmath_check.py
 * recomputes independently in mpmath at 60 digits.
 *
 * Format (one item per line, floats as C99 hex "%a"):
 *   case B Sq Sk Hq Hkv D Dv dtype scale causal wl wr align has_mask
 *   q|k|v|dout <bits...>           contiguous [B, S, H, D] order
 *   mask <floats...>               [B, Hq, Sq, Sk] (only if has_mask)
 *   o|lse|dq|dk|dv <n> then n lines "b h s ref0 err0 ref1 err1 ..." */
#include "oracle/tests/tutil.h"

static void dump_tensor(FILE *f, const char *name, const uint16_t *p, const int64_t st[4], int64_t B, int64_t S,
                        int64_t H, int64_t D) {
    fprintf(f, "%s", name);
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < S; s++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t d = 0; d < D; d++) fprintf(f, " %u", p[b * st[0] + s * st[1] + h * st[2] + d * st[3]]);
    fprintf(f, "\n");
}

static void dump_block(FILE *f, const char *name, const orc_block *blk) {
    fprintf(f, "%s %lld\n", name, (long long)blk->n);
    for (int64_t x = 0; x < blk->n; x++) {
        fprintf(f, "%lld %lld %lld", (long long)blk->index[x].b, (long long)blk->index[x].h, (long long)blk->index[x].s);
        for (int64_t d = 0; d < blk->dim; d++) {
            int64_t e = x * blk->dim + d;
            int skip = blk->flags[e] & (ORC_F_UNCHECKABLE | ORC_F_NAN);
            fprintf(f, " %a %a", skip ? NAN : blk->ref[e], skip ? NAN : blk->orc_err[e]);
        }
        fprintf(f, "\n");
    }
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: mpmath_dump OUT\n"); return 2; }
    FILE *f = fopen(argv[1], "w");
    if (!f) { perror(argv[1]); return 2; }
    struct { fa_problem p; int layout, mask; double qs; } cs[] = {
        {t_problem(1, 6, 7, 2, 1, 8, 4, FA_F16, FA_CAUSAL_BOTTOM_RIGHT, -1, -1), 0, 1, 1.0},
        {t_problem(2, 5, 4, 2, 2, 4, 8, FA_BF16, FA_CAUSAL_TOP_LEFT, 1, -1), 1, 0, 2.0},
        {t_problem(1, 4, 9, 3, 1, 6, 6, FA_F16, FA_CAUSAL_NONE, 2, 1), 2, 1, 3.0},
        {t_problem(1, 8, 3, 2, 1, 8, 8, FA_BF16, FA_CAUSAL_BOTTOM_RIGHT, -1, -1), 0, 1, 4.0}, /* masked rows */
        {t_problem(1, 5, 11, 4, 2, 5, 3, FA_F16, FA_CAUSAL_NONE, -1, -1), 0, 0, 0.5},
    };
    cs[2].p.window_align = FA_ALIGN_BOTTOM_RIGHT;
    cs[4].p.softmax_scale = 1.25f;
    fa_precision pr = t_profile_fp32();
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        t_prob t;
        fa_problem p = cs[k].p;
        t_setup(&t, p, cs[k].layout, cs[k].qs, 1.0, 1.0, cs[k].mask);
        fa_fwd_args a = t_fwd_args(&t);
        orc_fwd_result r;
        if (orc_fwd(&a, &pr, NULL, &r, NULL)) return 1;
        t_store_fwd(&t, &r);
        fa_bwd_args ba = t_bwd_args(&t);
        orc_bwd_result br;
        if (orc_bwd(&ba, &pr, NULL, &br, NULL)) return 1;
        fprintf(f, "case %lld %lld %lld %lld %lld %lld %lld %d %a %d %lld %lld %d %d\n", (long long)p.batch,
                (long long)p.seqlen_q, (long long)p.seqlen_k, (long long)p.heads_q, (long long)p.heads_kv,
                (long long)p.head_dim_qk, (long long)p.head_dim_v, (int)p.dtype, (double)p.softmax_scale,
                (int)p.causal, (long long)p.window_left, (long long)p.window_right, (int)p.window_align,
                cs[k].mask);
        dump_tensor(f, "q", t.q, t.tq.stride, p.batch, p.seqlen_q, p.heads_q, p.head_dim_qk);
        dump_tensor(f, "k", t.k, t.tk.stride, p.batch, p.seqlen_k, p.heads_kv, p.head_dim_qk);
        dump_tensor(f, "v", t.v, t.tv.stride, p.batch, p.seqlen_k, p.heads_kv, p.head_dim_v);
        dump_tensor(f, "dout", t.dout, t.tdo.stride, p.batch, p.seqlen_q, p.heads_q, p.head_dim_v);
        if (cs[k].mask) {
            fprintf(f, "mask");
            int64_t n = p.batch * p.heads_q * p.seqlen_q * p.seqlen_k;
            for (int64_t i = 0; i < n; i++) fprintf(f, " %a", (double)t.mask[i]);
            fprintf(f, "\n");
        }
        dump_block(f, "o", &r.o);
        dump_block(f, "lse", &r.lse);
        dump_block(f, "dq", &br.dq);
        dump_block(f, "dk", &br.dk);
        dump_block(f, "dv", &br.dv);
        orc_fwd_free(&r);
        orc_bwd_free(&br);
        t_free(&t);
    }
    fclose(f);
    return 0;
}
