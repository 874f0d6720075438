/* cpu_v3_test.c: the CPU backend on contract v3 (varlen, paged K/V, seqused_k, softcap,
 * sinks, Dqk != Dv), the embedded reference implementation of those features.
 *
 * For every case (api_test_v3.h): the combined call must equal the per-sequence dense
 * calls bit for bit (packing, paging, seqused_k, unused keys and pages zeroed in dK/dV,
 * dsinks summed over sequences), and the dense calls must lie within the fp64 reference's
 * derived bounds (api_test_ref.h: softcap S1, sinks S2). Shared pages: within the sum of
 * two references. Then every contract-v3 mutant (kernels/cpu/cpu_mutants.c) must make at
 * least one of those checks fail on the cases listed for it.
 *
 * The reference here is the test-only fp64 one; the harness's MPFR oracle (oracle/) is a
 * separate implementation and checks the same features through flashcheck certify. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "kernels/cpu/cpu_mutants.h"
#include "tests/api/api_test_v3.h"

#pragma GCC diagnostic ignored "-Woverride-init"
#define V3_BASE .B = 1, .Hq = 4, .Hkv = 2, .Dqk = 16, .Dv = 8, .causal = FA_CAUSAL_NONE, .wl = -1, .wr = -1, \
                .align = FA_ALIGN_TOP_LEFT, .dt = FA_F16, .seed = 1

typedef struct {
    const char *name;
    v3_spec s;
} named_spec;

static const named_spec specs[] = {
    {"varlen q+k, seqused, lengths 0 and 1, causal bottom-right, GQA, Dqk != Dv",
     {V3_BASE, .B = 5, .sq = {5, 0, 1, 70, 3}, .alloc = {7, 3, 0, 130, 1}, .used = {7, 2, 0, 100, 1},
      .packed_q = 1, .kv = V3_KV_PACKED, .seqused = 1, .causal = FA_CAUSAL_BOTTOM_RIGHT, .seed = 11}},
    {"varlen, window bottom-right aligned, bf16",
     {V3_BASE, .B = 3, .sq = {9, 66, 2}, .alloc = {12, 70, 40}, .used = {12, 70, 40}, .packed_q = 1,
      .kv = V3_KV_PACKED, .wl = 5, .wr = 2, .align = FA_ALIGN_BOTTOM_RIGHT, .dt = FA_BF16, .seed = 12}},
    {"dense q and k with seqused_k, causal top-left",
     {V3_BASE, .B = 3, .sq = {9, 9, 9}, .alloc = {80, 80, 80}, .used = {80, 10, 0}, .kv = V3_KV_DENSE,
      .seqused = 1, .causal = FA_CAUSAL_TOP_LEFT, .seed = 13}},
    {"paged page_size 16, decode rows, padded table, spare pages",
     {V3_BASE, .B = 4, .sq = {1, 1, 4, 16}, .used = {37, 0, 130, 5}, .packed_q = 1, .kv = V3_KV_PAGED,
      .seqused = 1, .page_size = 16, .table_pad = 2, .spare_pages = 3, .causal = FA_CAUSAL_BOTTOM_RIGHT,
      .seed = 14}},
    {"paged page_size 1",
     {V3_BASE, .B = 2, .sq = {3, 2}, .used = {9, 4}, .packed_q = 1, .kv = V3_KV_PAGED, .seqused = 1,
      .page_size = 1, .table_pad = 1, .spare_pages = 2, .seed = 15}},
    {"paged page_size 3, dense q, equal lengths (no seqused_k)",
     {V3_BASE, .B = 2, .sq = {8, 8}, .used = {50, 50}, .kv = V3_KV_PAGED, .page_size = 3, .table_pad = 3,
      .spare_pages = 1, .causal = FA_CAUSAL_BOTTOM_RIGHT, .seed = 16}},
    {"paged page_size 64 (a page per tile), MQA",
     {V3_BASE, .B = 2, .Hkv = 1, .sq = {5, 7}, .used = {130, 64}, .packed_q = 1, .kv = V3_KV_PAGED,
      .seqused = 1, .page_size = 64, .table_pad = 1, .seed = 17}},
    {"softcap 5, dense, several key tiles",
     {V3_BASE, .B = 2, .sq = {37, 37}, .alloc = {150, 150}, .used = {150, 150}, .softcap = 5.0f, .seed = 18}},
    {"softcap 0.5 (saturating), varlen, causal",
     {V3_BASE, .B = 2, .sq = {20, 9}, .alloc = {20, 30}, .used = {20, 30}, .packed_q = 1, .kv = V3_KV_PACKED,
      .softcap = 0.5f, .causal = FA_CAUSAL_BOTTOM_RIGHT, .seed = 19}},
    {"sinks, varlen with empty key sets and rows that see nothing",
     {V3_BASE, .B = 3, .sq = {20, 4, 33}, .alloc = {5, 0, 140}, .used = {5, 0, 140}, .packed_q = 1,
      .kv = V3_KV_PACKED, .sinks = 1, .causal = FA_CAUSAL_BOTTOM_RIGHT, .seed = 20}},
    {"sinks, dense, bf16",
     {V3_BASE, .B = 2, .sq = {17, 17}, .alloc = {70, 70}, .used = {70, 70}, .sinks = 1, .dt = FA_BF16, .seed = 21}},
    {"everything: paged + varlen q + seqused + softcap + sinks + GQA + Dqk != Dv, bf16",
     {V3_BASE, .B = 3, .Dqk = 24, .Dv = 12, .sq = {3, 0, 12}, .used = {70, 6, 33}, .packed_q = 1,
      .kv = V3_KV_PAGED, .seqused = 1, .page_size = 5, .table_pad = 2, .spare_pages = 2, .softcap = 8.0f,
      .sinks = 1, .causal = FA_CAUSAL_BOTTOM_RIGHT, .dt = FA_BF16, .seed = 22}},
    {"shared pages: sequence 1 maps sequence 0's pages",
     {V3_BASE, .B = 3, .sq = {3, 5, 2}, .used = {20, 20, 9}, .packed_q = 1, .kv = V3_KV_PAGED, .seqused = 1,
      .page_size = 4, .table_pad = 1, .spare_pages = 1, .share = 1, .sinks = 1, .seed = 23}},
    {"split-KV decode: Sq_b <= 16 with 257..700 keys (2..5 splits), varlen, sinks, Dqk != Dv",
     {V3_BASE, .B = 3, .sq = {1, 16, 4}, .alloc = {300, 257, 700}, .used = {300, 257, 650}, .packed_q = 1,
      .kv = V3_KV_PACKED, .seqused = 1, .sinks = 1, .causal = FA_CAUSAL_BOTTOM_RIGHT, .seed = 24}},
    {"split-KV decode, paged page_size 16, softcap, bf16",
     {V3_BASE, .B = 2, .sq = {2, 1}, .used = {520, 200}, .packed_q = 1, .kv = V3_KV_PAGED, .seqused = 1,
      .page_size = 16, .table_pad = 1, .softcap = 6.0f, .dt = FA_BF16, .seed = 25}},
};
#define N_SPECS ((int)(sizeof specs / sizeof specs[0]))

/* Violations of all checks on one spec with the selected mutant (verbose: print some). */
static long run_spec(const named_spec *ns, int mutant, int verbose) {
    assert_int_equal(fa_cpu_set_mutant(mutant), 0);
    v3_case c;
    v3_build(&c, &ns->s);
    fa_error err;
    memset(&err, 0, sizeof(err));
    fa_status st = v3_run(&c, fa_backend_cpu(), &err);
    if (st != FA_OK) fail_msg("%s: %s (%s: %s)", ns->name, fa_status_name(st), err.arg, err.msg);
    long cmp = v3_compare(&c, verbose), ref = v3_ref_violations(&c, verbose);
    long shared = ns->s.share ? v3_shared_violations(&c, verbose) : 0;
    if (verbose || cmp + ref + shared)
        print_message("  %-80.80s bitwise %ld, reference %ld, shared %ld\n", ns->name, cmp, ref, shared);
    v3_free(&c);
    fa_cpu_set_mutant(0);
    return cmp + ref + shared;
}

static void test_cpu_v3_cases(void **state) {
    (void)state;
    for (int k = 0; k < N_SPECS; k++)
        if (run_spec(&specs[k], 0, 0) != 0) fail_msg("%s: the CPU backend disagrees (above)", specs[k].name);
    print_message("  %d contract-v3 cases: bitwise equal to their sequences, within the fp64 bounds\n", N_SPECS);
}

/* The reference check itself must be able to fail: perturb one output bit pattern. */
static void test_checks_can_fail(void **state) {
    (void)state;
    v3_case c;
    v3_build(&c, &specs[7].s);
    fa_error err;
    assert_int_equal(v3_run(&c, fa_backend_cpu(), &err), FA_OK);
    assert_int_equal(v3_compare(&c, 0), 0);
    assert_int_equal(v3_ref_violations(&c, 0), 0);
    c.dense[0].o.buf[5] ^= 0x0400;  /* the exponent's low bit: x2 or x0.5 */
    assert_true(v3_compare(&c, 0) > 0);
    assert_true(v3_ref_violations(&c, 0) > 0);
    v3_free(&c);
}

/* Every v3 mutant is caught by these checks on its cases. */
static const struct { const char *mutant; int spec[3]; } mutant_specs[] = {
    {"block_table_stride", {3, 4, -1}},
    {"softcap_derivative_missing", {7, 8, -1}},
    {"sink_left_out", {9, 10, -1}},
    {"varlen_prev_offset", {0, 1, -1}},
    {"seqused_k_ignored", {0, 2, 3}},
    {"dsink_sign", {9, 10, -1}},
    {"pages_assumed_contiguous", {3, 4, 5}},
    {"split_combine_drops_last", {13, 14, -1}},
    {"varlen_causal_from_max_lengths", {0, 1, -1}},
    {"softcap_cap_not_reapplied", {7, 8, -1}},
    {"scale_from_dv", {0, 11, -1}},
    {"dk_rows_at_dv_pitch", {0, 11, -1}},
};

static void test_v3_mutants_caught(void **state) {
    (void)state;
    for (size_t m = 0; m < sizeof mutant_specs / sizeof mutant_specs[0]; m++) {
        const int id = fa_cpu_mutant_id(mutant_specs[m].mutant);
        assert_true(id > 0);
        for (int k = 0; k < 3 && mutant_specs[m].spec[k] >= 0; k++) {
            long v = run_spec(&specs[mutant_specs[m].spec[k]], id, 0);
            if (v == 0)
                fail_msg("mutant %s survives case '%s'", mutant_specs[m].mutant, specs[mutant_specs[m].spec[k]].name);
        }
        print_message("  %-28s caught\n", mutant_specs[m].mutant);
    }
}

int main(void) {
    fa_cpu_set_mutant(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_v3_cases),
        cmocka_unit_test(test_checks_can_fail),
        cmocka_unit_test(test_v3_mutants_caught),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
