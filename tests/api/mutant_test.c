/* mutant_test.c: the CPU backend's deliberately broken variants are live and
 * targeted. For every mutant:
 *   - on its TARGET case (the situation its real-world bug shows in) the
 *     outputs differ from the correct backend's (bitwise);
 *   - on its NEUTRAL case (the nearest situation the bug does not affect) the
 *     outputs are bitwise identical to the correct backend's.
 * Also: the table (names unique, descriptions), selection by id and name, and
 * FLASHCHECK_CPU_MUTANT read at first use. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "kernels/cpu/cpu_mutants.h"
#include "tests/api/api_test_v3.h"

// ----------------------------------------------------------------------------
// a configurable case and a record of everything it wrote

typedef struct {
    int64_t B, Sq, Sk, Hq, Hkv, D;
    fa_causal causal;
    int64_t wl;
    fa_align align;
    tt_layout layout;
    int mask;         /* 0 none, 1 random per (b,h), 2 random with row 3 of (0,0) fully -inf */
    float scale;
    int64_t nan_v_row;/* >= 0: V[:, row, :, :] = NaN */
    int bwd;
} mcase;

typedef struct {
    size_t n;
    unsigned char *bytes;
} mrecord;

static mrecord run_case(const mcase *m, int mutant) {
    assert_int_equal(fa_cpu_set_mutant(mutant), 0);
    fa_problem p = tt_problem(m->B, m->Sq, m->Sk, m->Hq, m->Hkv, m->D, m->D, FA_F16);
    p.causal = m->causal; p.window_left = m->wl; p.window_align = m->align; p.softmax_scale = m->scale;
    tt_case c;
    tt_case_init(&c, p, m->layout, 2024);
    if (m->mask) {
        tt_case_mask(&c, 0.1, 5);
        if (m->mask == 2)
            for (int64_t j = 0; j < p.seqlen_k; j++) c.mask[3 * c.mask_st[2] + j] = -INFINITY;
    }
    if (m->nan_v_row >= 0)
        for (int64_t b = 0; b < p.batch; b++)
            for (int64_t h = 0; h < p.heads_kv; h++)
                for (int64_t d = 0; d < p.head_dim_v; d++) c.v.buf[tt_off(&c.v, b, m->nan_v_row, h, d)] = 0x7e00;
    fa_error err;
    fa_fwd_args fa = tt_fwd_args(&c);
    assert_int_equal(fa_backend_cpu()->forward(&fa, &err), FA_OK);
    if (m->bwd) {
        /* the backward always gets the CORRECT forward's O and LSE, so a
         * backward mutant is judged on its own */
        if (mutant != 0) {
            fa_cpu_set_mutant(0);
            assert_int_equal(fa_backend_cpu()->forward(&fa, &err), FA_OK);
            fa_cpu_set_mutant(mutant);
        }
        fa_bwd_args ba = tt_bwd_args(&c);
        assert_int_equal(fa_backend_cpu()->backward(&ba, &err), FA_OK);
    }
    size_t nl = (size_t)(p.batch * p.heads_q * p.seqlen_q) * 4;
    const tt_tensor *outs[4] = {&c.o, &c.dq, &c.dk, &c.dv};
    mrecord r;
    r.n = nl;
    for (int i = 0; i < 4; i++) r.n += outs[i]->n_elems * 2;
    r.bytes = malloc(r.n);
    size_t at = 0;
    memcpy(r.bytes, c.lse, nl);
    at = nl;
    for (int i = 0; i < 4; i++) {
        memcpy(r.bytes + at, outs[i]->buf, outs[i]->n_elems * 2);
        at += outs[i]->n_elems * 2;
    }
    tt_case_free(&c);
    fa_cpu_set_mutant(0);
    return r;
}

static int records_equal(mrecord a, mrecord b) {
    int eq = a.n == b.n && memcmp(a.bytes, b.bytes, a.n) == 0;
    free(a.bytes);
    free(b.bytes);
    return eq;
}

// ----------------------------------------------------------------------------
// the cases per mutant

/* BASE sets every field; a case then overrides some (designated initializers
 * may repeat a field, the last one wins: C11 6.7.9p19). */
#pragma GCC diagnostic ignored "-Woverride-init"
#define BASE .B = 1, .Sq = 64, .Sk = 64, .Hq = 1, .Hkv = 1, .D = 16, .causal = FA_CAUSAL_NONE, .wl = -1, \
             .align = FA_ALIGN_TOP_LEFT, .layout = TT_CONTIGUOUS, .mask = 0, .scale = 0, .nan_v_row = -1

typedef struct {
    const char *name;
    mcase target, neutral;
} mutant_cases;

static const mutant_cases cases[] = {
    {"rescale_missing",
     {BASE, .Sk = 200, .scale = 1.0f},                  /* several key tiles: the max grows later */
     {BASE, .Sk = 64, .scale = 1.0f}},                  /* one key tile: no rescale ever needed */
    {"causal_off_by_one",
     {BASE, .Sq = 20, .Sk = 20, .causal = FA_CAUSAL_TOP_LEFT},
     {BASE, .Sq = 20, .Sk = 20}},                       /* not causal */
    {"causal_top_left_for_bottom_right",
     {BASE, .Sq = 10, .Sk = 30, .causal = FA_CAUSAL_BOTTOM_RIGHT},
     {BASE, .Sq = 30, .Sk = 30, .causal = FA_CAUSAL_BOTTOM_RIGHT}}, /* square: both corners agree */
    {"ragged_tail_unmasked",
     {BASE, .Sk = 70},
     {BASE, .Sk = 128}},                                /* a multiple of the tile */
    {"strides_from_shape",
     {BASE, .Sq = 20, .Sk = 20, .Hq = 2, .Hkv = 2, .layout = TT_TRANSPOSED, .bwd = 1},
     {BASE, .Sq = 20, .Sk = 20, .Hq = 2, .Hkv = 2, .layout = TT_CONTIGUOUS, .bwd = 1}},
    {"gqa_head_modulo",
     {BASE, .Hq = 4, .Hkv = 2, .bwd = 1},
     {BASE, .Hq = 4, .Hkv = 1, .bwd = 1}},              /* MQA: h % 1 == h / 4 == 0 */
    {"masked_row_inf_minus_inf",
     {BASE, .Sq = 8, .Sk = 8, .mask = 2},
     {BASE, .Sq = 8, .Sk = 8, .mask = 0}},
    {"mask_by_multiplication",
     {BASE, .Sq = 8, .Sk = 8, .causal = FA_CAUSAL_TOP_LEFT, .nan_v_row = 7},
     {BASE, .Sq = 8, .Sk = 8, .causal = FA_CAUSAL_TOP_LEFT}}, /* hidden values finite: 0*v = 0 */
    {"lse_log2",
     {BASE},
     {BASE, .Sk = 1}},                                  /* one key: l = 1, log2(1) = ln(1) */
    {"p_not_max_shifted",
     {BASE, .scale = 30.0f},                            /* scores far above 11: exp overflows fp16 */
     {BASE, .Sk = 1}},                                  /* not bitwise: see test_p_not_shifted_small_scores_finite */
    {"dq_tail_block_skipped",
     {BASE, .Sk = 70, .bwd = 1},
     {BASE, .Sk = 128, .bwd = 1}},
    {"dq_nondeterministic_order",
     {BASE, .Sk = 256, .D = 32, .bwd = 1},              /* checked as run-vs-run, see the test */
     {BASE, .Sk = 64, .bwd = 1}},                       /* one key tile: nothing to reorder */
    {"window_off_by_one",
     {BASE, .Sq = 30, .Sk = 30, .wl = 3},
     {BASE, .Sq = 30, .Sk = 30, .wl = 100}},            /* window wider than the sequence */
    {"dv_gqa_not_summed",
     {BASE, .Hq = 4, .Hkv = 2, .bwd = 1},
     {BASE, .Hq = 2, .Hkv = 2, .bwd = 1}},              /* no grouping */
    {"delta_from_dout_squared",
     {BASE, .bwd = 1},
     {BASE, .bwd = 0}},                                 /* forward only */
    {"mask_bh_stride_ignored",
     {BASE, .B = 2, .Hq = 2, .Hkv = 2, .mask = 1},
     {BASE, .B = 1, .Hq = 1, .Hkv = 1, .mask = 1}},     /* one (b, h) slice: nothing to broadcast */
    {"batch_dependent_order",
     {BASE, .B = 2},
     {BASE, .B = 1}},                                   /* one batch element: the usual order */
    {"fwd_order_varies_at_scale",
     {BASE, .B = 64},                                   /* 4096 query rows: every other call reversed */
     {BASE, .B = 63}},                                  /* 4032 rows: reproducible, the usual order */
};

/* contract-v3 mutants: cases built by api_test_v3.h, recorded from the combined call */
#define V3B .B = 2, .Hq = 2, .Hkv = 1, .Dqk = 16, .Dv = 8, .wl = -1, .wr = -1, .sq = {9, 5}, .dt = FA_F16, \
            .seed = 5, .packed_q = 1
static const struct { const char *name; v3_spec target, neutral; } v3_cases[] = {
    {"block_table_stride",
     {V3B, .used = {40, 30}, .kv = V3_KV_PAGED, .seqused = 1, .page_size = 8, .table_pad = 2},
     {V3B, .used = {40, 30}, .kv = V3_KV_PAGED, .seqused = 1, .page_size = 8, .table_pad = 0}},
    {"softcap_derivative_missing",
     {V3B, .alloc = {40, 30}, .used = {40, 30}, .kv = V3_KV_PACKED, .softcap = 4.0f},
     {V3B, .alloc = {40, 30}, .used = {40, 30}, .kv = V3_KV_PACKED}},     /* no cap */
    {"sink_left_out",
     {V3B, .alloc = {40, 30}, .used = {40, 30}, .kv = V3_KV_PACKED, .sinks = 1},
     {V3B, .alloc = {40, 30}, .used = {40, 30}, .kv = V3_KV_PACKED}},     /* no sinks */
    {"varlen_prev_offset",
     {V3B, .alloc = {40, 30}, .used = {40, 30}, .kv = V3_KV_PACKED},
     {V3B, .alloc = {0, 30}, .used = {0, 30}, .kv = V3_KV_PACKED}},       /* empty first sequence */
    {"seqused_k_ignored",
     {V3B, .alloc = {40, 30}, .used = {33, 30}, .kv = V3_KV_PACKED, .seqused = 1},
     {V3B, .alloc = {40, 30}, .used = {40, 30}, .kv = V3_KV_PACKED, .seqused = 1}}, /* all used */
    {"pages_assumed_contiguous",
     {V3B, .used = {40, 30}, .kv = V3_KV_PAGED, .seqused = 1, .page_size = 8},
     {V3B, .used = {40, 30}, .kv = V3_KV_PAGED, .seqused = 1, .page_size = 8, .in_order = 1}},
    {"dsink_sign",
     {V3B, .alloc = {40, 30}, .used = {40, 30}, .kv = V3_KV_PACKED, .sinks = 1},
     {V3B, .alloc = {40, 30}, .used = {40, 30}, .kv = V3_KV_PACKED}},     /* no sinks */
    {"split_combine_drops_last",
     {V3B, .sq = {1, 3}, .alloc = {300, 257}, .used = {300, 257}, .kv = V3_KV_PACKED, .sinks = 1},
     {V3B, .sq = {17, 17}, .alloc = {300, 257}, .used = {300, 257}, .kv = V3_KV_PACKED, .sinks = 1}},
                                                                           /* Sq_b > 16: no split */
    {"varlen_causal_from_max_lengths",
     {V3B, .alloc = {40, 30}, .used = {40, 30}, .kv = V3_KV_PACKED, .causal = FA_CAUSAL_BOTTOM_RIGHT},
     {V3B, .alloc = {40, 36}, .used = {40, 36}, .kv = V3_KV_PACKED, .causal = FA_CAUSAL_BOTTOM_RIGHT}},
                                                       /* Sk_b - Sq_b = 31 = seqlen_k - seqlen_q in both */
    {"softcap_cap_not_reapplied",
     {V3B, .alloc = {40, 30}, .used = {40, 30}, .kv = V3_KV_PACKED, .softcap = 4.0f},
     {V3B, .alloc = {40, 30}, .used = {40, 30}, .kv = V3_KV_PACKED}},     /* no cap */
    {"scale_from_dv",
     {V3B, .alloc = {40, 30}, .used = {40, 30}, .kv = V3_KV_PACKED},      /* Dqk 16, Dv 8 */
     {V3B, .alloc = {40, 30}, .used = {40, 30}, .kv = V3_KV_PACKED, .Dv = 16}},
    {"dk_rows_at_dv_pitch",
     {V3B, .alloc = {40, 30}, .used = {40, 30}, .kv = V3_KV_PACKED},      /* Dqk 16 > Dv 8 */
     {V3B, .alloc = {40, 30}, .used = {40, 30}, .kv = V3_KV_PACKED, .Dv = 16}},
};
#define N_V3_CASES ((int)(sizeof v3_cases / sizeof v3_cases[0]))

static mrecord run_v3(const v3_spec *spec, int mutant) {
    assert_int_equal(fa_cpu_set_mutant(mutant), 0);
    v3_case c;
    v3_build(&c, spec);
    fa_error err;
    fa_fwd_args fa = v3_fwd_args(&c);
    assert_int_equal(fa_backend_cpu()->forward(&fa, &err), FA_OK);
    fa_bwd_args ba = v3_bwd_args(&c);
    assert_int_equal(fa_backend_cpu()->backward(&ba, &err), FA_OK);
    const v3_buf *outs[4] = {&c.o, &c.dq, &c.dk, &c.dv};
    mrecord r;
    r.n = c.n_lse * 4 + sizeof(c.dsinks);
    for (int i = 0; i < 4; i++) r.n += outs[i]->n * 2;
    r.bytes = malloc(r.n);
    size_t at = 0;
    memcpy(r.bytes, c.lse, c.n_lse * 4);
    at += c.n_lse * 4;
    memcpy(r.bytes + at, c.dsinks, sizeof(c.dsinks));
    at += sizeof(c.dsinks);
    for (int i = 0; i < 4; i++) {
        memcpy(r.bytes + at, outs[i]->p, outs[i]->n * 2);
        at += outs[i]->n * 2;
    }
    v3_free(&c);
    fa_cpu_set_mutant(0);
    return r;
}

static void test_v3_mutants_live_and_targeted(void **state) {
    (void)state;
    for (int k = 0; k < N_V3_CASES; k++) {
        const int id = fa_cpu_mutant_id(v3_cases[k].name);
        assert_true(id > 0);
        if (records_equal(run_v3(&v3_cases[k].target, 0), run_v3(&v3_cases[k].target, id)))
            fail_msg("mutant %s does not change its target case", v3_cases[k].name);
        if (!records_equal(run_v3(&v3_cases[k].neutral, 0), run_v3(&v3_cases[k].neutral, id)))
            fail_msg("mutant %s changes its neutral case", v3_cases[k].name);
        print_message("  %-34s live on target, identical on neutral\n", v3_cases[k].name);
    }
}

static void test_table(void **state) {
    (void)state;
    int n = fa_cpu_mutant_count();
    assert_true(n >= 15); /* 14 required classes + "none" */
    assert_string_equal(fa_cpu_mutant_name(0), "none");
    assert_null(fa_cpu_mutant_name(n));
    assert_null(fa_cpu_mutant_name(-1));
    assert_null(fa_cpu_mutant_description(n));
    for (int i = 0; i < n; i++) {
        assert_non_null(fa_cpu_mutant_name(i));
        assert_true(strlen(fa_cpu_mutant_description(i)) > 10);
        assert_int_equal(fa_cpu_mutant_id(fa_cpu_mutant_name(i)), i);
        char num[16];
        snprintf(num, sizeof(num), "%d", i);
        assert_int_equal(fa_cpu_mutant_id(num), i);
        for (int j = 0; j < i; j++) assert_string_not_equal(fa_cpu_mutant_name(i), fa_cpu_mutant_name(j));
    }
    assert_int_equal(fa_cpu_mutant_id("no_such_mutant"), -1);
    assert_int_equal(fa_cpu_mutant_id("999"), -1);
    assert_int_equal(fa_cpu_set_mutant(n), -1);
    assert_int_equal(fa_cpu_set_mutant(-1), -1);
    /* every mutant has a case here, and every case names a mutant */
    assert_int_equal((int)(sizeof(cases) / sizeof(cases[0])) + N_V3_CASES, n - 1);
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) assert_true(fa_cpu_mutant_id(cases[k].name) > 0);
    for (int k = 0; k < N_V3_CASES; k++) assert_true(fa_cpu_mutant_id(v3_cases[k].name) > 0);
}

static void test_each_mutant_live_and_targeted(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const int id = fa_cpu_mutant_id(cases[k].name);
        const mutant_cases *mc = &cases[k];
        int differs;
        if (id == fa_cpu_mutant_id("dq_nondeterministic_order") || id == fa_cpu_mutant_id("fwd_order_varies_at_scale")) {
            /* live = two identical calls disagree (the correct backend's agree: cpu_bwd_test) */
            differs = !records_equal(run_case(&mc->target, id), run_case(&mc->target, id));
        } else {
            differs = !records_equal(run_case(&mc->target, 0), run_case(&mc->target, id));
        }
        if (!differs) fail_msg("mutant %s does not change its target case", mc->name);
        int neutral_same = records_equal(run_case(&mc->neutral, 0), run_case(&mc->neutral, id));
        if (id == fa_cpu_mutant_id("dq_nondeterministic_order") || id == fa_cpu_mutant_id("fwd_order_varies_at_scale"))
            neutral_same &= records_equal(run_case(&mc->neutral, id), run_case(&mc->neutral, id));
        if (id == fa_cpu_mutant_id("p_not_max_shifted")) {
            /* with Sk = 1: P = exp(s) instead of 1; fp16 rounding of exp(s)
             * changes O unless it is exact, so this mutant has no bitwise
             * neutral case; instead it must still be FINITE on small scores */
            neutral_same = 1;
        }
        if (!neutral_same) fail_msg("mutant %s changes its neutral case (should only affect its bug's situation)", mc->name);
        print_message("  %-34s live on target, %s on neutral\n", mc->name,
                      id == fa_cpu_mutant_id("p_not_max_shifted") ? "(not bitwise)" : "identical");
    }
}

/* p_not_max_shifted on small scores: results stay finite and close (only the
 * rounding of P differs), i.e. the bug only bites on large scores. */
static void test_p_not_shifted_small_scores_finite(void **state) {
    (void)state;
    mcase m = {BASE, .scale = 0.25f};
    int id = fa_cpu_mutant_id("p_not_max_shifted");
    mrecord good = run_case(&m, 0), bad = run_case(&m, id);
    size_t nl = 64 * 4;
    const uint16_t *og = (const uint16_t *)(good.bytes + nl), *ob = (const uint16_t *)(bad.bytes + nl);
    for (size_t x = 0; x < 64 * 16; x++) {
        float g = fa_cpu_f16_to_f32(og[x]), b = fa_cpu_f16_to_f32(ob[x]);
        assert_true(isfinite(b));
        assert_true(fabsf(g - b) <= 0x1p-8f * (fabsf(g) + 1.0f));
    }
    free(good.bytes);
    free(bad.bytes);
}

int main(void) {
    /* FLASHCHECK_CPU_MUTANT is read at first use (and an explicit set wins later) */
    setenv("FLASHCHECK_CPU_MUTANT", "gqa_head_modulo", 1);
    int env_id = fa_cpu_get_mutant();
    if (env_id != fa_cpu_mutant_id("gqa_head_modulo")) {
        fprintf(stderr, "FLASHCHECK_CPU_MUTANT not honoured: got %d\n", env_id);
        return 1;
    }
    fa_cpu_set_mutant(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_each_mutant_live_and_targeted),
        cmocka_unit_test(test_v3_mutants_live_and_targeted),
        cmocka_unit_test(test_p_not_shifted_small_scores_finite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
