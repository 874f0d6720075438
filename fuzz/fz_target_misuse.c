/* fz_target_misuse.c: libFuzzer target for API misuse: invalid descriptors
 * must get an error, never a crash (ASan/UBSan watch the host code) and never
 * a write. The execution itself is fz_misuse_run (fz_misuse.h); this file
 * publishes its features and records failures as findings. Finding state:
 * tensor field = the corruption kind, failure = what went wrong.
 * ------------------------------------------------------------------------- */
#include <stdint.h>
#include <stdio.h>

#include "fuzz/fz_feat.h"
#include "fuzz/fz_harness.h"
#include "fuzz/fz_misuse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_h_state *h = fz_h();
    static fz_misuse_result res;    /* large; one execution at a time */
    if (!fz_misuse_run(h->backend, data, size, &h->budget, &res)) return 0;
    h->execs++;
    fz_feat f;
    fz_feat_clear(&f);
    fz_feat_outcome(&f, res.kind);
    fz_feat_outcome(&f, res.status == FA_ERR_INVALID ? 14 : 15);
    fz_feat_publish(&f);
    if (res.failure[0])
        fz_h_finding(&res.c, res.backward ? "bwd" : "fwd", res.kind_name, res.failure, res.detail);
    return 0;
}
