/* pair_rule_test.c: the CUDA backend's head-dim pair dispatch, on the CPU (no GPU needed).
 *   1. the limits the backend table publishes (common/limits.h, the values backend.cu puts in
 *      the table and bwd_host.cu validates with) accept Dqk != Dv: 192/128, 136/72, 64/128,
 *      256/8 pass fa_validate_fwd / fa_validate_bwd; a head dim that is not a multiple of 8
 *      (192/132) or above 256 (264/128) is FA_ERR_UNSUPPORTED naming the offending head dim.
 *   2. the rule of common/pairs.h: which pairs run the MLA kernels (Dqk padded to 192, Dv to
 *      128) and which the equal-dim kernels of the larger padded dim (backward tile codes).
 * Exit 0: all passed. */
#include <stdio.h>

#include "kernels/cuda/common/limits.h"
#include "kernels/cuda/common/pairs.h"
#include "tests/api/api_test_util.h"

static int n_fail = 0;
#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (!(cond)) {                                                \
            ++n_fail;                                                 \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);      \
            fprintf(stderr, __VA_ARGS__);                             \
            fprintf(stderr, "\n");                                    \
        }                                                             \
    } while (0)

/* The table's limits, field by field as backend.cu and bwd_host.cu fill them. */
static fa_limits cuda_limits(int64_t align) {
    fa_limits l;
    memset(&l, 0, sizeof(l));
    l.max_head_dim = FA_CUDA_MAX_HEAD_DIM;
    l.head_dim_multiple = FA_CUDA_HEAD_DIM_MULTIPLE;
    l.dqk_must_equal_dv = FA_CUDA_DQK_MUST_EQUAL_DV;
    l.ptr_align_bytes = align;
    l.unit_last_stride = FA_CUDA_UNIT_LAST_STRIDE;
    l.supports_varlen = FA_CUDA_SUPPORTS_VARLEN;
    l.supports_paged = FA_CUDA_SUPPORTS_PAGED;
    l.supports_softcap = FA_CUDA_SUPPORTS_SOFTCAP;
    l.supports_sinks = FA_CUDA_SUPPORTS_SINKS;
    return l;
}

/* Validates (dqk, dv) forward and backward; expect FA_OK or FA_ERR_UNSUPPORTED naming arg. */
static void validate_pair(int64_t dqk, int64_t dv, fa_status want, const char *arg) {
    tt_case c;
    tt_case_init(&c, tt_problem(2, 9, 13, 4, 2, dqk, dv, FA_BF16), TT_CONTIGUOUS, (uint64_t)(dqk * 1000 + dv));
    const fa_limits lf = cuda_limits(FA_CUDA_PTR_ALIGN_BYTES), lb = cuda_limits(FA_CUDA_BWD_PTR_ALIGN_BYTES);
    fa_fwd_args fa = tt_fwd_args(&c);
    fa_bwd_args ba = tt_bwd_args(&c);
    for (int bwd = 0; bwd < 2; ++bwd) {
        fa_error err;
        memset(&err, 0, sizeof(err));
        const fa_status st = bwd ? fa_validate_bwd(&ba, &lb, &err) : fa_validate_fwd(&fa, &lf, &err);
        CHECK(st == want, "%s %lld/%lld: %s (%s: %s), want %s", bwd ? "bwd" : "fwd", (long long)dqk, (long long)dv,
              fa_status_name(st), err.arg, err.msg, fa_status_name(want));
        if (want != FA_OK && st == want)
            CHECK(strcmp(err.arg, arg) == 0, "%s %lld/%lld: declined naming %s, want %s", bwd ? "bwd" : "fwd",
                  (long long)dqk, (long long)dv, err.arg, arg);
    }
    tt_case_free(&c);
}

int main(void) {
    /* 1. the published limits */
    CHECK(FA_CUDA_DQK_MUST_EQUAL_DV == 0, "the table claims Dqk == Dv");
    validate_pair(192, 128, FA_OK, "");
    validate_pair(136, 72, FA_OK, "");
    validate_pair(64, 128, FA_OK, "");
    validate_pair(256, 8, FA_OK, "");
    validate_pair(128, 128, FA_OK, "");
    validate_pair(192, 132, FA_ERR_UNSUPPORTED, "head_dim_v");
    validate_pair(264, 128, FA_ERR_UNSUPPORTED, "head_dim_qk");
    validate_pair(192, 264, FA_ERR_UNSUPPORTED, "head_dim_v");

    /* 2. the rule: the pair's own kernels exactly for Dqk in 136..192 and Dv in 72..128 */
    for (int64_t dqk = 8; dqk <= 256; dqk += 8)
        for (int64_t dv = 8; dv <= 256; dv += 8) {
            const int native = dqk >= 136 && dqk <= 192 && dv >= 72 && dv <= 128;
            CHECK(fa_cuda_pair_native(dqk, dv) == native, "pair_native(%lld, %lld)", (long long)dqk, (long long)dv);
            const int64_t m = dqk > dv ? dqk : dv;
            const int want = native ? 192 : (m <= 64 ? 64 : (m <= 128 ? 128 : 256));
            CHECK(fa_cuda_bwd_tile(dqk, dv) == want, "bwd_tile(%lld, %lld) = %d, want %d", (long long)dqk,
                  (long long)dv, fa_cuda_bwd_tile(dqk, dv), want);
        }
    CHECK(fa_cuda_pair_native(192, 128) && fa_cuda_bwd_tile(192, 128) == 192, "192/128 is the MLA pair");
    CHECK(!fa_cuda_pair_native(128, 192) && fa_cuda_bwd_tile(128, 192) == 256, "128/192: the 256 kernels");
    CHECK(!fa_cuda_pair_native(192, 192) && fa_cuda_bwd_tile(192, 192) == 256, "192/192: equal dims");

    printf("pair_rule_test: %s\n", n_fail ? "FAILED" : "OK");
    return n_fail ? 1 : 0;
}
