/* fz_target_case.c: the forward and backward libFuzzer targets.
 *
 * Built twice: -DFZ_TARGET_BACKWARD=0 (fz_fwd: forward only) and
 * -DFZ_TARGET_BACKWARD=1 (fz_bwd: forward then backward). Each input is a
 * case (text form, or any bytes decoded by fz_case_from_bytes), fitted into
 * the budget and the backend's limits, checked by the property library on
 * the backend under test (every output element against the oracle's
 * per-element bound, guards, unwritten outputs, inputs unchanged, masked
 * rows, determinism). Failures become deduplicated findings (fz_harness.h).
 *
 * Feedback: the case's geometry (tile paths, masked tiles, rescales, GQA)
 * and the log2 bucket of each output's worst error/bound ratio go to
 * __libfuzzer_extra_counters (fz_feat.h), so the search climbs towards larger
 * errors and rarer paths, not only towards new host branches.
 *
 * Mutation: LLVMFuzzerCustomMutator keeps every input a valid case: usually a
 * structural mutation (fz_case_mutate), sometimes libFuzzer's own byte
 * mutation of the text (which uses the dictionary fuzz/flashcheck.dict) when
 * the result still parses. LLVMFuzzerCustomCrossOver mixes field groups.
 * ------------------------------------------------------------------------- */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case/case.h"
#include "fuzz/fz_feat.h"
#include "fuzz/fz_gen.h"
#include "fuzz/fz_harness.h"
#include "fuzz/fz_run.h"

#ifndef FZ_TARGET_BACKWARD
#error "define FZ_TARGET_BACKWARD to 0 (forward target) or 1 (backward target)"
#endif

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

static int target_has_backward(const fa_backend *be)
{
    return FZ_TARGET_BACKWARD && be->backward != NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fz_h_state *h = fz_h();
    h->budget.backward = FZ_TARGET_BACKWARD;
    if (FZ_TARGET_BACKWARD && h->backend->backward == NULL) {
        fprintf(stderr, "flashcheck fuzz: backend '%s' has no backward pass; use the forward target\n",
                h->backend->name);
        exit(2);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_h_state *h = fz_h();
    const fa_backend *be = h->backend;
    h->budget.backward = FZ_TARGET_BACKWARD;
    fc_case c;
    fz_case_from_input(data, size, &h->budget, &be->limits, target_has_backward(be), &c);

    fz_feat f;
    fz_feat_clear(&f);
    fz_run_result r;
    fz_run_case(be, &c, 1, &r, &f);
    fz_feat_publish(&f);
    h->execs++;
    if (r.klass == FZ_OUT_SKIP) h->skipped++;
    if (r.worst_ratio > h->worst_ratio) h->worst_ratio = r.worst_ratio;
    if (r.klass == FZ_OUT_OVERFLOW) /* its own class (oracle/BOUNDS.md 11): printed, never dropped */
        fprintf(stderr, "flashcheck fuzz: overflow-sensitive (not a finding): %s", r.detail);
    if (r.klass == FZ_OUT_FAIL || r.klass == FZ_OUT_DEVICE) {
        fz_h_finding(&c, r.pass, r.tensor, r.failure, r.detail);
        if (r.klass == FZ_OUT_DEVICE) {
            /* the device context is gone: stop this process so the supervisor
             * (libFuzzer -fork=N, or `flashcheck fuzz`) starts a fresh one */
            fprintf(stderr, "flashcheck fuzz: device fault recorded; exiting so a fresh process continues\n");
            abort();
        }
    }
    return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    fz_h_state *h = fz_h();
    const fa_backend *be = h->backend;
    int bwd = target_has_backward(be);
    if (seed % 8 == 0 && size > 0 && size < 16384) {
        /* libFuzzer's byte mutation (dictionary tokens) of the text, kept when it still parses */
        uint8_t *copy = malloc(max_size + 1);
        if (copy) {
            memcpy(copy, data, size);
            size_t n = LLVMFuzzerMutate(copy, size, max_size);
            char *text = malloc(n + 1);
            fc_case c;
            char msg[128];
            int ok = 0;
            if (text) {
                memcpy(text, copy, n);
                text[n] = 0;
                ok = memchr(copy, 0, n) == NULL && fc_case_parse(text, &c, msg, sizeof msg) == 0;
            }
            size_t out = 0;
            if (ok) {
                fz_case_fit(&c, &h->budget, &be->limits, bwd);
                size_t need = fc_case_write(&c, (char *)data, max_size);
                out = need < max_size ? need : 0;
            }
            free(text);
            free(copy);
            if (out) return out;
        }
    }
    size_t n = fz_mutate_input(data, size, data, max_size, seed, &h->budget, &be->limits, bwd);
    return n ? n : size;
}

size_t LLVMFuzzerCustomCrossOver(const uint8_t *d1, size_t s1, const uint8_t *d2, size_t s2,
                                 uint8_t *out, size_t max_out, unsigned int seed)
{
    fz_h_state *h = fz_h();
    const fa_backend *be = h->backend;
    int bwd = target_has_backward(be);
    fc_case a, b, c;
    fz_case_from_input(d1, s1, &h->budget, &be->limits, bwd, &a);
    fz_case_from_input(d2, s2, &h->budget, &be->limits, bwd, &b);
    fz_rng r;
    fz_rng_seed(&r, seed);
    fz_case_crossover(&r, &a, &b, &c);
    fz_case_fit(&c, &h->budget, &be->limits, bwd);
    size_t need = fc_case_write(&c, (char *)out, max_out);
    return need < max_out ? need : 0;
}
