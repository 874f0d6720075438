/* cpu_backend.c: the CPU backend's fa_backend table (host memory).
 * The arithmetic is in cpu_fwd.c / cpu_bwd.c; the profile below describes it. */
#include "kernels/cpu/cpu_ftz.h"
#include "kernels/cpu/cpu_internal.h"

/* any head dim 1..512 (Dqk != Dv too), any strides, pointers aligned to the element size;
 * every contract-v3 feature, forward and backward (paged backward included) */
#define CPU_LIMITS_INIT                                                                      \
    {                                                                                        \
        .max_head_dim = 512, .head_dim_multiple = 1, .dqk_must_equal_dv = 0,                 \
        .ptr_align_bytes = 2, .unit_last_stride = 0, .supports_varlen = 1,                   \
        .supports_paged = 1, .supports_softcap = 1, .supports_sinks = 1,                     \
    }

const fa_limits cpu_limits = CPU_LIMITS_INIT;

static const fa_backend cpu_backend_table = {
    .abi_version = FA_ABI_VERSION,
    .name = "cpu",
    .memspace = FA_MEM_HOST,
    .precision = {
        .u_acc = 0x1p-24,       /* every sum is fp32, round to nearest, no FMA contraction */
        .exp_rel_err = 0x1p-23, /* glibc expf: < 1 ulp for all fp32 arguments */
        .scores_fp32 = 1,       /* S = fp32(fp32(q.k) * scale) + mask, held in fp32 */
        .p_rounded = 1,         /* rnd(P) feeds P.V (forward) and dV (backward); the row sum l
                                   and dS use the unrounded fp32 P */
        .ds_rounded = 0,        /* dS stays fp32 for dQ and dK */
        .out_rounded = 1,       /* O, dQ, dK, dV: fp32 value rounded (RNE) to the dtype */
        .max_rescales = 17,     /* one per 64-key tile: 1000 keys touch at most 17 tiles (a split-KV
                                   decode row too: cpu_fwd.c, split-KV decode) */
        .flushes_subnormals = 0, /* IEEE fp32/fp64 with gradual underflow */
        .exp_ulps = 1,          /* glibc expf: < 1 ulp */
        .tc_terms = 0,          /* plain fp32 additions (u_acc) */
        .ds_scale_folded = 0,   /* dQ = rnd(scale * dQ_acc), dK = rnd(scale * dK_acc) (cpu_bwd.c) */
        .dp_rounded = 0,        /* dP stays fp32 */
        .d_source = FA_D_FROM_O,      /* D_i = dO_i . O_i in fp32 (cpu_bwd.c phase 1) */
        .gqa_reduce = FA_GQA_FUSED,   /* the group's heads accumulate into one fp32 dK/dV row */
        .lse_empty = FA_LSE_EMPTY_NEG_INF, /* cpu_fwd.c: no visible key -> -inf */
    },
    .limits = CPU_LIMITS_INIT,
    .forward = cpu_forward,
    .backward = cpu_backward,
};

const fa_backend *fa_backend_cpu(void) { return &cpu_backend_table; }

// ----------------------------------------------------------------------------
// flush-to-zero mode (cpu_ftz.h): the same arithmetic under MXCSR FTZ/DAZ

static fa_status cpu_forward_ftz(const fa_fwd_args *a, fa_error *err) { return cpu_forward_mode(a, 1, err); }
static fa_status cpu_backward_ftz(const fa_bwd_args *a, fa_error *err) { return cpu_backward_mode(a, 1, err); }

static const fa_backend cpu_ftz_backend_table = {
    .abi_version = FA_ABI_VERSION,
    .name = "cpu_ftz",
    .memspace = FA_MEM_HOST,
    .precision = {
        .u_acc = 0x1p-24, .exp_rel_err = 0x1p-23, .scores_fp32 = 1, .p_rounded = 1,
        .ds_rounded = 0, .out_rounded = 1, .max_rescales = 17, /* as the cpu table */
        .flushes_subnormals = 1, /* MXCSR FTZ + DAZ: results and operands below 2^-126 are 0 */
        .exp_ulps = 1, .d_source = FA_D_FROM_O, .gqa_reduce = FA_GQA_FUSED,
        .lse_empty = FA_LSE_EMPTY_NEG_INF, /* as the cpu table */
    },
    .limits = CPU_LIMITS_INIT,
    .forward = cpu_forward_ftz,
    .backward = cpu_backward_ftz,
};

const fa_backend *fa_backend_cpu_ftz(void) { return &cpu_ftz_backend_table; }
