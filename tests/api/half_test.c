/* half_test.c: the fp16/bf16 converters of kernels/cpu/cpu_half.h.
 *   - all 65536 bit patterns of each format: to fp32 and back is the identity
 *     (NaNs: same sign, quiet bit set, payload kept);
 *   - every rounding midpoint between adjacent values of each format (and its
 *     fp32 neighbours): ties go to even, everything else to nearest;
 *   - fp16: 2^24 fp32 patterns (every 256th) against the compiler's _Float16
 *     conversions (libgcc, an independent implementation), when available;
 *   - a table of known values (computed with CPython struct "e" for fp16 and
 *     exact integer RNE on the fp32 bits for bf16). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <math.h>

#include "kernels/cpu/cpu_half.h"

static void test_f16_roundtrip_all(void **state) {
    (void)state;
    int nans = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fa_cpu_f16_to_f32((uint16_t)h);
        uint16_t back = fa_cpu_f32_to_f16(f);
        int is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
        if (is_nan) {
            nans++;
            assert_true(isnan(f));
            assert_int_equal(signbit(f) != 0, (h & 0x8000) != 0);
            assert_int_equal(back, h | 0x200); /* quieted, payload kept */
        } else {
            if (back != h) fail_msg("fp16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
        }
    }
    assert_int_equal(nans, 2 * 1023);
}

static void test_bf16_roundtrip_all(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fa_cpu_bf16_to_f32((uint16_t)h);
        uint32_t fb = fa_cpu_f32_bits(f);
        assert_int_equal(fb, h << 16); /* exact widening */
        uint16_t back = fa_cpu_f32_to_bf16(f);
        int is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
        if (is_nan) assert_int_equal(back, h | 0x40);
        else if (back != h) fail_msg("bf16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
    }
}

/* Midpoints of every pair of adjacent fp16 magnitudes (including 65504 / 65536=inf). */
static void test_f16_midpoints(void **state) {
    (void)state;
    for (uint32_t m = 0; m < 0x7c00; m++) {
        float lo = fa_cpu_f16_to_f32((uint16_t)m);
        float hi = m == 0x7bff ? 65536.0f : fa_cpu_f16_to_f32((uint16_t)(m + 1));
        float mid = (lo + hi) * 0.5f; /* exact: 12 significant bits */
        assert_true(mid > lo && mid < hi);
        uint16_t even = (m & 1) ? (uint16_t)(m + 1) : (uint16_t)m;
        for (int s = 0; s < 2; s++) {
            float sg = s ? -1.0f : 1.0f;
            uint16_t sb = s ? 0x8000 : 0;
            assert_int_equal(fa_cpu_f32_to_f16(sg * mid), sb | even);
            assert_int_equal(fa_cpu_f32_to_f16(sg * nextafterf(mid, 0.0f)), sb | m);
            assert_int_equal(fa_cpu_f32_to_f16(sg * nextafterf(mid, INFINITY)), sb | (m + 1));
        }
    }
}

static void test_bf16_midpoints(void **state) {
    (void)state;
    for (uint32_t m = 0; m < 0x7f80; m++) {
        uint32_t mid = (m << 16) | 0x8000u;
        uint16_t even = (m & 1) ? (uint16_t)(m + 1) : (uint16_t)m;
        for (uint32_t s = 0; s < 2; s++) {
            uint32_t sb = s << 31;
            assert_int_equal(fa_cpu_f32_to_bf16(fa_cpu_f32_from_bits(sb | mid)), (sb >> 16) | even);
            assert_int_equal(fa_cpu_f32_to_bf16(fa_cpu_f32_from_bits(sb | (mid - 1))), (sb >> 16) | m);
            assert_int_equal(fa_cpu_f32_to_bf16(fa_cpu_f32_from_bits(sb | (mid + 1))), (sb >> 16) | (m + 1));
        }
    }
}

static void test_f16_against_compiler(void **state) {
    (void)state;
#if defined(__FLT16_MAX__)
    uint64_t checked = 0;
    for (uint64_t x = 0; x < (1ull << 32); x += 255) { /* odd step: varies the low bits too */
        float f = fa_cpu_f32_from_bits((uint32_t)x);
        _Float16 ref = (_Float16)f;
        uint16_t rb;
        memcpy(&rb, &ref, 2);
        uint16_t got = fa_cpu_f32_to_f16(f);
        if (isnan(f)) {
            assert_true((got & 0x7c00) == 0x7c00 && (got & 0x3ff) != 0);
        } else if (got != rb) {
            fail_msg("fp32 %a (0x%08x): got 0x%04x, _Float16 gives 0x%04x", (double)f, (unsigned)x, got, rb);
        }
        checked++;
    }
    for (uint32_t h = 0; h < 65536; h++) {
        _Float16 hv;
        uint16_t hb = (uint16_t)h;
        memcpy(&hv, &hb, 2);
        float ref = (float)hv, got = fa_cpu_f16_to_f32(hb);
        if (!isnan(ref)) assert_int_equal(fa_cpu_f32_bits(got), fa_cpu_f32_bits(ref));
        else assert_true(isnan(got));
    }
    print_message("  %llu fp32 values agree with _Float16\n", (unsigned long long)checked);
#else
    skip();
#endif
}

static void test_known_values(void **state) {
    (void)state;
    static const struct { float f; uint16_t h, b; } known[] = {
        {0.0f, 0x0000, 0x0000},      {-0.0f, 0x8000, 0x8000},     {1.0f, 0x3c00, 0x3f80},
        {-2.0f, 0xc000, 0xc000},     {0.5f, 0x3800, 0x3f00},      {65504.0f, 0x7bff, 0x4780},
        {65520.0f, 0x7c00, 0x4780},  {65519.99f, 0x7bff, 0x4780}, {0x1p-14f, 0x0400, 0x3880},
        {0x1p-24f, 0x0001, 0x3380},  {0x1p-25f, 0x0000, 0x3300},  {0x1.8p-25f, 0x0001, 0x3340},
        {0x3p-25f, 0x0002, 0x33c0},  {1.0f + 0x1p-11f, 0x3c00, 0x3f80},
        {1.0f + 0x3p-11f, 0x3c02, 0x3f80}, {3.14159265f, 0x4248, 0x4049},
        {INFINITY, 0x7c00, 0x7f80},  {-INFINITY, 0xfc00, 0xff80}, {1e10f, 0x7c00, 0x5015},
        {0x1.fefffep127f, 0x7c00, 0x7f7f}, {0x1.ff8p127f, 0x7c00, 0x7f80}, {1.00390625f, 0x3c04, 0x3f80},
        {1.01171875f, 0x3c0c, 0x3f82},
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        if (fa_cpu_f32_to_f16(known[i].f) != known[i].h)
            fail_msg("fp16(%a) = 0x%04x, expected 0x%04x", (double)known[i].f, fa_cpu_f32_to_f16(known[i].f), known[i].h);
        if (fa_cpu_f32_to_bf16(known[i].f) != known[i].b)
            fail_msg("bf16(%a) = 0x%04x, expected 0x%04x", (double)known[i].f, fa_cpu_f32_to_bf16(known[i].f), known[i].b);
    }
    assert_true(isnan(fa_cpu_f16_to_f32(fa_cpu_f32_to_f16(NAN))));
    assert_true(isnan(fa_cpu_bf16_to_f32(fa_cpu_f32_to_bf16(-NAN))));
    assert_true(fa_cpu_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(fa_cpu_f16_to_f32(0x8001) == -0x1p-24f);
    assert_true(fa_cpu_f16_to_f32(0x03ff) == 0x3ffp-24f);
    assert_true(fa_cpu_bf16_to_f32(0x0001) == 0x1p-133f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_values),       cmocka_unit_test(test_f16_roundtrip_all),
        cmocka_unit_test(test_bf16_roundtrip_all), cmocka_unit_test(test_f16_midpoints),
        cmocka_unit_test(test_bf16_midpoints),     cmocka_unit_test(test_f16_against_compiler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
