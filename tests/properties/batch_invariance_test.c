/* batch_invariance_test.c: both paths of property batch_invariance (properties/PROPERTIES.md).
 *   bitwise (flashcheck's CPU backend): the correct backend passes; mutant batch_dependent_order
 *     (a summation order picked from the batch size, every result inside the oracle's bound) fails;
 *   within the oracle's bound (the same CPU backend under another name, as any other backend is
 *     judged): the correct backend passes, batch_dependent_order passes (its error is inside the
 *     bound: only the bitwise path can see it), mutant mask_bh_stride_ignored (batch element b
 *     reads the mask of element 0) fails;
 *   batch = 1: SKIP. */
#include <stdio.h>
#include <string.h>

#include "case/case.h"
#include "kernels/cpu/cpu_mutants.h"
#include "kernels/flash_api.h"
#include "properties/properties.h"

static int failures;

static void expect(const fa_backend *be, const char *mutant, const char *text, fc_outcome want, const char *what) {
    fc_case c;
    char msg[300];
    if (fc_case_parse(text, &c, msg, sizeof msg)) { printf("FAIL  %s: case does not parse: %s\n", what, msg); failures++; return; }
    fa_cpu_set_mutant(fa_cpu_mutant_id(mutant));
    fc_verdict v;
    fc_outcome got = fc_prop_batch_invariance(be, &c, &v);
    fa_cpu_set_mutant(0);
    int ok = got == want && (want != FC_FAIL || fc_verdict_has(&v, "property:batch_invariance"));
    printf("%s  %s: %s (want %s)\n", ok ? "ok  " : "FAIL", what, fc_outcome_name(got), fc_outcome_name(want));
    if (!ok) { fc_verdict_print(&v, stdout); failures++; }
}

int main(void) {
    const fa_backend *cpu = fa_backend_cpu();
    fa_backend other = *cpu;
    other.name = "cpu_under_another_name";
    const char *gqa = "shape = 3 33 97 4 2 32 32\ncausal = bottom_right\nbackward = 1\nseed = 31\n";
    const char *mask = "shape = 2 20 70 2 2 16 16\nmask = random_neginf density=0.4\nbackward = 1\nseed = 32\n";
    expect(cpu, "none", gqa, FC_PASS, "bitwise: correct backend, B=3 GQA causal, fwd+bwd");
    expect(cpu, "none", mask, FC_PASS, "bitwise: correct backend, per-batch -inf mask");
    expect(cpu, "batch_dependent_order", gqa, FC_FAIL, "bitwise: batch_dependent_order caught");
    expect(&other, "none", gqa, FC_PASS, "bound: correct backend");
    expect(&other, "none", mask, FC_PASS, "bound: correct backend, per-batch -inf mask");
    expect(&other, "batch_dependent_order", gqa, FC_PASS, "bound: batch_dependent_order is inside the bound (only bitwise sees it)");
    expect(&other, "mask_bh_stride_ignored", mask, FC_FAIL, "bound: mask_bh_stride_ignored caught");
    expect(cpu, "none", "shape = 1 17 33 2 1 16 16\n", FC_SKIP, "batch 1: skipped");
    printf("%d failed\n", failures);
    return failures != 0;
}
