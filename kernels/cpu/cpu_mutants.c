/* cpu_mutants.c: the mutant table and its selection (see cpu_mutants.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_mutants.h"

// ----------------------------------------------------------------------------
// the table (order = cpu_mutant ids in cpu_internal.h)

static const struct { const char *name, *description; } cpu_mutant_table[CPU_MUT_COUNT] = {
    [CPU_MUT_NONE] = {"none", "The correct CPU backend."},
    [CPU_MUT_RESCALE_MISSING] = {"rescale_missing",
        "Forward: when a later key tile raises the running max, l is rescaled but the output "
        "accumulator is not; wrong only when a row sees more than one key tile (Sk > 64) and its "
        "max grows after the first visible tile."},
    [CPU_MUT_CAUSAL_OFF_BY_ONE] = {"causal_off_by_one",
        "Forward and backward: the causal limit is j <= diag(i) + 1 instead of j <= diag(i), so "
        "each causal row also sees the next key; only with causal masking and a key past the "
        "diagonal."},
    [CPU_MUT_CAUSAL_TOP_LEFT_FOR_BR] = {"causal_top_left_for_bottom_right",
        "Forward and backward: FA_CAUSAL_BOTTOM_RIGHT (and window_align bottom-right) use the "
        "top-left diagonal diag(i) = i; only wrong when seqlen_q != seqlen_k."},
    [CPU_MUT_RAGGED_TAIL] = {"ragged_tail_unmasked",
        "Forward: the last, partial key tile is processed as a full 64-key tile; keys past "
        "seqlen_k get score 0 and the value row of key seqlen_k-1 (clamped index, no out-of-bounds "
        "read); only when seqlen_k % 64 != 0 and the phantom keys are not hidden by causal/window."},
    [CPU_MUT_STRIDES_FROM_SHAPE] = {"strides_from_shape",
        "Forward and backward: input tensors (q, k, v, and o, dout in backward) are read with "
        "contiguous [B,S,H,D] strides derived from the shape instead of their strides (only when "
        "that stays inside the tensor's own memory range); only wrong for non-contiguous inputs."},
    [CPU_MUT_GQA_MODULO] = {"gqa_head_modulo",
        "Forward and backward: query head h reads kv head h % heads_kv instead of h / (heads_q / "
        "heads_kv); only wrong when heads_kv > 1 and heads_q > heads_kv."},
    [CPU_MUT_MASKED_ROW_NAN] = {"masked_row_inf_minus_inf",
        "Forward: the online-softmax update is not guarded for a running max of -inf, so a key "
        "tile with no visible key for a row computes exp((-inf) - (-inf)) = NaN; NaN in rows "
        "whose first processed key tile is entirely masked (fully masked rows, masks/windows "
        "hiding a leading tile)."},
    [CPU_MUT_MASK_BY_MULTIPLY] = {"mask_by_multiplication",
        "Forward: inside a partially visible key tile, hidden keys are not skipped but their "
        "probability is multiplied by 0, so NaN/Inf in hidden K or V rows (0*NaN, 0*Inf) leaks "
        "into the output; only with masking and non-finite values in hidden K/V."},
    [CPU_MUT_LSE_LOG2] = {"lse_log2",
        "Forward: LSE = m + log2(l) instead of m + ln(l); O is right, LSE is wrong in every row "
        "with l != 1 (more than one visible key with non-negligible weight)."},
    [CPU_MUT_P_NOT_SHIFTED] = {"p_not_max_shifted",
        "Forward: P = exp(s) without subtracting the running max; overflows (Inf, then NaN) once "
        "scores exceed ~11 (fp16 P) or ~88 (fp32 exp); fine for small scores."},
    [CPU_MUT_DQ_TAIL_SKIPPED] = {"dq_tail_block_skipped",
        "Backward: the dQ pass drops the contribution of the last key tile when it is partial "
        "(seqlen_k % 64 != 0); dK and dV are right."},
    [CPU_MUT_DQ_NONDETERMINISTIC] = {"dq_nondeterministic_order",
        "Backward: the dQ pass starts its sum over key tiles at a tile that changes with a "
        "per-call counter, so two identical calls differ in the last bits; only with more than "
        "one key tile (seqlen_k > 64)."},
    [CPU_MUT_WINDOW_OFF_BY_ONE] = {"window_off_by_one",
        "Forward and backward: the left window limit is j >= diag(i) - window_left + 1, hiding "
        "one key too many; only with window_left >= 0 and a key at that boundary."},
    [CPU_MUT_DV_GQA_NOT_SUMMED] = {"dv_gqa_not_summed",
        "Backward: dV is reset for every query head of a GQA group, so only the last head's "
        "contribution is written; only when heads_q > heads_kv."},
    [CPU_MUT_DELTA_FROM_DOUT_SQ] = {"delta_from_dout_squared",
        "Backward: D_i = rowsum(dO * dO) instead of rowsum(dO * O); dQ and dK are wrong whenever "
        "dO != O (dV is right)."},
    [CPU_MUT_MASK_BH_STRIDE_IGNORED] = {"mask_bh_stride_ignored",
        "Forward and backward: the additive mask's batch and head strides are ignored (always "
        "the [0,0] slice, as if broadcast); only wrong when the mask differs across batch or heads."},
    [CPU_MUT_BATCH_DEPENDENT_ORDER] = {"batch_dependent_order",
        "Forward: with batch > 1 the score dot products are summed over the head dimension in "
        "reverse order (a summation order picked from the batch size, as split-KV and tile "
        "heuristics pick theirs from the number of CTAs); every result stays within the oracle's "
        "bound, but a row's LSE and O bits depend on the batch it runs in: only batch invariance "
        "(the row run alone, B = 1) shows it."},
    [CPU_MUT_FWD_ORDER_AT_SCALE] = {"fwd_order_varies_at_scale",
        "Forward: on calls with at least 4096 query rows (batch * heads_q * seqlen_q), every other "
        "call (a per-call counter) sums the score dot products in reverse order, as a kernel whose "
        "reduction order follows the scheduler only once the grid has many CTAs; results stay "
        "within the oracle's bound and small calls are reproducible, so only reruns at a size with "
        "many work units (stress mode, properties/check/check.h \"stress\") show it."},
    [CPU_MUT_TABLE_STRIDE] = {"block_table_stride",
        "Forward and backward, paged K/V: block-table row b is read at b * max_pages_per_seq "
        "instead of b * table_stride (an entry outside the pool wraps into it); only wrong with "
        "batch >= 2 and a table whose rows are padded (table_stride > max_pages_per_seq)."},
    [CPU_MUT_SOFTCAP_NO_DERIVATIVE] = {"softcap_derivative_missing",
        "Backward with softcap: dS is not multiplied by 1 - tanh^2, the derivative of the cap; "
        "dQ and dK are wrong wherever a score is not small against the cap; the forward is right."},
    [CPU_MUT_SINK_LEFT_OUT] = {"sink_left_out",
        "Forward with sinks: the sink logit is left out of the softmax denominator and the LSE "
        "(a plain softmax); wrong in every row unless exp(sink) is negligible against the row sum."},
    [CPU_MUT_VARLEN_PREV_OFFSET] = {"varlen_prev_offset",
        "Forward and backward, packed K/V (cu_seqlens_k): sequence b > 0 reads its keys from the "
        "start of sequence b - 1 (cu_seqlens_k[b-1]); only with batch >= 2 and a non-empty earlier "
        "sequence."},
    [CPU_MUT_SEQUSED_IGNORED] = {"seqused_k_ignored",
        "Forward and backward with seqused_k: each sequence uses all its allocated keys (the "
        "cu_seqlens_k span or seqlen_k), or with a paged cache its whole last page; only when "
        "seqused_k[b] is below that."},
    [CPU_MUT_DSINK_SIGN] = {"dsink_sign",
        "Backward with sinks: dsinks = + sum exp(sink - lse) D instead of minus; only dsinks is "
        "wrong, and only where that sum is not zero."},
    [CPU_MUT_PAGES_CONTIGUOUS] = {"pages_assumed_contiguous",
        "Forward and backward, paged K/V: key j of a sequence is read from page table[b][0] + "
        "j / page_size (a cache assumed allocated in consecutive pages; past the pool it wraps) "
        "instead of table[b][j / page_size]; only wrong when a sequence's pages are not consecutive."},
    [CPU_MUT_SPLIT_DROPS_LAST] = {"split_combine_drops_last",
        "Forward, split-KV decode (Sq_b <= 16 and Sk_b > 192: the key tiles go into splits, "
        "cpu_fwd.c): the combine of the splits' partials stops one split early, so the last "
        "keys' split is left out of O and the LSE; only on decode-shaped sequences."},
    [CPU_MUT_VARLEN_CAUSAL_MAX] = {"varlen_causal_from_max_lengths",
        "Forward and backward: the bottom-right causal/window diagonal of every sequence is "
        "aligned with the batch's maxima, i + seqlen_k - seqlen_q, instead of the sequence's own "
        "i + Sk_b - Sq_b; only with varlen lengths (cu_seqlens, seqused_k) where the two differ."},
    [CPU_MUT_SOFTCAP_CAP_MISSING] = {"softcap_cap_not_reapplied",
        "Forward with softcap: the score is tanh(scale q.k / cap), never multiplied back by the "
        "cap (scores squeezed into (-1, 1)); wrong in every row with softcap, never without."},
    [CPU_MUT_SCALE_FROM_DV] = {"scale_from_dv",
        "Forward and backward: the default softmax scale is 1/sqrt(head_dim_v) instead of "
        "1/sqrt(head_dim_qk); only with head_dim_qk != head_dim_v and no explicit scale."},
    [CPU_MUT_DK_ACC_DV_PITCH] = {"dk_rows_at_dv_pitch",
        "Backward: the dK accumulator's rows are head_dim_v floats apart instead of head_dim_qk "
        "(a tile sized by the value head dim), so neighbouring keys' dK rows overlap and mix; "
        "only with head_dim_qk > head_dim_v (MLA shapes); dQ and dV are right."},
};

// ----------------------------------------------------------------------------
// selection

int cpu_mutant_selected = CPU_MUT_NONE;
static int cpu_mutant_explicit = 0;
static pthread_once_t cpu_mutant_once = PTHREAD_ONCE_INIT;

int fa_cpu_mutant_count(void) { return CPU_MUT_COUNT; }

const char *fa_cpu_mutant_name(int id) {
    return (id >= 0 && id < CPU_MUT_COUNT) ? cpu_mutant_table[id].name : NULL;
}

const char *fa_cpu_mutant_description(int id) {
    return (id >= 0 && id < CPU_MUT_COUNT) ? cpu_mutant_table[id].description : NULL;
}

int fa_cpu_mutant_id(const char *s) {
    if (s == NULL || *s == '\0') return -1;
    for (int id = 0; id < CPU_MUT_COUNT; id++)
        if (strcmp(s, cpu_mutant_table[id].name) == 0) return id;
    char *end;
    long id = strtol(s, &end, 10);
    if (*end == '\0' && id >= 0 && id < CPU_MUT_COUNT) return (int)id;
    return -1;
}

static void cpu_mutant_read_env(void) {
    if (cpu_mutant_explicit) return;
    const char *env = getenv("FLASHCHECK_CPU_MUTANT");
    if (env == NULL || *env == '\0') return;
    int id = fa_cpu_mutant_id(env);
    if (id < 0) {
        /* a typo here would silently test the correct backend: refuse loudly */
        fprintf(stderr, "flashcheck: FLASHCHECK_CPU_MUTANT=%s is not a mutant name or id "
                        "(0..%d); see kernels/cpu/cpu_mutants.h. Aborting.\n", env, CPU_MUT_COUNT - 1);
        abort();
    }
    cpu_mutant_selected = id;
    if (id != CPU_MUT_NONE)
        fprintf(stderr, "flashcheck: CPU backend running MUTANT %d (%s)\n", id,
                cpu_mutant_table[id].name);
}

void cpu_mutant_init(void) { pthread_once(&cpu_mutant_once, cpu_mutant_read_env); }

int fa_cpu_set_mutant(int id) {
    if (id < 0 || id >= CPU_MUT_COUNT) return -1;
    cpu_mutant_explicit = 1;
    cpu_mutant_init(); /* env is now ignored */
    cpu_mutant_selected = id;
    return 0;
}

int fa_cpu_get_mutant(void) {
    cpu_mutant_init();
    return cpu_mutant_selected;
}
