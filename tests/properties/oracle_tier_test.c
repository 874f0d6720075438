/* oracle_tier_test.c: the choice of the oracle's tier in the check path (check.h,
 * fc_oracle_tier) and the fallback to the CPU tier.
 *   - fc_oracle_use_gpu over every (tier, backend on device, device usable);
 *   - fc_oracle_tier_parse / _name round trip, bad names refused;
 *   - cases (forward + backward, GQA, causal, masks, padded layout) checked on the CPU
 *     backend under --oracle auto, cpu and gpu: the same outcome and element counts
 *     under every tier; the counters show which tier ran: auto and cpu never touch
 *     the GPU tier for a host backend; gpu runs the GPU tier where a CUDA device is
 *     usable, and elsewhere (CI) falls back to the CPU tier, each call counted as a
 *     fallback, the verdict unchanged;
 *   - a run marked as on a device backend (on_device) under auto: a small call stays on the
 *     CPU tier; a call of FC_ORACLE_GPU_MIN_WORK goes to the GPU tier where usable, else to
 *     the CPU tier without a fallback (auto only tries a usable device).
 * Runs anywhere (no GPU needed); on a GPU host it checks the GPU tier's path too. */
#include <stdio.h>
#include <string.h>

#include "case/case.h"
#include "kernels/flash_api.h"
#include "oracle/gpu/orc_gpu.h"
#include "properties/check/check.h"

static int failures = 0;
#define CHECK(c, ...)                                  \
    do {                                               \
        if (!(c)) {                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                       \
            printf("\n");                              \
            failures++;                                \
        }                                              \
    } while (0)

static const char *const cases[] = {
    "shape = 2 24 31 4 2 32 32\nseed = 3\ncausal = top_left\nbackward = 1\n",
    "shape = 1 40 40 3 1 16 24\nseed = 9\nmask = full_rows density=0.2\nbackward = 1\n",
    "shape = 1 17 33 2 2 64 64\nseed = 4\nlayout.q = order 0 2 1 3 pad 0 3 0 1 offset 5\nlayout.k = order 2 0 1 3 pad 1 0 2 0 offset 3\nwindow = 5 3\nbackward = 1\n",
};

static void counts(fc_oracle_counts *c) { fc_oracle_counts_get(c); }

int main(void) {
    /* the selection rule */
    for (int t = 0; t < 3; t++)
        for (int dev = 0; dev < 2; dev++)
            for (int usable = 0; usable < 2; usable++)
                for (int big = 0; big < 2; big++) {
                    double work = big ? FC_ORACLE_GPU_MIN_WORK : FC_ORACLE_GPU_MIN_WORK / 2;
                    int want = usable && (t == FC_ORACLE_GPU || (t == FC_ORACLE_AUTO && dev && big));
                    CHECK(fc_oracle_use_gpu((fc_oracle_tier)t, dev, usable, work) == want, "use_gpu(%d, %d, %d, %g) != %d",
                          t, dev, usable, work, want);
                }
    const char *names[3] = {"auto", "cpu", "gpu"};
    for (int t = 0; t < 3; t++) {
        fc_oracle_tier x;
        CHECK(fc_oracle_tier_parse(names[t], &x) == 0 && (int)x == t && !strcmp(fc_oracle_tier_name(x), names[t]),
              "parse %s", names[t]);
    }
    {
        fc_oracle_tier x;
        CHECK(fc_oracle_tier_parse("GPU", &x) != 0 && fc_oracle_tier_parse("", &x) != 0 &&
                  fc_oracle_tier_parse(NULL, &x) != 0,
              "bad tier names accepted");
    }
    CHECK(fc_check_oracle() == FC_ORACLE_AUTO, "the default tier is not auto");

    const fa_backend *cpu = fa_backend_cpu();
    int usable = orc_gpu_available();
    printf("oracle_tier_test: CUDA device usable here: %s\n", usable ? "yes" : "no");
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        fc_case c;
        char msg[300];
        CHECK(fc_case_parse(cases[k], &c, msg, sizeof msg) == 0, "case %zu: %s", k, msg);
        fc_verdict v[3];
        fc_oracle_counts before[3], after[3];
        for (int t = 0; t < 3; t++) {
            fc_check_set_oracle((fc_oracle_tier)t);
            counts(&before[t]);
            fc_check_case(cpu, &c, NULL, &v[t]);
            counts(&after[t]);
        }
        fc_check_set_oracle(FC_ORACLE_AUTO);
        for (int t = 0; t < 3; t++) {
            int64_t g = after[t].gpu - before[t].gpu, cp = after[t].cpu - before[t].cpu,
                    fb = after[t].fallback - before[t].fallback;
            printf("  case %zu --oracle %-4s: %s, gpu %lld cpu %lld fallback %lld\n", k, names[t],
                   fc_outcome_name(v[t].outcome), (long long)g, (long long)cp, (long long)fb);
            CHECK(v[t].outcome == FC_PASS, "case %zu tier %s: %s", k, names[t], fc_outcome_name(v[t].outcome));
            CHECK(g + cp == 2, "case %zu tier %s: %lld oracle calls, want 2 (forward, backward)", k, names[t],
                  (long long)(g + cp));
            if (t != FC_ORACLE_GPU) CHECK(g == 0 && fb == 0, "case %zu tier %s: the GPU tier was used", k, names[t]);
            else if (usable) CHECK(g == 2 && fb == 0, "case %zu: gpu tier not used on a usable device", k);
            else CHECK(cp == 2 && fb == 2, "case %zu: no fallback counted without a device", k);
            for (int x = 0; x < FC_T_COUNT; x++)
                CHECK(v[t].t[x].checked == v[0].t[x].checked && v[t].t[x].elements == v[0].t[x].elements &&
                          v[t].t[x].violations == v[0].t[x].violations,
                      "case %zu tier %s tensor %d: counts differ from auto", k, names[t], x);
        }
    }
    /* a run as a device backend's: auto tries the GPU tier only for a large call on a usable device */
    for (int big = 0; big < 2; big++) {
        fc_case c;
        char msg[300];
        /* 1 x 64 x 1024 x 4 x 64: work 2^24 */
        fc_case_parse(big ? "shape = 1 64 1024 4 2 64 64\nseed = 2\n" : cases[0], &c, msg, sizeof msg);
        fc_run r;
        CHECK(fc_run_init(&r, &c, FC_POISON_A, msg, sizeof msg) == 0, "run: %s", msg);
        CHECK(fc_run_forward(&r, cpu) == FA_OK, "forward");
        r.on_device = 1;
        fc_oracle_counts b, a;
        counts(&b);
        orc_fwd_result res;
        int used = -1;
        CHECK(fc_oracle_fwd_tier(&r, &cpu->precision, FC_ORACLE_AUTO, &res, &used, msg, sizeof msg) == 0, "%s", msg);
        counts(&a);
        int want = usable && big;
        CHECK(used == want && a.gpu - b.gpu == want && a.cpu - b.cpu == !want && a.fallback == b.fallback,
              "on_device auto (big %d): used %d gpu +%lld cpu +%lld fallback +%lld", big, used,
              (long long)(a.gpu - b.gpu), (long long)(a.cpu - b.cpu), (long long)(a.fallback - b.fallback));
        fc_verdict v;
        fc_verdict_init(&v);
        CHECK(fc_check_fwd_outputs(&r, &res, &v) == 0 && v.outcome == FC_PASS, "on_device auto: verdict %s",
              fc_outcome_name(v.outcome));
        orc_fwd_free(&res);
        fc_run_free(&r);
    }
    /* a contract-v3 call (softcap, varlen) the GPU tier does not model: never sent to it. Under
       auto on a device backend a large one is an ordinary CPU-tier call, no fallback (before,
       it was uploaded, refused by oracle/gpu as unsupported and counted as a fallback); under
       gpu it is a counted fallback; the verdict is the CPU tier's either way */
    {
        const char *v3[2] = {"shape = 1 64 1024 4 2 64 64\nseed = 2\nsoftcap = 30\n",
                             "shape = 2 64 1024 4 2 64 64\nseed = 5\nseqlens_q = 64,40\nseqlens_k = 1024,700\n"};
        for (int k = 0; k < 2; k++) {
            fc_case c;
            char msg[300];
            CHECK(fc_case_parse(v3[k], &c, msg, sizeof msg) == 0, "v3 case %d: %s", k, msg);
            CHECK(!fc_oracle_gpu_models(&c), "v3 case %d: the GPU tier claims to model it", k);
            for (int t = 0; t < 3; t += 2) {
                fc_run r;
                CHECK(fc_run_init(&r, &c, FC_POISON_A, msg, sizeof msg) == 0, "run: %s", msg);
                CHECK(fc_run_forward(&r, cpu) == FA_OK, "forward");
                r.on_device = 1;
                fc_oracle_counts b, a;
                counts(&b);
                orc_fwd_result res;
                int used = -1;
                CHECK(fc_oracle_fwd_tier(&r, &cpu->precision, (fc_oracle_tier)t, &res, &used, msg, sizeof msg) == 0,
                      "%s", msg);
                counts(&a);
                int64_t fb = a.fallback - b.fallback;
                CHECK(used == 0 && a.gpu == b.gpu && a.cpu - b.cpu == 1 && fb == (t == FC_ORACLE_GPU),
                      "v3 case %d --oracle %s: used %d gpu +%lld cpu +%lld fallback +%lld", k, names[t], used,
                      (long long)(a.gpu - b.gpu), (long long)(a.cpu - b.cpu), (long long)fb);
                fc_verdict v;
                fc_verdict_init(&v);
                CHECK(fc_check_fwd_outputs(&r, &res, &v) == 0 && v.outcome == FC_PASS, "v3 case %d: verdict %s", k,
                      fc_outcome_name(v.outcome));
                orc_fwd_free(&res);
                fc_run_free(&r);
            }
        }
        fc_case d;
        char msg[300];
        CHECK(fc_case_parse(cases[0], &d, msg, sizeof msg) == 0 && fc_oracle_gpu_models(&d),
              "a dense case is not modelled by the GPU tier");
    }
    if (failures) { printf("oracle_tier_test: %d failures\n", failures); return 1; }
    printf("oracle_tier_test: OK\n");
    return 0;
}
