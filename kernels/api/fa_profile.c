/* fa_profile.c: named precision presets: the fa_precision of implementations
 * flashcheck did not build, so verify/certify/fuzz can bound them. Each preset
 * states the evidence that it describes the implementation. */
#include <string.h>

#include "kernels/flash_api.h"

typedef struct {
    const char *name;
    fa_precision prof;
} fa_preset;

static const fa_preset presets[] = {
    /* tensorcore: a flash kernel on tensor cores (ours, FlashAttention, cuDNN,
     * Triton): fp32 accumulation in the MMA (truncating adds), ex2.approx.ftz,
     * P and dS rounded to the input dtype before their products. */
    {"tensorcore", {.u_acc = 0x1p-23, .exp_rel_err = 0x1p-21, .scores_fp32 = 1, .p_rounded = 1,
                    .ds_rounded = 1, .out_rounded = 1, .max_rescales = -1, .flushes_subnormals = 1}},
    /* fp32: scores, softmax and sums in IEEE fp32 (RN), only O/dQ/dK/dV rounded
     * to the dtype. */
    {"fp32", {.u_acc = 0x1p-24, .exp_rel_err = 0x1p-23, .scores_fp32 = 1, .p_rounded = 0,
              .ds_rounded = 0, .out_rounded = 1, .max_rescales = -1, .flushes_subnormals = 0}},
};

static const char *const preset_names[] = {"tensorcore", "fp32", NULL};

const char *const *fa_precision_preset_names(void) { return preset_names; }

fa_status fa_precision_preset(const char *name, fa_precision *out, fa_error *err) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (name && strcmp(name, presets[i].name) == 0) {
            *out = presets[i].prof;
            return FA_OK;
        }
    return fa_fail(err, FA_ERR_INVALID, "profile", "unknown precision preset '%s': known presets are tensorcore, fp32",
                   name ? name : "(null)");
}
