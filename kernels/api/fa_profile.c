/* fa_profile.c: named precision presets: the fa_precision of implementations
 * flashcheck did not build, so verify/certify/fuzz (--profile NAME) and the
 * Python package can bound them. Each preset states the evidence that it
 * describes the implementation: the source line that does it, or (marked
 * "measured") a measurement; a field nobody could check is set to the value
 * whose bound covers every alternative (oracle/BOUNDS.md section 10 says which
 * value dominates which). A preset is no looser than its evidence requires:
 * oracle/tests/test_bound_soundness.c checks that
 * a kernel outside a preset fails it.
 *
 * Sources cited (pytorch/pytorch, aten/src/ATen/native/transformers/cuda/):
 *   FA2   flash_attn/flash_bwd_kernel.h, softmax.h, flash_api.cpp (FlashAttention-2 as
 *         vendored by PyTorch; the same lines are in Dao-AILab/flash-attention csrc/flash_attn)
 *   MEFF  mem_eff_attention/kernel_backward.h (commit 00f993df1f19)
 *   MATH  ../attention.cpp _scaled_dot_product_attention_math (aten/src/ATen/native/transformers/)
 * Tensor-core accumulation: tc_terms 4, no extra alignment bit, truncation is
 * the setting whose bound covers every published tensor-core model (Fasi et
 * al. 2021: V100/T4 4 terms, A100 8, truncation; Khattak & Mikaitis 2025:
 * H100/B200 wider adders with extra bits): BOUNDS.md 10.2. Until the H100
 * probe (kernels/cuda/, GPU test) measures the parameters, every tensor-core
 * preset uses it. */
#include <stdio.h>
#include <string.h>

#include "kernels/flash_api.h"

typedef struct {
    const char *name;
    fa_precision prof;
} fa_preset;

/* the tensor-core accumulation sound for every published model (BOUNDS.md 10.2) */
#define FA_TC_CONSERVATIVE .u_acc = 0x1p-23, .tc_terms = 4, .tc_extra_bits = 0, .tc_align_rn = 0, .tc_norm_rn = 0

static const fa_preset presets[] = {
    /* tensorcore: ours (kernels/cuda/backend.cu's table, which the certification grid
     * checks on the H100) and any flash kernel of the same arithmetic: mma.sync/wgmma
     * accumulation; ex2.approx.ftz (2 ulp; 2^-21 also covers the folded scale*log2(e)
     * multiply of kernels that pass an unrounded product); P and dS rounded to the dtype
     * before their products (bwd/flash_bwd.cu header: "dS rounded (RN) to the input dtype
     * before dS K and dS^T Q"); scale applied to the fp32 dQ, dK accumulators; D = dO.O in
     * fp32; the GQA group accumulated in fp32 (the dK/dV kernel streams every query head
     * of the group); LSE -inf for empty rows (fwd/flash_fwd.cu: l == 0 -> -inf). */
    {"tensorcore", {FA_TC_CONSERVATIVE, .exp_rel_err = 0x1p-21, .exp_ulps = 2, .scores_fp32 = 1,
                    .p_rounded = 1, .ds_rounded = 1, .out_rounded = 1, .max_rescales = -1,
                    .flushes_subnormals = 1, .ds_scale_folded = 0, .dp_rounded = 0,
                    .d_source = FA_D_FROM_O, .gqa_reduce = FA_GQA_FUSED,
                    .lse_empty = FA_LSE_EMPTY_NEG_INF,
                    .masked_nonfinite = FA_MASKED_NF_ISOLATED}},
    /* tensorcore-hopper: tensorcore with the accumulation measured on the H100 (sm_90) by
     * oracle/tc_probe (mma.sync m16n8k16 and wgmma, fp16 and bf16 alike): the 16 products of
     * one k-step and the accumulator are aligned together keeping 2 extra bits, truncated, and
     * the step's result is truncated to fp32 (oracle/tc_probe/README.md). Sound only where that
     * holds (Hopper); the CUDA backend declares it on devices that are all sm_90
     * (kernels/cuda/backend.cu), tensorcore elsewhere. */
    {"tensorcore-hopper", {.u_acc = 0x1p-23, .tc_terms = 16, .tc_extra_bits = 2, .tc_align_rn = 0, .tc_norm_rn = 0,
                           .exp_rel_err = 0x1p-21, .exp_ulps = 2, .scores_fp32 = 1,
                           .p_rounded = 1, .ds_rounded = 1, .out_rounded = 1, .max_rescales = -1,
                           .flushes_subnormals = 1, .ds_scale_folded = 0, .dp_rounded = 0,
                           .d_source = FA_D_FROM_O, .gqa_reduce = FA_GQA_FUSED,
                           .lse_empty = FA_LSE_EMPTY_NEG_INF,
                           .masked_nonfinite = FA_MASKED_NF_ISOLATED}},
    /* fp32: scores, softmax and sums in IEEE fp32 (RN, gradual underflow), only O/dQ/dK/dV
     * rounded to the dtype; exp within 2 ulp (CUDA expf; glibc's 1 ulp is inside it). */
    {"fp32", {.u_acc = 0x1p-24, .exp_rel_err = 0x1p-23, .exp_ulps = 2, .scores_fp32 = 1,
              .p_rounded = 0, .ds_rounded = 0, .out_rounded = 1, .max_rescales = -1,
              .flushes_subnormals = 0, .tc_terms = 0, .ds_scale_folded = 0, .dp_rounded = 0,
              .d_source = FA_D_FROM_O, .gqa_reduce = FA_GQA_FUSED,
              .lse_empty = FA_LSE_EMPTY_NEG_INF,
              .masked_nonfinite = FA_MASKED_NF_ISOLATED}},
    /* torch-flash: SDPA's flash backend (FlashAttention-2).
     *   FA2 flash_bwd_kernel.h: "acc_dk(i) *= params.scale_softmax_rp_dropout" before
     *     convert_type<Element>(acc_dk) (scale after the products, ds_scale_folded 0); dS
     *     converted to Element before the dS.K / dS^T.Q GEMMs (ds_rounded); rP =
     *     convert_type<Element>(scores) for dV (p_rounded); dP stays in the fp32 accumulator;
     *     dP_sum = dot(dO, O) in fp32 (compute_dot_do_o: FA_D_FROM_O).
     *   FA2 flash_api.cpp mha_bwd: for num_heads_k != num_heads, dk_expanded/dv_expanded
     *     [b, s, h, d] in the input dtype, then at::sum_out(dk, reshape(dk_expanded, ..), {3})
     *     (sum of a half/bf16 tensor: fp32 accumulation, one rounding): FA_GQA_ROUND_SUM32.
     *   FA2 softmax.h normalize_softmax_lse: lse = (sum == 0 || sum != sum) ? (Split ? -INF :
     *     INFINITY) : ...: +inf for a row with no key (FA_LSE_EMPTY_POS_INF).
     *   exp2f under --use_fast_math: ex2.approx.ftz (2 ulp, subnormals flushed).
     *   Masked pairs (FA_MASKED_NF_PROPAGATES): FA2 masks scores by select (mask.h apply_mask:
     *     -INFINITY written over the score), so P_ij = 0 exactly, but the P.V GEMM
     *     (flash_fwd_kernel.h gemm_rs(acc_o, tOrP, tOrVt)) runs over the whole key block: 0 times
     *     a NaN/Inf V_j is NaN in O_i; the backward's dQ = dS.K and dK = dS^T.Q, dV = P^T.dO GEMMs
     *     (flash_bwd_kernel.h) do the same with dS_ij = 0. Measured on the H100 (2026-11-25,
     *     torch 2.11, RESULTS-2026-11-25-s7-nf.md): leak#1000 O/dQ NaN at rows that see none of
     *     the NaN keys. */
    {"torch-flash", {FA_TC_CONSERVATIVE, .exp_rel_err = 0x1p-21, .exp_ulps = 2, .scores_fp32 = 1,
                     .p_rounded = 1, .ds_rounded = 1, .out_rounded = 1, .max_rescales = -1,
                     .flushes_subnormals = 1, .ds_scale_folded = 0, .dp_rounded = 0,
                     .d_source = FA_D_FROM_O, .gqa_reduce = FA_GQA_ROUND_SUM32,
                     .lse_empty = FA_LSE_EMPTY_POS_INF,
                     .masked_nonfinite = FA_MASKED_NF_PROPAGATES}},
    /* torch-efficient: SDPA's memory-efficient backend (xformers' CUTLASS kernel).
     *   MEFF: "accum[idx] = (accum[idx] - current_di) * attn" with attn read from the
     *     scalar_t attention tile (P rounded, used in dS and dV), then "accum = accum *
     *     scale;" and only then "tmpT.at(..) = scalar_t(accum[idx])" / accumToSmem: the
     *     scale is folded into dS before its rounding (ds_scale_folded 1, ds_rounded 1);
     *     grad_q/grad_k GEMMs take that dS with no further scale; dP is the fp32 accumulator
     *     of MatmulDOIVJ (dp_rounded 0); Di from dO.O in fp32 (FA_D_FROM_O).
     *   GQA (enable_gqa): K/V expanded per query head, per-head gradients in the dtype summed
     *     by autograd (.sum() of the dtype tensor): FA_GQA_ROUND_SUM32.
     *   Empty rows: LSE 0 (measured on the H100, issue #13: "the efficient backend stores 0
     *     where the contract says -inf"): FA_LSE_EMPTY_ZERO.
     *   Masked pairs (FA_MASKED_NF_PROPAGATES): attn_mask enters as an additive bias on the scores
     *     (a NaN score plus -inf is NaN), and the P.V, dS.K, dS^T.Q GEMMs take every key of a block
     *     with P_ij = 0, dS_ij = 0 for the hidden ones (0 times NaN/Inf is NaN).
     *     Measured on the H100 (2026-11-25, RESULTS-2026-11-25-s7-nf.md): leak#1000 rows that see
     *     none of the NaN keys became NaN; nonfinite#4000 dQ NaN at rows hidden from the NaN key. */
    {"torch-efficient", {FA_TC_CONSERVATIVE, .exp_rel_err = 0x1p-21, .exp_ulps = 2, .scores_fp32 = 1,
                         .p_rounded = 1, .ds_rounded = 1, .out_rounded = 1, .max_rescales = -1,
                         .flushes_subnormals = 1, .ds_scale_folded = 1, .dp_rounded = 0,
                         .d_source = FA_D_FROM_O, .gqa_reduce = FA_GQA_ROUND_SUM32,
                         .lse_empty = FA_LSE_EMPTY_ZERO,
                         .masked_nonfinite = FA_MASKED_NF_PROPAGATES}},
    /* torch-cudnn: SDPA's cuDNN backend (closed source). Measured: tests/false_alarm/probe_cudnn.py
     * (--trials 5 --budget 85) on an H100 80GB HBM3, 2026-11-25, PyTorch 2.11.0+cu130, cuDNN
     * 9.19.0 (91900); tests fold:fp16, fold:bf16, fold:fp16 D=128, dp:fp16, dp:bf16, dp:bf16 D=128,
     * gqa:fp16, gqa:bf16, gqa:bf16 D=128, lse:fp16, lse:bf16, each decided 5/5 trials with the
     * flash and math controls consistent with their source (tests/false_alarm/RESULTS.md,
     * 2026-11-25): the scale folded into dS before its rounding (ds_scale_folded 1, every fold
     * test), dP not rounded (dp_rounded 0, every dp test), dS rounded, D = dO.O, GQA per head
     * rounded (the sum's rounding undecided: round_sum32 kept, it dominates fused), P rounded for
     * dV (for dS measured unrounded; p_rounded 1 dominates), LSE -inf for empty rows, subnormals
     * flushed (1 on bf16, undecided on fp16). Unmeasured, at the dominating value (BOUNDS.md
     * 10.7): tensor-core accumulation, a fast exp. cuDNN picks an engine per shape, dtype and version: an engine the
     * probe did not reach may differ; the full false-alarm suite (tests/false_alarm/) is the check.
     * Masked pairs (FA_MASKED_NF_PROPAGATES), measured (H100, 2026-11-25, RESULTS-2026-11-25-s7-nf.md):
     * nonfinite#4000 (causal, K NaN at key 76) gave dQ NaN at the 76 rows of each head that do not
     * see key 76 (dQ_i = sum_j dS_ij K_j with dS_ij = 0 and K_j NaN). */
    {"torch-cudnn", {FA_TC_CONSERVATIVE, .exp_rel_err = 0x1p-21, .exp_ulps = 2, .scores_fp32 = 1,
                     .p_rounded = 1, .ds_rounded = 1, .out_rounded = 1, .max_rescales = -1,
                     .flushes_subnormals = 1, .ds_scale_folded = 1, .dp_rounded = 0,
                     .d_source = FA_D_FROM_O, .gqa_reduce = FA_GQA_ROUND_SUM32,
                     .lse_empty = FA_LSE_EMPTY_NEG_INF,
                     .masked_nonfinite = FA_MASKED_NF_PROPAGATES}},
    /* torch-math: the unfused SDPA graph (MATH) with PyTorch's default
     *   allow_fp16_bf16_reduction_math_sdp(False): "auto query_acc = !ctx.allowFP16BF16ReductionMathSDP()
     *   && (... kHalf || ... kBFloat16) ... ? query_.to(at::kFloat)" (and key, value): everything
     *   in fp32. "scaling_factor = sdp::calculate_scale(..).sqrt()", "query = query_acc *
     *   scaling_factor", "attn = at::matmul(query, key_expanded.transpose(-2, -1) *
     *   scaling_factor)" (scores_fp32 2: fp32, sqrt(scale) on q and k), mask added in fp32,
     *   "at::_safe_softmax(attn, -1)" (fp32, one pass: no rescale; empty rows 0),
     *   "at::matmul(attn, value_expanded).to(origin_dtype)" (P never rounded, O rounded once).
     *   Backward by autograd in fp32: dP = dO v^T, the softmax backward P (dP - sum_j P dP)
     *   (FA_D_FROM_P), dQ = (dS k') sqrt(scale), cast to the dtype once; GQA by
     *   pre_process_group_query_attention_input (K/V repeated in fp32, the repeated gradients
     *   summed in fp32 before the cast: FA_GQA_FUSED). cuBLAS SGEMM (TF32 off by default):
     *   IEEE fp32 sums. exp: CUDA expf, 2 ulp; subnormal flushing unverified (1 dominates).
     *   No LSE output.
     *   Masked pairs (FA_MASKED_NF_PROPAGATES): is_causal becomes a boolean mask converted to an
     *   additive -inf bias (convert_boolean_attn_mask), added to the scores: a NaN score plus -inf
     *   is NaN and _safe_softmax's row is NaN; the matmuls take every key with P_ij = 0 (0 times
     *   NaN/Inf V_j is NaN). Measured (H100, 2026-11-25, RESULTS-2026-11-25-s7-nf.md): nonfinite#4000
     *   O NaN at every row hidden from the NaN key. */
    {"torch-math", {.u_acc = 0x1p-24, .exp_rel_err = 0x1p-23, .exp_ulps = 2, .scores_fp32 = 2,
                    .p_rounded = 0, .ds_rounded = 0, .out_rounded = 1, .max_rescales = 0,
                    .flushes_subnormals = 1, .tc_terms = 0, .ds_scale_folded = 0, .dp_rounded = 0,
                    .d_source = FA_D_FROM_P, .gqa_reduce = FA_GQA_FUSED,
                    .lse_empty = FA_LSE_EMPTY_NEG_INF,
                    .masked_nonfinite = FA_MASKED_NF_PROPAGATES}},
    /* torch-math-lowp: the same graph with allow_fp16_bf16_reduction_math_sdp(True): no upcast,
     *   so every op rounds to the dtype: q and k scaled in the dtype, attn rounded, mask added in
     *   the dtype (scores_fp32 0), softmax output rounded (p_rounded), dP and the softmax
     *   backward rounded (dp_rounded, ds_rounded, FA_D_FROM_P from the dtype P and dP), the
     *   GEMMs on tensor cores with dtype outputs, GQA gradients per head in the dtype summed
     *   by autograd (FA_GQA_ROUND_SUM32). Masked pairs: as torch-math (the same graph), PROPAGATES. */
    {"torch-math-lowp", {FA_TC_CONSERVATIVE, .exp_rel_err = 0x1p-22, .exp_ulps = 2, .scores_fp32 = 0,
                         .p_rounded = 1, .ds_rounded = 1, .out_rounded = 1, .max_rescales = 0,
                         .flushes_subnormals = 1, .ds_scale_folded = 0, .dp_rounded = 1,
                         .d_source = FA_D_FROM_P, .gqa_reduce = FA_GQA_ROUND_SUM32,
                         .lse_empty = FA_LSE_EMPTY_NEG_INF,
                         .masked_nonfinite = FA_MASKED_NF_PROPAGATES}},
    /* torch-flex: torch.compile(flex_attention) (python/flashcheck/adapters/flex.py): Inductor's
     *   Triton flex templates. Arithmetic: tensorcore's (tl.dot on tensor cores, P and dS cast to
     *   the input dtype before their dots; not measured beyond the certify runs that pass with it).
     *   Masked pairs (FA_MASKED_NF_PROPAGATES), measured (H100, 2026-11-25, torch 2.11,
     *   RESULTS-2026-11-25-s7-nf.md): nonfinite#4000 (causal, K NaN at key 76) gave dQ NaN at the
     *   76 rows of each head that do not see key 76: the backward's dS.K dot runs over the whole
     *   key block with dS_ij = 0 for the hidden keys. */
    {"torch-flex", {FA_TC_CONSERVATIVE, .exp_rel_err = 0x1p-21, .exp_ulps = 2, .scores_fp32 = 1,
                    .p_rounded = 1, .ds_rounded = 1, .out_rounded = 1, .max_rescales = -1,
                    .flushes_subnormals = 1, .ds_scale_folded = 0, .dp_rounded = 0,
                    .d_source = FA_D_FROM_O, .gqa_reduce = FA_GQA_FUSED,
                    .lse_empty = FA_LSE_EMPTY_NEG_INF,
                    .masked_nonfinite = FA_MASKED_NF_PROPAGATES}},
};

static const char *const preset_names[] = {"tensorcore",  "tensorcore-hopper", "fp32",       "torch-flash",    "torch-efficient",
                                           "torch-cudnn", "torch-math", "torch-math-lowp", "torch-flex", NULL};

const char *const *fa_precision_preset_names(void) { return preset_names; }

fa_status fa_precision_preset(const char *name, fa_precision *out, fa_error *err) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (name && strcmp(name, presets[i].name) == 0) {
            if (out) *out = presets[i].prof;
            return FA_OK;
        }
    char list[256] = "";
    size_t n = 0;
    for (const char *const *p = preset_names; *p && n < sizeof list; p++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", p == preset_names ? "" : ", ", *p);
    return fa_fail(err, FA_ERR_INVALID, "profile", "unknown precision preset '%s': known presets are %s",
                   name ? name : "(null)", list);
}
