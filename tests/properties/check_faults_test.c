/* check_faults_test.c: every check of properties/check fires on the fault it
 * exists for, and only where expected. A wrapper around the CPU backend
 * injects one harness-level fault per mode (writes into guards and stride
 * gaps, scribbles on an input, leaves an element unwritten, wrong status,
 * nondeterminism, ...) — faults the CPU mutants do not model. For each mode
 * the verdict must be FAIL (or SKIP for UNSUPPORTED) and must name the
 * expected check; with no fault the same cases must PASS. Also: the verdict's
 * JSON form. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case/case.h"
#include "kernels/flash_api.h"
#include "properties/check/check.h"

/* ---------------------------------------------------------------------------
 * The fault-injecting backend
 * ------------------------------------------------------------------------- */
enum {
    F_NONE,
    F_GUARD_AFTER_O,      /* write the element just past O's last element */
    F_GUARD_BEFORE_LSE,   /* write the element just before LSE's first */
    F_GAP_O,              /* write into a stride gap of O (padded layout) */
    F_INPUT_Q,            /* change one Q element */
    F_UNWRITTEN_O,        /* restore the poison in one O element */
    F_STATUS_INVALID,     /* reject a valid case */
    F_STATUS_UNSUPPORTED, /* say unsupported */
    F_REJECT_BUT_WRITE,   /* write outputs, then return INVALID */
    F_ZERO_O,             /* all-zero O */
    F_NAN_O,              /* one NaN in O */
    F_NONDETERMINISTIC,   /* second call differs in the last bit of one O element */
    F_MASKED_ROW_O,       /* fully masked row: O = tiny nonzero */
    F_MASKED_ROW_LSE,     /* fully masked row: LSE finite */
    F_DQ_GUARD,           /* backward writes past dQ's end */
    F_DK_SCALED,          /* backward: dK * (1 + 2^-3) */
    F_COUNT,
    /* used by the tests below the table, not by run_one's loop */
    F_NAN_DQ = F_COUNT,   /* backward: every dQ element NaN */
    F_MASKED_LSE_PINF     /* fully masked row: LSE +inf (FlashAttention-2's convention) */
};
static const char *const fault_names[F_COUNT] = {
    "none", "guard_after_o", "guard_before_lse", "gap_o", "input_q", "unwritten_o", "status_invalid",
    "status_unsupported", "reject_but_write", "zero_o", "nan_o", "nondeterministic", "masked_row_o",
    "masked_row_lse", "dq_guard", "dk_scaled"};
/* the check each fault must trigger ("" = must SKIP) */
static const char *const fault_check[F_COUNT] = {
    NULL, "guard", "guard", "guard", "input_modified", "unwritten", "status", "", "rejected_wrote", "bound",
    "nan", "determinism", "masked_row", "masked_row", "guard", "bound"};

static int fault = F_NONE;
static int calls = 0;
static const fa_backend *cpu;

static uint16_t *h16(const fa_tensor *t, int64_t b, int64_t s, int64_t h, int64_t d) {
    return (uint16_t *)t->ptr + b * t->stride[0] + s * t->stride[1] + h * t->stride[2] + d * t->stride[3];
}

static fa_status fault_forward(const fa_fwd_args *a, fa_error *err) {
    calls++;
    const fa_problem *p = &a->p;
    if (fault == F_STATUS_INVALID) return fa_fail(err, FA_ERR_INVALID, "q", "injected: rejecting a valid case");
    if (fault == F_STATUS_UNSUPPORTED) return fa_fail(err, FA_ERR_UNSUPPORTED, "", "injected: unsupported");
    fa_status st = cpu->forward(a, err);
    if (st != FA_OK) return st;
    int64_t Bl = p->batch - 1, Sl = p->seqlen_q - 1, Hl = p->heads_q - 1, Dl = p->head_dim_v - 1;
    switch (fault) {
    case F_GUARD_AFTER_O: *(h16(&a->o, Bl, Sl, Hl, Dl) + 1) = 0; break; /* dense O: just past the end */
    case F_GUARD_BEFORE_LSE: *(a->lse.ptr - 1) = 0.0f; break;
    case F_GAP_O: *(h16(&a->o, 0, 0, 0, 0) + 1) = 0x3C00; break; /* O has stride[3] = 2 in this case */
    case F_INPUT_Q: *(uint16_t *)a->q.ptr ^= 1; break;
    case F_UNWRITTEN_O: *h16(&a->o, 0, 1, 0, 2) = FC_POISON_A_16; break;
    case F_REJECT_BUT_WRITE: return fa_fail(err, FA_ERR_INVALID, "o", "injected: rejected after writing");
    case F_ZERO_O:
        for (int64_t b = 0; b <= Bl; b++)
            for (int64_t s = 0; s <= Sl; s++)
                for (int64_t h = 0; h <= Hl; h++)
                    for (int64_t d = 0; d <= Dl; d++) *h16(&a->o, b, s, h, d) = 0;
        break;
    case F_NAN_O: *h16(&a->o, 0, 2, 0, 1) = 0x7E00; break;
    case F_NONDETERMINISTIC:
        if (calls % 2 == 0) *h16(&a->o, 0, 3, 0, 0) ^= 1;
        break;
    case F_MASKED_ROW_O: *h16(&a->o, 0, 0, 0, 0) = 0x0001; break; /* row 0 is fully masked in that case */
    case F_MASKED_ROW_LSE: a->lse.ptr[0] = -1e30f; break;
    case F_MASKED_LSE_PINF: /* every fully masked row: -inf -> +inf */
        for (int64_t b = 0; b <= Bl; b++)
            for (int64_t h = 0; h <= Hl; h++)
                for (int64_t i = 0; i <= Sl; i++) {
                    float *x = a->lse.ptr + b * a->lse.stride[0] + h * a->lse.stride[1] + i * a->lse.stride[2];
                    if (*x == -INFINITY) *x = INFINITY;
                }
        break;
    default: break;
    }
    return FA_OK;
}

static fa_status fault_backward(const fa_bwd_args *a, fa_error *err) {
    fa_status st = cpu->backward(a, err);
    if (st != FA_OK) return st;
    const fa_problem *p = &a->p;
    if (fault == F_DQ_GUARD) *(h16(&a->dq, p->batch - 1, p->seqlen_q - 1, p->heads_q - 1, p->head_dim_qk - 1) + 1) = 0;
    if (fault == F_NAN_DQ)
        for (int64_t b = 0; b < p->batch; b++)
            for (int64_t i = 0; i < p->seqlen_q; i++)
                for (int64_t h = 0; h < p->heads_q; h++)
                    for (int64_t d = 0; d < p->head_dim_qk; d++) *h16(&a->dq, b, i, h, d) = 0x7E00;
    if (fault == F_DK_SCALED) {
        for (int64_t j = 0; j < p->seqlen_k; j++)
            for (int64_t d = 0; d < p->head_dim_qk; d++) {
                uint16_t *x = h16(&a->dk, 0, j, 0, d);
                *x = fc_f16_from_double(fc_f16_to_double(*x) * 1.125);
            }
    }
    return FA_OK;
}

/* ---------------------------------------------------------------------------
 * Cases: a plain one, a padded-O one (stride gaps), a fully-masked-row one
 * ------------------------------------------------------------------------- */
static const char *const plain = "shape = 1 8 20 1 1 16 16\nseed = 3\n";
static const char *const padded = "shape = 1 8 20 1 1 16 16\nseed = 4\nlayout.o = order 0 1 2 3 pad 0 0 0 1 offset 2\n";
static const char *const masked = "shape = 1 8 20 1 1 16 16\nseed = 5\nmask = full_rows density=0.2\n";

static int failures = 0;

static void run_one(const fa_backend *be, int f, const char *text, const char *label) {
    fc_case c;
    char msg[300];
    if (fc_case_parse(text, &c, msg, sizeof msg)) {
        printf("FAIL %s: case: %s\n", label, msg);
        failures++;
        return;
    }
    fault = f;
    calls = 0;
    fc_verdict v;
    fc_check_case(be, &c, NULL, &v);
    const char *want = fault_check[f];
    int ok;
    if (want == NULL) ok = v.outcome == FC_PASS;
    else if (want[0] == 0) ok = v.outcome == FC_SKIP;
    else ok = v.outcome == FC_FAIL && fc_verdict_has(&v, want);
    if (f == F_ZERO_O) ok = ok && fc_verdict_has(&v, "magnitude"); /* the norm test fires on its own too */
    printf("%s fault %-20s on %-7s -> %s (want %s)%s%s\n", ok ? "ok  " : "FAIL", fault_names[f], label,
           fc_outcome_name(v.outcome), want == NULL ? "pass" : want[0] ? want : "skip",
           v.n_reasons ? ": " : "", v.n_reasons ? v.reason[0].text : "");
    if (!ok) {
        fc_verdict_print(&v, stdout);
        failures++;
    }
    fault = F_NONE;
}

static void test_json(const fa_backend *be) {
    fc_case c;
    char msg[300];
    fc_case_parse(masked, &c, msg, sizeof msg);
    fault = F_NAN_O;
    fc_verdict v;
    fc_check_case(be, &c, NULL, &v);
    fault = F_NONE;
    size_t n = fc_verdict_json(&v, NULL, 0);
    char *js = malloc(n + 1);
    size_t n2 = fc_verdict_json(&v, js, n + 1);
    int ok = n2 == n && strlen(js) == n && js[0] == '{' && js[n - 1] == '}' && strstr(js, "\"outcome\":\"fail\"") &&
             strstr(js, "\"check\":\"nan\"") && strstr(js, "\"o\":{\"elements\":");
    /* balanced braces/brackets outside strings */
    int depth = 0, instr = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = js[i];
        if (instr) {
            if (ch == '\\') i++;
            else if (ch == '"') instr = 0;
            continue;
        }
        if (ch == '"') instr = 1;
        else if (ch == '{' || ch == '[') depth++;
        else if (ch == '}' || ch == ']') bad |= --depth < 0;
    }
    ok = ok && !bad && depth == 0 && !instr;
    /* truncation: a short buffer stays NUL-terminated and reports the full length */
    char small[16];
    ok = ok && fc_verdict_json(&v, small, sizeof small) == n && strlen(small) == sizeof small - 1;
    printf("%s verdict JSON (%zu bytes)\n", ok ? "ok  " : "FAIL", n);
    if (!ok) {
        printf("%s\n", js);
        failures++;
    }
    free(js);
}

/* The weak flag: near one-hot softmax (heavy-tailed Q, K) makes dQ, dK so small
 * that their bound exceeds their norm; the flag must say so (suites then know
 * a zero gradient would pass), and must stay off for a plain case. */
static void test_weak_flag(const fa_backend *be) {
    fc_case c;
    char msg[300];
    fc_case_parse("shape = 1 24 72 2 1 32 32\ndist = heavy_tail\n", &c, msg, sizeof msg);
    fc_verdict v;
    fc_check_case(be, &c, NULL, &v);
    int weak_on = v.t[FC_T_DQ].weak || v.t[FC_T_DK].weak;
    fc_case_parse(plain, &c, msg, sizeof msg);
    fc_check_case(be, &c, NULL, &v);
    int weak_off = 0;
    for (int t = 0; t < FC_T_COUNT; t++) weak_off += v.t[t].checked && v.t[t].weak;
    int ok = weak_on && weak_off == 0;
    printf("%s weak flag: set for heavy-tailed dQ/dK (%d), clear on the plain case (%d weak)\n", ok ? "ok  " : "FAIL",
           weak_on, weak_off);
    if (!ok) failures++;
}

/* Regression, /work/shared/findings/cuda_dq_nan.case.min (fp16, "large" Q and K, B=1 Sq=37
 * Sk=1 D=8; the CUDA backward gave NaN in dQ where the CPU backend is finite). Under the
 * tensorcore preset the oracle's derivation (BOUNDS.md section 11) says the profile's own
 * P' = exp(s' - lse) may overflow fp32: |q.k| ~ 1e9 makes the fp32 score error bound
 * E ~ 1e2 > log(2^128), so P' may be +inf and dS' = P' (dP' - D') NaN when dP' - D' = 0
 * (Sk = 1: dP = D exactly). A NaN dQ there is overflow-sensitive, not a failure; the same
 * NaN on a case of moderate magnitudes is still a failure ("nan"). */
static const char *const cuda_dq_nan =
    "shape = 1 37 1 1 1 8 8\ndtype = fp16\nscale = 0\ndist.q = large amp=0 prob=0.5\n"
    "dist.k = large amp=0 prob=0.5\nseed = 0xbbee36f88e84db3b\nbackward = 1\ndeterministic = 1\n";

static void test_overflow_sensitive(const fa_backend *fb) {
    fc_case c;
    char msg[300];
    fa_precision tc;
    int ok = fc_case_parse(cuda_dq_nan, &c, msg, sizeof msg) == 0 && fa_precision_preset("tensorcore", &tc, NULL) == FA_OK;
    fc_check_set_profile(&tc);
    fc_verdict v;
    fault = F_NONE;
    fc_check_case(fb, &c, NULL, &v); /* the CPU backend's finite dQ: within its bound */
    int clean = v.outcome != FC_FAIL && v.outcome != FC_OVERFLOW && v.t[FC_T_DQ].checked &&
                v.t[FC_T_DQ].violations == 0;
    fault = F_NAN_DQ;
    fc_check_case(fb, &c, NULL, &v);
    int ovf = v.outcome == FC_OVERFLOW && fc_verdict_has(&v, "overflow") && !fc_verdict_has(&v, "nan") &&
              v.t[FC_T_DQ].overflow_sensitive == 37 * 8 && v.t[FC_T_DQ].nonfinite_mismatch == 0;
    printf("%s cuda_dq_nan regression, tensorcore preset: finite dQ %s, NaN dQ -> %s (%lld overflow-sensitive)\n",
           ok && clean && ovf ? "ok  " : "FAIL", clean ? "judged" : "NOT judged", fc_outcome_name(v.outcome),
           (long long)v.t[FC_T_DQ].overflow_sensitive);
    if (!(ok && clean && ovf)) { fc_verdict_print(&v, stdout); failures++; }
    /* moderate magnitudes: the same NaN is a failure */
    fc_case_parse(plain, &c, msg, sizeof msg);
    fc_check_case(fb, &c, NULL, &v);
    int fail = v.outcome == FC_FAIL && fc_verdict_has(&v, "nan") && v.t[FC_T_DQ].overflow_sensitive == 0;
    printf("%s NaN dQ on a moderate case under the tensorcore preset -> %s\n", fail ? "ok  " : "FAIL",
           fc_outcome_name(v.outcome));
    if (!fail) { fc_verdict_print(&v, stdout); failures++; }
    fault = F_NONE;
    fc_check_set_profile(NULL);
}

/* The LSE of a row with no visible key is the profile's declared value and nothing else:
 * +inf fails the contract's -inf, passes a profile declaring FA_LSE_EMPTY_POS_INF, and
 * then the contract's -inf fails that profile. */
static void test_lse_convention(const fa_backend *fb) {
    fc_case c;
    char msg[300];
    fc_case_parse(masked, &c, msg, sizeof msg);
    fa_precision pinf = cpu->precision;
    pinf.lse_empty = FA_LSE_EMPTY_POS_INF;
    fc_verdict v1, v2, v3;
    fault = F_MASKED_LSE_PINF;
    fc_check_case(fb, &c, NULL, &v1);
    fc_check_set_profile(&pinf);
    fc_check_case(fb, &c, NULL, &v2);
    fault = F_NONE;
    fc_check_case(fb, &c, NULL, &v3);
    fc_check_set_profile(NULL);
    int ok = v1.outcome == FC_FAIL && fc_verdict_has(&v1, "masked_row") && v2.outcome == FC_PASS &&
             v3.outcome == FC_FAIL && fc_verdict_has(&v3, "masked_row");
    printf("%s empty-row LSE: +inf under -inf %s, +inf under +inf %s, -inf under +inf %s\n", ok ? "ok  " : "FAIL",
           fc_outcome_name(v1.outcome), fc_outcome_name(v2.outcome), fc_outcome_name(v3.outcome));
    if (!ok) { fc_verdict_print(&v2, stdout); failures++; }
}

/* A CUDA error after a backend call is the backend's when the backend said FA_OK and the first
 * synchronize fails (a faulting kernel: found as a torch flash "misaligned address" that the
 * harness used to report as its own copy-back failure, i.e. not judged); an error already
 * reported is never overwritten; only a failed copy after a clean synchronize is the harness's. */
#define CHECK(cond, what)                                    \
    do {                                                     \
        if (cond) printf("ok   %s\n", what);                 \
        else { printf("FAIL %s\n", what); failures++; }      \
    } while (0)
static void test_device_blame(void) {
    CHECK(fc_device_blame(FA_OK, 0, 0) == FC_BLAME_NONE, "device blame: nothing failed");
    CHECK(fc_device_blame(FA_OK, 1, 1) == FC_BLAME_BACKEND, "device blame: a sticky kernel fault after FA_OK is the backend's");
    CHECK(fc_device_blame(FA_OK, 1, 0) == FC_BLAME_BACKEND, "device blame: a failed synchronize is the backend's");
    CHECK(fc_device_blame(FA_OK, 0, 1) == FC_BLAME_HARNESS, "device blame: a failed copy after a clean synchronize is the harness's");
    CHECK(fc_device_blame(FA_ERR_DEVICE, 1, 1) == FC_BLAME_KEEP, "device blame: the backend's own FA_ERR_DEVICE is kept");
    CHECK(fc_device_blame(FA_ERR_INTERNAL, 1, 1) == FC_BLAME_KEEP, "device blame: an earlier error is kept");
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    cpu = fa_backend_cpu();
    fa_backend fb = *cpu;
    fb.name = "cpu+faults";
    fb.forward = fault_forward;
    fb.backward = fault_backward;
    const char *texts[3] = {plain, padded, masked}, *labels[3] = {"plain", "padded", "masked"};
    for (int k = 0; k < 3; k++) run_one(&fb, F_NONE, texts[k], labels[k]);
    for (int f = 1; f < F_COUNT; f++) {
        int k = f == F_GAP_O ? 1 : (f == F_MASKED_ROW_O || f == F_MASKED_ROW_LSE) ? 2 : 0;
        run_one(&fb, f, texts[k], labels[k]);
    }
    test_json(&fb);
    test_overflow_sensitive(&fb);
    test_lse_convention(&fb);
    test_weak_flag(cpu);
    test_device_blame();
    printf("check_faults_test: %s\n", failures ? "FAILED" : "all faults caught, no false alarm");
    return failures ? 1 : 0;
}
