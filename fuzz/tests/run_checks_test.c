/* run_checks_test.c: the buffer-level checks of properties/check/run.c that
 * the campaign leans on for speed, against element-by-element references:
 *   fc_check_guards      (word compares over the gap regions) finds exactly
 *                        the changed elements outside the tensor, for random
 *                        layouts: permuted orders, pads on any dim, offsets,
 *                        broadcast masks, empty and size-1 dims;
 *   fc_check_written     counts poison elements and names the first one in
 *                        logical order;
 *   fc_check_same_bits   the same for differences between two runs;
 *   fc_run_init          a second run of the same case (the determinism run,
 *                        served from the generated-input cache) holds the same
 *                        logical inputs as a fresh fill, with its own poison
 *                        everywhere else; a different case is not served from
 *                        the cache.
 * No backend is called. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "properties/check/check.h"
#define CHECK_QUIET_OK /* checks in loops over random layouts and elements */
#include "properties/check/tests/check_test.h"


static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(uint64_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return n ? (rng_state >> 33) % n : 0;
}

/* a random valid case with odd layouts on every tensor */
static void random_case(fc_case *c)
{
    static const int64_t lens[] = { 0, 1, 2, 3, 5, 16, 17 };
    fc_case_default(c);
    c->p.batch = 1 + (int64_t)rnd(3);
    c->p.heads_kv = 1 + (int64_t)rnd(2);
    c->p.heads_q = c->p.heads_kv * (1 + (int64_t)rnd(2));
    c->p.seqlen_q = lens[rnd(7)];
    c->p.seqlen_k = lens[rnd(7)];
    c->p.head_dim_qk = 1 + (int64_t)rnd(9);
    c->p.head_dim_v = 1 + (int64_t)rnd(9);
    c->p.dtype = rnd(2) ? FA_BF16 : FA_F16;
    c->mask.kind = (fc_mask_kind)rnd(FC_MASK_COUNT);
    c->mask.broadcast_batch = (int)rnd(2);
    c->mask.broadcast_heads = (int)rnd(2);
    for (int t = 0; t < FC_T_COUNT; t++) {
        fc_layout *l = &c->layout[t];
        int n = t == FC_T_LSE ? 3 : 4;
        for (int i = n - 1; i > 0; i--) {
            int j = (int)rnd((uint64_t)i + 1), x = l->order[i];
            l->order[i] = l->order[j];
            l->order[j] = x;
        }
        if (rnd(2)) l->pad[rnd((uint64_t)n)] = 1 + (int64_t)rnd(3);
        if (rnd(3) == 0) l->pad[rnd((uint64_t)n)] = 1 + (int64_t)rnd(2);
        l->offset = rnd(2) ? (int64_t)rnd(9) : 0;
    }
    c->dist[FC_T_Q].kind = (fc_dist_kind)rnd(FC_DIST_COUNT);
    c->seed = rng_state;
    c->backward = 1;
}

/* 1 where a logical element of b lives (reference, via fc_buf_index) */
static unsigned char *logical_of(const fc_buf *b)
{
    unsigned char *m = calloc((size_t)b->alloc_elems + 1, 1);
    int64_t total = 1, idx[4] = { 0, 0, 0, 0 };
    for (int k = 0; k < b->ndim; k++) total *= b->dim[k];
    for (int64_t e = 0; e < total; e++) {
        int64_t r = e;
        for (int k = b->ndim - 1; k >= 0; k--) { idx[k] = r % b->dim[k]; r /= b->dim[k]; }
        m[fc_buf_index(b, idx)] = 1;
    }
    return m;
}

static void flip(fc_buf *b, int64_t e)
{
    if (b->elem_size == 2) ((uint16_t *)b->alloc)[e] ^= 0x0101;
    else ((uint32_t *)b->alloc)[e] ^= 0x01010101u;
}

static void test_guards(void)
{
    int tried = 0, outside = 0;
    for (int i = 0; i < 300; i++) {
        fc_case c;
        random_case(&c);
        char msg[256];
        if (fc_case_check(&c, msg, sizeof msg) != 0) { CHECK(0, "random case invalid: %s", msg); continue; }
        fc_run r;
        if (fc_run_init(&r, &c, i % 2 ? FC_POISON_B : FC_POISON_A, msg, sizeof msg) != 0) { CHECK(0, "%s", msg); continue; }
        fc_verdict v;
        fc_verdict_init(&v);
        CHECK(fc_check_guards(&r, &v) == 0, "case %d: fresh buffers report a guard change", i);
        for (int t = 0; t < FC_T_COUNT; t++) {
            fc_buf *b = &r.buf[t];
            if (!b->alloc) continue;
            unsigned char *m = logical_of(b);
            /* every non-logical element in small buffers, sampled ones in large */
            int64_t step = b->alloc_elems > 400 ? b->alloc_elems / 200 : 1;
            for (int64_t e = (int64_t)rnd((uint64_t)step); e < b->alloc_elems; e += step) {
                flip(b, e);
                fc_verdict_init(&v);
                int64_t bad = fc_check_guards(&r, &v);
                tried++;
                if (m[e]) {
                    CHECK(bad == 0, "case %d tensor %s: change of logical element %lld reported as guard", i,
                          fc_tensor_name(t), (long long)e);
                } else {
                    outside++;
                    CHECK(bad == 1 && fc_verdict_has(&v, "guard"), "case %d tensor %s: change at allocation element %lld "
                          "(outside the tensor) found %lld times", i, fc_tensor_name(t), (long long)e, (long long)bad);
                }
                flip(b, e);
            }
            free(m);
        }
        fc_run_free(&r);
    }
    CHECK(outside > 1000, "too few outside elements exercised (%d of %d)", outside, tried);
    printf("guards: %d single-element changes, %d outside the tensor\n", tried, outside);
}

static void test_written_and_same_bits(void)
{
    for (int i = 0; i < 200; i++) {
        fc_case c;
        random_case(&c);
        char msg[256];
        fc_run a, b;
        if (fc_run_init(&a, &c, FC_POISON_A, msg, sizeof msg) != 0) { CHECK(0, "%s", msg); continue; }
        if (fc_run_init(&b, &c, FC_POISON_B, msg, sizeof msg) != 0) { CHECK(0, "%s", msg); fc_run_free(&a); continue; }
        for (int t = FC_T_O; t < FC_T_COUNT; t++) {
            fc_buf *x = &a.buf[t], *y = &b.buf[t];
            int64_t n = fc_case_numel(&c, t);
            if (!x->alloc) continue;
            /* all unwritten */
            fc_verdict v;
            fc_verdict_init(&v);
            CHECK(fc_check_written(&a, t, &v) == n, "case %d %s: %lld elements, all poison", i, fc_tensor_name(t), (long long)n);
            if (n == 0) continue;
            /* write every element of both with the same value, except poison left at two chosen ones in a */
            int64_t idx[4] = { 0, 0, 0, 0 }, keep1 = (int64_t)rnd((uint64_t)n), keep2 = (int64_t)rnd((uint64_t)n);
            int64_t first = keep1 < keep2 ? keep1 : keep2, firstidx[4] = { 0, 0, 0, 0 };
            for (int64_t e = 0; e < n; e++) {
                int64_t r = e;
                for (int k = x->ndim - 1; k >= 0; k--) { idx[k] = r % x->dim[k]; r /= x->dim[k]; }
                if (e == first) memcpy(firstidx, idx, sizeof idx);
                fc_buf_set(y, idx, (double)(e % 7) - 3);
                if (e != keep1 && e != keep2) fc_buf_set(x, idx, (double)(e % 7) - 3);
            }
            int64_t want = keep1 == keep2 ? 1 : 2;
            fc_verdict_init(&v);
            CHECK(fc_check_written(&a, t, &v) == want, "case %d %s: unwritten count", i, fc_tensor_name(t));
            char where[96];
            snprintf(where, sizeof where, "first at [%lld,%lld,%lld,%lld]", (long long)firstidx[0], (long long)firstidx[1],
                     (long long)firstidx[2], (long long)firstidx[3]);
            CHECK(v.n_reasons == 1 && strstr(v.reason[0].text, where) != NULL, "case %d %s: unwritten names '%s': %s", i,
                  fc_tensor_name(t), where, v.n_reasons ? v.reason[0].text : "(none)");
            fc_verdict_init(&v);
            CHECK(fc_check_same_bits(&a, &b, t, "determinism", &v) == want, "case %d %s: differing count", i, fc_tensor_name(t));
            CHECK(v.n_reasons == 1 && strstr(v.reason[0].text, where) != NULL, "case %d %s: same_bits names '%s': %s", i,
                  fc_tensor_name(t), where, v.n_reasons ? v.reason[0].text : "(none)");
            /* equal everywhere: nothing */
            fc_verdict_init(&v);
            CHECK(fc_check_same_bits(&b, &b, t, "determinism", &v) == 0 && v.n_reasons == 0, "same buffer differs");
        }
        fc_run_free(&a);
        fc_run_free(&b);
    }
}

/* the second run of a case (cache) equals a fresh fill; another case is not served from the cache */
static void test_input_cache(void)
{
    for (int i = 0; i < 100; i++) {
        fc_case c, d;
        random_case(&c);
        d = c;
        d.seed ^= 1;  /* same shape and layouts, other values */
        char msg[256];
        fc_run r1, r2, r3;
        if (fc_run_init(&r1, &c, FC_POISON_A, msg, sizeof msg) != 0) { CHECK(0, "%s", msg); continue; }
        fc_buf_set(&r1.buf[FC_T_Q], (int64_t[4]){ 0, 0, 0, 0 }, 5.0); /* an edit after init never reaches the cache */
        fc_run_init(&r2, &c, FC_POISON_B, msg, sizeof msg);  /* from the cache */
        fc_run_init(&r3, &d, FC_POISON_B, msg, sizeof msg);  /* another case: generated */
        for (int t = 0; t <= FC_T_MASK; t++) {
            fc_buf *b2 = &r2.buf[t], *b3 = &r3.buf[t];
            if (!b2->alloc) continue;
            fc_buf fresh;
            fc_buf_alloc(&c, t, FC_GUARD_ELEMS, FC_POISON_B, &fresh, msg, sizeof msg);
            fc_case_fill(&c, &fresh);
            CHECK(fresh.alloc_elems == b2->alloc_elems &&
                  memcmp(fresh.alloc, b2->alloc, (size_t)fresh.alloc_elems * fresh.elem_size) == 0,
                  "case %d tensor %s: the cached second run differs from a fresh fill", i, fc_tensor_name(t));
            fc_buf other;
            fc_buf_alloc(&d, t, FC_GUARD_ELEMS, FC_POISON_B, &other, msg, sizeof msg);
            fc_case_fill(&d, &other);
            CHECK(memcmp(other.alloc, b3->alloc, (size_t)other.alloc_elems * other.elem_size) == 0,
                  "case %d tensor %s: a different case got the cached inputs", i, fc_tensor_name(t));
            fc_buf_free(&fresh);
            fc_buf_free(&other);
        }
        fc_verdict v;
        fc_verdict_init(&v);
        CHECK(fc_check_guards(&r2, &v) == 0 && fc_check_guards(&r3, &v) == 0, "case %d: guards of cached runs", i);
        fc_run_free(&r1);
        fc_run_free(&r2);
        fc_run_free(&r3);
    }
}

/* fuzz --oracle-gpu-min-work: AUTO's threshold is the process's (fc_check_set_oracle_gpu_min_work),
 * FC_ORACLE_GPU_MIN_WORK by default and again after a value <= 0; CPU and GPU tiers unaffected */
static void test_oracle_min_work(void)
{
    CHECK(fc_check_oracle_gpu_min_work() == FC_ORACLE_GPU_MIN_WORK, "default threshold %g", fc_check_oracle_gpu_min_work());
    CHECK(!fc_oracle_use_gpu(FC_ORACLE_AUTO, 1, 1, 1 << 20), "2^20 on the GPU tier by default");
    fc_check_set_oracle_gpu_min_work(1 << 18);
    CHECK(fc_oracle_use_gpu(FC_ORACLE_AUTO, 1, 1, 1 << 20), "2^20 not on the GPU tier past a threshold of 2^18");
    CHECK(!fc_oracle_use_gpu(FC_ORACLE_AUTO, 1, 1, (1 << 18) - 1), "below the threshold on the GPU tier");
    CHECK(!fc_oracle_use_gpu(FC_ORACLE_AUTO, 0, 1, 1 << 20), "a host backend's call on the GPU tier under AUTO");
    CHECK(!fc_oracle_use_gpu(FC_ORACLE_AUTO, 1, 0, 1 << 20), "GPU tier without a usable device");
    CHECK(!fc_oracle_use_gpu(FC_ORACLE_CPU, 1, 1, 1 << 20), "--oracle cpu on the GPU tier");
    fc_check_set_oracle_gpu_min_work(0);
    CHECK(fc_check_oracle_gpu_min_work() == FC_ORACLE_GPU_MIN_WORK, "threshold not restored by 0");
}

int main(void)
{
    test_oracle_min_work();
    test_guards();
    test_written_and_same_bits();
    test_input_cache();
    printf("run_checks_test: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
