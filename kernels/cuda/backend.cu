/* backend.cu: the CUDA backend table (fa_backend_cuda), fa_cuda_device_count and the
 * default kernel policy (testing.h).
 *
 * The precision profile describes the code in fwd/ (fwd_common.cuh) and the
 * backward in bwd/, which follows the same arithmetic:
 *   u_acc       2^-23: q.k, p.v (and the backward's products) accumulate in the
 *               tensor cores' fp32 accumulator, whose additions truncate.
 *   exp_rel_err 2^-22: ex2.approx.ftz.f32, whose error the PTX ISA states
 *               as about 2 ulp of fp32 (2^-22 relative) for results in the
 *               normal range (the exact sentence was not re-checked in the
 *               docs this session; the certification grid's worst element
 *               is at 0.5 of its bound with this value). Results below
 *               2^-126 flush to 0. The argument's own rounding (the folded
 *               scale*log2(e), the subtraction of the max) is score error.
 *   scores_fp32 1: S = scale * q.k (+ mask) is formed and kept in fp32.
 *   p_rounded   1: P is rounded (RN) to fp16/bf16 before P.V.
 *   ds_rounded  1: dS is rounded to the input dtype before dS.K and dS^T.Q.
 *   out_rounded 1: O (and dQ, dK, dV) are rounded RN to the input dtype.
 *   max_rescales 33: at most one rescale per key block, the smallest block is
 *               32 keys: ceil(1000 / 32) + 1 per 1000 keys.
 * Contract v3 in the forward (fwd/fwd_common.cuh): softcap scores are
 *   s = fmaf(softcap, tanhf(q.k * fl(scale / softcap)), mask) (CUDA tanhf: 2 ulp; the
 *   quotient and the product each round once, RN); sinks start every row at m = sink, l = 1
 *   (the online softmax's own rescaling); the decode path's split-KV partials are combined
 *   by one more rescale per split (fwd_host.cu, flash_fwd_combine: the key loop's
 *   arithmetic), within max_rescales (at least 2 blocks of 64 keys per split: fwd_host.cu).
 * Contract v3 in the backward (bwd/): varlen runs the dense kernels per sequence (same
 *   arithmetic); softcap recomputes t and s exactly as the forward and multiplies dS =
 *   P (dP - D) by fl(1 - fl(t t)) before rounding dS to the dtype (ds_rounded: BOUNDS.md 14.3,
 *   "dS rounded after the factor"); no profile field beyond these. The table's limits claim
 *   paged K/V for the forward; the paged backward answers FA_ERR_UNSUPPORTED ("page_size").
 * Limits: common/limits.h (head dims 8..256 in steps of 8, any Dqk and Dv, 16-byte aligned
 * pointers: the kernels move 16-byte chunks, unit last-dimension stride). */
#include <cuda_runtime.h>

#include "kernels/cuda/common/limits.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/testing.h"

// ----------------------------------------------------------------------------
// the table

static const fa_backend fa_cuda_table = {
    FA_ABI_VERSION,
    "cuda",
    FA_MEM_CUDA,
    {
        0x1p-23, /* u_acc */
        0x1p-22, /* exp_rel_err */
        1,       /* scores_fp32 */
        1,       /* p_rounded */
        1,       /* ds_rounded */
        1,       /* out_rounded */
        33,      /* max_rescales */
        1,       /* flushes_subnormals: ex2.approx.ftz and fp32 FTZ (bf16 outputs below 2^-126 -> 0) */
        2.0,     /* exp_ulps: ex2.approx.f32, 2 ulp on normal results (PTX ISA) */
        4,       /* tc_terms: mma.sync / wgmma multi-term adds; 4 terms, no extra alignment bits, */
        0,       /* tc_extra_bits   truncation is the setting sound for every measured tensor core */
        0,       /* tc_align_rn     (oracle/BOUNDS.md 10.2); on sm_90 fa_backend_cuda declares the measured model */
        0,       /* tc_norm_rn */
        0,       /* ds_scale_folded: dQ, dK = scale * fp32 accumulator (bwd/flash_bwd.cu header) */
        0,       /* dp_rounded: dP stays fp32 */
        0,       /* d_source FA_D_FROM_O: Dsum = dO . O in fp32 */
        0,       /* gqa_reduce FA_GQA_FUSED: the group's heads accumulate in fp32 */
        0,       /* lse_empty FA_LSE_EMPTY_NEG_INF (fwd/flash_fwd.cu: l == 0 -> -inf) */
    },
    {
        FA_CUDA_MAX_HEAD_DIM,
        FA_CUDA_HEAD_DIM_MULTIPLE,
        FA_CUDA_DQK_MUST_EQUAL_DV,
        FA_CUDA_PTR_ALIGN_BYTES,
        FA_CUDA_UNIT_LAST_STRIDE,
        FA_CUDA_SUPPORTS_VARLEN,
        FA_CUDA_SUPPORTS_PAGED,
        FA_CUDA_SUPPORTS_SOFTCAP,
        FA_CUDA_SUPPORTS_SINKS,
    },
    fa_cuda_forward,
    fa_cuda_backward,
};

/* On devices that are all sm_90 (H100, H200) the accumulation the tc_probe measured there:
 * 16 products and the accumulator aligned together with 2 extra bits, truncated (preset
 * tensorcore-hopper, oracle/tc_probe/README.md); elsewhere the conservative model above. */
static fa_backend fa_cuda_table_hopper;

static int all_devices_sm90(void) {
    int n = fa_cuda_device_count();
    for (int d = 0; d < n; d++) {
        int major = 0, minor = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        if (major != 9 || minor != 0) return 0;
    }
    return n > 0;
}

extern "C" const fa_backend *fa_backend_cuda(void) {
    static int chosen = -1; /* idempotent: a race computes the same answer twice */
    if (chosen < 0) {
        fa_precision hop;
        if (all_devices_sm90() && fa_precision_preset("tensorcore-hopper", &hop, NULL) == FA_OK) {
            fa_cuda_table_hopper = fa_cuda_table;
            fa_cuda_table_hopper.precision.tc_terms = hop.tc_terms;
            fa_cuda_table_hopper.precision.tc_extra_bits = hop.tc_extra_bits;
            fa_cuda_table_hopper.precision.tc_align_rn = hop.tc_align_rn;
            fa_cuda_table_hopper.precision.tc_norm_rn = hop.tc_norm_rn;
            chosen = 1;
        } else {
            chosen = 0;
        }
    }
    return chosen ? &fa_cuda_table_hopper : &fa_cuda_table;
}

/* What the table's entry points run (testing.h: tests may pass another policy). */
extern "C" const fa_cuda_policy fa_cuda_policy_default = {-1, -1, 1, 1, 1, 1, 0, 0, {NULL, NULL}, 0, 0, 0};

// ----------------------------------------------------------------------------
// devices

/* cudaGetDeviceCount; any error (no driver, no device, an old driver) is 0.
 * The error is cleared so it does not leak into a later cudaGetLastError. */
extern "C" int fa_cuda_device_count(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n < 0 ? 0 : n;
}
