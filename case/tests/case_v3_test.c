/* case_v3_test.c: the contract-v3 fields of a case: text keys, round trip, dims of packed
 * and paged tensors, lengths and host arrays, sinks, and errors that name the field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case/case.h"
#include "case/tests/case_check.h"


static const char *varlen_text =
    "shape = 4 70 130 4 2 16 8\n"
    "seqlens_q = 5,0,1,70\n"
    "seqlens_k = 7,3,0,130\n"
    "seqused_k = 7,2,0,100\n"
    "softcap = 30\n"
    "sinks = gaussian amp=2\n"
    "causal = bottom_right\n";

static const char *paged_text =
    "shape = 2 4 40 2 1 32 32\n"
    "seqlens_q = 1,4\n"
    "seqused_k = 37,5\n"
    "paged = 16 6 2\n"
    "block_table.0 = 3,0,5\n"
    "block_table.1 = 2,-1,-1\n";

static void test_roundtrip(void) {
    const char *texts[2] = {varlen_text, paged_text};
    for (int k = 0; k < 2; k++) {
        fc_case c, d;
        char msg[256], buf[8192];
        CHECK(fc_case_parse(texts[k], &c, msg, sizeof msg) == 0, "parse %d: %s", k, msg);
        CHECK(fc_case_is_v3(&c), "is_v3");
        size_t n = fc_case_write(&c, buf, sizeof buf);
        CHECK(n < sizeof buf, "write length");
        CHECK(fc_case_parse(buf, &d, msg, sizeof msg) == 0, "reparse %d: %s\n%s", k, msg, buf);
        CHECK(fc_case_equal(&c, &d), "round trip %d:\n%s", k, buf);
        d.v3.seqused_k[1] = 3;
        CHECK(!fc_case_equal(&c, &d), "equality sees seqused_k");
    }
    /* a v2 case writes no v3 line */
    fc_case c;
    char buf[8192];
    fc_case_default(&c);
    fc_case_write(&c, buf, sizeof buf);
    CHECK(!strstr(buf, "seqlens") && !strstr(buf, "paged") && !strstr(buf, "softcap") && !strstr(buf, "sinks"),
          "v2 text has v3 keys:\n%s", buf);
    CHECK(!fc_case_is_v3(&c), "default is not v3");
}

static void test_dims_and_arrays(void) {
    fc_case c;
    char msg[256];
    CHECK(fc_case_parse(varlen_text, &c, msg, sizeof msg) == 0, "%s", msg);
    int64_t dim[4];
    CHECK(fc_case_dims(&c, FC_T_Q, dim) == 4 && dim[0] == 1 && dim[1] == 76 && dim[2] == 4 && dim[3] == 16, "q dims");
    CHECK(fc_case_dims(&c, FC_T_DV, dim) == 4 && dim[0] == 1 && dim[1] == 140 && dim[2] == 2 && dim[3] == 8, "dv dims");
    CHECK(fc_case_dims(&c, FC_T_LSE, dim) == 3 && dim[0] == 1 && dim[1] == 4 && dim[2] == 76, "lse dims");
    CHECK(fc_case_seq_q(&c, 3) == 70 && fc_case_seq_k(&c, 1) == 2 && fc_case_seq_alloc(&c, 1) == 3, "lengths");
    int32_t cu_q[5], cu_k[5], used[4];
    CHECK(fc_case_v3_arrays(&c, cu_q, cu_k, used, NULL) == 0, "not paged");
    CHECK(cu_q[4] == 76 && cu_q[2] == 5 && cu_k[3] == 10 && cu_k[4] == 140 && used[3] == 100, "arrays");
    double s0 = fc_case_sink(&c, 0), s1 = fc_case_sink(&c, 1);
    CHECK(s0 != s1 && s0 == (double)(float)s0 && fabs(s0) < 20, "sinks %g %g", s0, s1);
    CHECK(fc_case_parse(paged_text, &c, msg, sizeof msg) == 0, "%s", msg);
    CHECK(fc_case_dims(&c, FC_T_K, dim) == 4 && dim[0] == 6 && dim[1] == 16 && dim[2] == 1, "pool dims");
    CHECK(fc_case_dims(&c, FC_T_O, dim) == 4 && dim[1] == 5, "packed o");
    int32_t table[2 * 5];
    CHECK(fc_case_v3_arrays(&c, NULL, NULL, NULL, table) == 5, "table stride");
    CHECK(table[0] == 3 && table[2] == 5 && table[3] == -1 && table[4] == -1 && table[5] == 2, "table");
}

static void expect_error(const char *text, const char *needle) {
    fc_case c;
    char msg[256] = "";
    int rc = fc_case_parse(text, &c, msg, sizeof msg);
    CHECK(rc != 0 && strstr(msg, needle) != NULL, "want an error with '%s', got rc %d '%s'", needle, rc, msg);
}

static void test_errors(void) {
    expect_error("shape = 2 8 8 1 1 8 8\nseqlens_q = 1,2,3\n", "seqlens_q has 3 entries");
    expect_error("shape = 2 8 8 1 1 8 8\nseqlens_q = 1,9\n", "seqlens_q[1]");
    expect_error("shape = 2 8 8 1 1 8 8\nseqlens_k = 1,x\n", "seqlens_k");
    expect_error("shape = 2 8 8 1 1 8 8\nseqlens_q = 1,2\nmask = random_neginf\n", "mask");
    expect_error("shape = 2 8 8 1 1 8 8\nseqused_k = 1,9\n", "seqused_k[1]");
    /* regression (fuzz finding): pages to spare do not allow more keys than seqlen_k */
    expect_error("shape = 1 8 5 1 1 8 8\nseqused_k = 7\npaged = 4 3 0\nblock_table.0 = 0,1\n", "at most seqlen_k");
    expect_error("shape = 1 8 8 1 1 8 8\nsoftcap = -1\n", "softcap");
    expect_error("shape = 1 8 8 1 1 8 8\nsinks = nosuch\n", "sinks");
    expect_error("shape = 1 8 8 1 1 8 8\npaged = 4 3 0\n", "block_table.0");
    expect_error("shape = 1 8 8 1 1 8 8\npaged = 4 3 0\nblock_table.0 = 0,3\n", "block_table.0 entry 1");
    expect_error("shape = 1 8 8 1 1 8 8\npaged = 4 3 0\nblock_table.0 = 0\n", "must hold seqlen_k");
    expect_error("shape = 2 8 8 1 1 8 8\npaged = 4 3 0\nblock_table.0 = 0,1\nblock_table.1 = 0\n", "entries");
    expect_error("shape = 1 8 8 1 1 8 8\nblock_table.0 = 0,1\n", "without 'paged");
    expect_error("shape = 1 8 8 1 1 8 8\npaged = 4 3 0\nblock_table.0 = 0,1\nseqlens_k = 8\n", "packed or paged");
    expect_error("shape = 1 8 8 1 1 8 8\nsoftcap = 1\nsoftcap = 2\n", "twice");
    /* entries past the used pages are not checked */
    fc_case c;
    char msg[256];
    CHECK(fc_case_parse("shape = 1 8 8 1 1 8 8\nseqused_k = 3\npaged = 4 3 0\nblock_table.0 = 2,77\n", &c, msg,
                        sizeof msg) == 0, "%s", msg);
}

int main(void) {
    test_roundtrip();
    test_dims_and_arrays();
    test_errors();
    if (failures) printf("%d failures\n", failures);
    else printf("case_v3_test: all passed\n");
    return failures ? 1 : 0;
}
