/* fz_gen.h: structure-aware generation and mutation of flashcheck cases
 * (prefix fz_). Shared by the libFuzzer targets (fuzz/fz_target_*.c), the
 * standalone driver and the `flashcheck fuzz` campaign engine.
 *
 * A fuzz input is the TEXT form of a case (case/case.h): the corpus, the
 * findings and the regression files are all human-readable repro files, and
 * the dictionary (fuzz/flashcheck.dict) holds the text format's tokens.
 * An input that does not parse as a case is not wasted: fz_case_from_bytes()
 * decodes any byte string into a valid case (FuzzedDataProvider style:
 * scalars are taken from the END of the input, so a mutation at the front
 * changes only the fields it touches).
 *
 * Every generated or mutated case is biased towards the shapes that break
 * kernels: lengths at tile boundaries +-1 (16, 32, 64, 128, 256), 0, 1,
 * primes; head dims that are not powers of two; windows at tile edges;
 * GQA groups; dimension-order permutations, stride gaps, storage offsets,
 * broadcast masks; fully masked rows and columns; extreme value
 * distributions. fz_case_fit() then clamps the case into a size budget and
 * into a backend's limits, so the harness never wastes an execution on a
 * case the backend must reject (API misuse has its own target).
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_FZ_GEN_H
#define FLASHCHECK_FZ_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "case/case.h"
#include "kernels/flash_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Size budget of a campaign (the throughput target is S <= 256, D <= 128). */
typedef struct {
    int64_t max_batch;     /* default 3 */
    int64_t max_heads_q;   /* default 8 */
    int64_t max_seq;       /* Sq and Sk, default 256 */
    int64_t max_head_dim;  /* Dqk and Dv, default 128 (and the backend's limit) */
    int64_t max_work;      /* B*Hq*Sq*Sk*max(Dqk,Dv) cap, default 2^24 */
    int64_t max_scores;    /* B*Hq*Sq*Sk cap (the mask tensor's elements), default 2^62 (none
                              beyond max_work) */
    int backward;          /* -1: either (from the input), 0: forward only, 1: always backward */
} fz_budget;

void fz_budget_default(fz_budget *b);

/* A named budget on top of the current one's backward setting: "small" (the default above,
 * the throughput target) or "production" (S <= 16384, D <= 128, B <= 4, Hq <= 16, work
 * B*Hq*Sq*Sk*max(D) <= 2^37, scores B*Hq*Sq*Sk <= 2^29: one head pair at S = 16k, or B*Hq = 32
 * at S = 4k; a CUDA backend's calls of that size are verified by the GPU oracle tier).
 * Returns 0, or -1 for an unknown name (b unchanged). */
int fz_budget_preset(const char *name, fz_budget *b);

/* A small deterministic PRNG for the mutator (xorshift64*; not for values). */
typedef struct { uint64_t s; } fz_rng;
void fz_rng_seed(fz_rng *r, uint64_t seed);
uint64_t fz_rng_next(fz_rng *r);
uint64_t fz_rng_below(fz_rng *r, uint64_t n);   /* uniform in [0, n), n > 0 */

/* Any bytes -> a valid case (before fz_case_fit). Never fails. */
void fz_case_from_bytes(const uint8_t *data, size_t size, fc_case *c);

/* A fresh random case drawn from the same biased distributions. */
void fz_case_random(fz_rng *r, fc_case *c);

/* Change one to three fields of c (shape, layout, mask, dist, causal, window,
 * scale, dtype, seed, ...), each drawn from the biased distributions. */
void fz_case_mutate(fz_rng *r, fc_case *c);

/* Combine: each field group (shape, problem flags, mask, layouts, dists) taken
 * from a or b. */
void fz_case_crossover(fz_rng *r, const fc_case *a, const fc_case *b, fc_case *out);

/* Long sequences for a budget past the generator's lengths (max_seq > 512; the biased
 * lengths above stop at 513): with probability 1/2, Sq (and Sk: the same, or another draw)
 * becomes max_seq / 2^k - 1, + 0 or + 1 (k in 0..5), or uniform in [1, max_seq]. A no-op for
 * max_seq <= 512, so small-budget campaigns draw the same cases as before. Call before
 * fz_case_fit (which then shrinks a case over the work or score cap). */
void fz_case_stretch(fz_rng *r, fc_case *c, const fz_budget *b);

/* Clamp c into the budget and the backend's limits (head dim multiple, max head
 * dim, Dqk == Dv, unit last stride, pointer alignment via the storage offset,
 * forward-only backends). Keeps every other field. Returns 0; the result passes
 * fc_case_check. */
int fz_case_fit(fc_case *c, const fz_budget *b, const fa_limits *lim, int backend_has_backward);

/* Bytes -> fitted case: parse the text form if the input is one, else decode.
 * Returns 1 when the input parsed as text, 0 when it was decoded. */
int fz_case_from_input(const uint8_t *data, size_t size, const fz_budget *b,
                       const fa_limits *lim, int backend_has_backward, fc_case *c);

/* The mutator shared by LLVMFuzzerCustomMutator and the campaign engine:
 * input (text or bytes) -> case -> fz_case_mutate -> fit -> text into out
 * (capacity max). Returns the new size (0 if max is too small for any text). */
size_t fz_mutate_input(const uint8_t *in, size_t size, uint8_t *out, size_t max, uint64_t seed,
                       const fz_budget *b, const fa_limits *lim, int backend_has_backward);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_FZ_GEN_H */
