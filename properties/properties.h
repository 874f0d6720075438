/* properties.h: metamorphic property tests of attention, each usable on any
 * backend (host or CUDA memory). Prefix fc_prop_. C linkage.
 *
 * Each property runs the backend on the case and on transformed inputs and
 * checks a relation that exact attention satisfies, within a bound derived
 * in properties/PROPERTIES.md (bit-exact where the relation is exact in
 * floating point). Failures are recorded in v with check "property:<name>".
 * Outcome SKIP: the property does not apply to this case (e.g. key
 * permutation with causal masking) or the backend said UNSUPPORTED; the
 * reason says which.
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_PROPERTIES_H
#define FLASHCHECK_PROPERTIES_H

#include "case/case.h"
#include "kernels/flash_api.h"
#include "properties/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef fc_outcome (*fc_prop_fn)(const fa_backend *be, const fc_case *c, fc_verdict *v);

/* V[..., 0] = 1: O[..., 0] = 1 (0 in rows with no visible key) within the oracle's bound. */
fc_outcome fc_prop_row_sums(const fa_backend *be, const fc_case *c, fc_verdict *v);
/* Keys invisible to a row set to NaN/+Inf/-Inf in K and V: O, LSE (and dQ) of every
 * row that sees none of them are bitwise unchanged. */
fc_outcome fc_prop_leak(const fa_backend *be, const fc_case *c, fc_verdict *v);
/* V * 2: O * 2 bitwise, LSE unchanged; dO * 2: dV * 2 bitwise (and dQ, dK when the
 * backend does not round dS). */
fc_outcome fc_prop_pow2_scale(const fa_backend *be, const fc_case *c, fc_verdict *v);
/* Joint permutation of keys, values (and mask columns): O, LSE, dQ within
 * bound_a + bound_b; dK, dV permuted likewise. No causal/window only. */
fc_outcome fc_prop_key_permutation(const fa_backend *be, const fc_case *c, fc_verdict *v);
/* k_j + c (exactly representable): O and dQ, dV within bound_a + bound_b;
 * sum_j dK_j = 0 and sum_j dV_j = sum_i dO_i within derived bounds. */
fc_outcome fc_prop_key_translation(const fa_backend *be, const fc_case *c, fc_verdict *v);
/* O(V1 + V2) = O(V1) + O(V2); grads(dO1 + dO2) = grads(dO1) + grads(dO2), within the
 * sum of the three bounds. */
fc_outcome fc_prop_linearity(const fa_backend *be, const fc_case *c, fc_verdict *v);
/* Changing the inputs of the last batch / the last kv-head group leaves every
 * other batch / group bitwise unchanged (forward and backward). */
fc_outcome fc_prop_slices(const fa_backend *be, const fc_case *c, fc_verdict *v);
/* Batch element b run alone (B = 1, the same data) gives the outputs it has inside the batch:
 * bitwise on flashcheck's CPU backends, within bound_a + bound_b otherwise (forward and backward;
 * bitwise backward only when the case is deterministic). */
fc_outcome fc_prop_batch_invariance(const fa_backend *be, const fc_case *c, fc_verdict *v);
/* Keys split in two halves; merging the halves' (O, LSE) reproduces the whole within
 * a derived bound. No causal/window only. */
fc_outcome fc_prop_split_merge(const fa_backend *be, const fc_case *c, fc_verdict *v);
/* <kernel gradient, direction> matches a central finite difference of the oracle's
 * forward (loss = sum dO * O) on exactly representable perturbed inputs. */
fc_outcome fc_prop_gradient_fd(const fa_backend *be, const fc_case *c, fc_verdict *v);
/* Five repeated runs (forward; backward when deterministic) are bitwise equal. */
fc_outcome fc_prop_determinism(const fa_backend *be, const fc_case *c, fc_verdict *v);

/* Contract v3 (properties/prop_v3.c). packing: a case with packed sequences (seqlens_q /
 * seqlens_k) or seqused_k gives, for every sequence, the bits of that sequence run alone as a
 * dense B = 1 case (O, LSE, dQ; dK, dV of its used keys, 0 for its unused keys; dsinks summed
 * over sequences): checked bitwise on flashcheck's CPU backends, skipped elsewhere (a bound needs
 * the v3 oracle). paging: the pages of a paged case permuted, with the block table permuted
 * likewise, give the same bits (O, LSE, dQ, dsinks; dK, dV moved with their pages), on any
 * backend; on O and LSE alone when the backend declines the paged backward (a SKIP with that
 * decline, O and LSE judged). */
fc_outcome fc_prop_packing(const fa_backend *be, const fc_case *c, fc_verdict *v);
/* nonfinite (properties/prop_nonfinite.c): one NaN or Inf placed in K, V (a key some rows see and
 * others of the same head do not), Q or dO (a row that sees some keys, and a row that sees none),
 * one run per placement: every output judged by the oracle on the poisoned inputs (BOUNDS.md
 * 11.1: the same NaN/Inf where the value reaches, finite within the bound where it cannot, rows
 * with no visible key exactly 0); the tensors it could leak into must keep judged elements. */
fc_outcome fc_prop_nonfinite(const fa_backend *be, const fc_case *c, fc_verdict *v);
/* nonfinite's judging precondition, without a backend: the number of placements it runs on c
 * (bwd: with the backward's dO placements), each derived from c's geometry and inputs so that it
 * can show the relation (a key some row sees and another does not, or one no row of its batch
 * sees; a probe row and a Q component whose +Inf gives a non-finite score); 0 with the reason in
 * why when c cannot show it (the property's SKIP), -1 harness error (why says which). */
int fc_prop_nonfinite_plan(const fc_case *c, int bwd, char *why, size_t whylen);
fc_outcome fc_prop_paging(const fa_backend *be, const fc_case *c, fc_verdict *v);

typedef struct {
    const char *name;
    fc_prop_fn fn;
    int needs_oracle; /* 1: costs oracle calls */
} fc_prop_entry;

/* All properties, in a fixed order; count via fc_prop_count(). */
extern const fc_prop_entry fc_prop_table[];
int fc_prop_count(void);
const fc_prop_entry *fc_prop_by_name(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_PROPERTIES_H */
