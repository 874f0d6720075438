/* case_test.c: the case module: scalar rounding, layouts, value generation,
 * buffers, and the text format (round trip and line-numbered errors). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "case/case.h"
#include "case/tests/case_check.h"

#ifndef FILL_DIGEST
#define FILL_DIGEST 0xff8ad217d872ee01ull /* test_fill_matches_value: the generator of commit 08004ee (v1) */
#endif
#ifndef FILL_DIGEST_V2
#define FILL_DIGEST_V2 0x10c1369f98519cb6ull /* test_fill_matches_value: input generator version 2 as first defined */
#endif

/* ---------------------------------------------------------------------------
 * Scalars
 * ------------------------------------------------------------------------- */
static void test_scalars(void) {
    /* fp16: exact bit patterns of known values */
    CHECK(fc_f16_from_double(1.0) == 0x3C00, "1.0");
    CHECK(fc_f16_from_double(-2.0) == 0xC000, "-2.0");
    CHECK(fc_f16_from_double(65504.0) == 0x7BFF, "max");
    CHECK(fc_f16_from_double(65519.0) == 0x7BFF, "below halfway to 65536 rounds to max");
    CHECK(fc_f16_from_double(65520.0) == 0x7C00, "halfway rounds to even = inf");
    CHECK(fc_f16_from_double(ldexp(1, -24)) == 0x0001, "min subnormal");
    CHECK(fc_f16_from_double(ldexp(1, -25)) == 0x0000, "half of min subnormal ties to even 0");
    CHECK(fc_f16_from_double(ldexp(3, -26)) == 0x0001, "0.75 ulp rounds up");
    CHECK(fc_f16_from_double(ldexp(1, -14)) == 0x0400, "min normal");
    CHECK(fc_f16_from_double(1.0 + ldexp(1, -11)) == 0x3C00, "1 + half ulp ties to even");
    CHECK(fc_f16_from_double(1.0 + ldexp(3, -11)) == 0x3C02, "1 + 1.5 ulp ties to even (up)");
    CHECK(isnan(fc_f16_to_double(FC_POISON_A_16)) && isnan(fc_f16_to_double(FC_POISON_B_16)), "poison is NaN");
    CHECK(isnan(fc_bf16_to_double(FC_POISON_A_16)) && isnan(fc_bf16_to_double(FC_POISON_B_16)), "poison is NaN");
    /* every fp16 / bf16 pattern round-trips */
    int bad16 = 0, badbf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        double x = fc_f16_to_double((uint16_t)h);
        if (!isnan(x) && fc_f16_from_double(x) != h) bad16++;
        double y = fc_bf16_to_double((uint16_t)h);
        if (!isnan(y) && fc_bf16_from_double(y) != h) badbf++;
    }
    CHECK(bad16 == 0, "%d fp16 patterns do not round-trip", bad16);
    CHECK(badbf == 0, "%d bf16 patterns do not round-trip", badbf);
    CHECK(fc_bf16_from_double(1.0) == 0x3F80, "bf16 1.0");
    CHECK(fc_bf16_from_double(1.0 + ldexp(1, -8)) == 0x3F80, "bf16 tie to even");
    CHECK(fc_bf16_from_double(1e39) == 0x7F80, "bf16 overflow to inf");
    CHECK(fc_round_to(FA_F16, 3.14159) == fc_f16_to_double(fc_f16_from_double(3.14159)), "round_to");
}

/* ---------------------------------------------------------------------------
 * Layouts and values
 * ------------------------------------------------------------------------- */
static void test_layouts_and_values(void) {
    fc_case c;
    fc_case_default(&c);
    c.p.batch = 2; c.p.seqlen_q = 5; c.p.seqlen_k = 7; c.p.heads_q = 4; c.p.heads_kv = 2;
    c.p.head_dim_qk = 8; c.p.head_dim_v = 6;
    int64_t st[4];
    fc_case_strides(&c, FC_T_Q, st);
    CHECK(st[0] == 5 * 4 * 8 && st[1] == 32 && st[2] == 8 && st[3] == 1, "dense q strides %lld %lld %lld %lld",
          (long long)st[0], (long long)st[1], (long long)st[2], (long long)st[3]);
    /* [B, H, S, D] storage with a gap of 3 after each head and 1 between elements */
    fc_layout *l = &c.layout[FC_T_K];
    l->order[0] = 0; l->order[1] = 2; l->order[2] = 1; l->order[3] = 3;
    l->pad[3] = 1; l->pad[1] = 3; l->offset = 5;
    fc_case_strides(&c, FC_T_K, st);
    CHECK(st[3] == 2 && st[1] == 2 * 8 + 3 && st[2] == 19 * 7 && st[0] == 133 * 2, "permuted k strides %lld %lld %lld %lld",
          (long long)st[0], (long long)st[1], (long long)st[2], (long long)st[3]);
    CHECK(fc_case_span(&c, FC_T_K) == 1 + 266 + 6 * 19 + 133 + 7 * 2, "span");
    c.mask.kind = FC_MASK_RANDOM_NEGINF;
    c.mask.broadcast_heads = 1;
    fc_case_strides(&c, FC_T_MASK, st);
    CHECK(st[1] == 0 && st[0] != 0, "mask head broadcast stride 0");

    /* the same logical values whatever the layout; buffers hold poison elsewhere */
    fc_case d = c;
    fc_case_default(&d);
    d.p = c.p;
    d.mask = c.mask;
    char msg[256];
    CHECK(fc_case_check(&c, msg, sizeof msg) == 0, "%s", msg);
    for (int t = 0; t < FC_N_DIST_INPUTS + 1; t++) {
        fc_buf a, b;
        CHECK(fc_buf_alloc(&c, t, 16, FC_POISON_A, &a, msg, sizeof msg) == 0, "%s", msg);
        CHECK(fc_buf_alloc(&d, t, 0, FC_POISON_B, &b, msg, sizeof msg) == 0, "%s", msg);
        fc_case_fill(&c, &a);
        fc_case_fill(&d, &b);
        int64_t idx[4] = {0, 0, 0, 0}, n = fc_case_numel(&c, t), nonfinite = 0, mism = 0;
        for (int64_t e = 0; e < n; e++) {
            int64_t r = e;
            for (int k = a.ndim - 1; k >= 0; k--) { idx[k] = r % a.dim[k]; r /= a.dim[k]; }
            double x = fc_buf_get(&a, idx), y = fc_buf_get(&b, idx), z = fc_case_value(&c, t, idx);
            if (!(x == y && x == z) && !(isinf(x) && x == y && y == z)) mism++;
            if (t != FC_T_MASK && !isfinite(x)) nonfinite++;
        }
        CHECK(mism == 0, "tensor %s: %lld elements differ between layouts or from fc_case_value", fc_tensor_name(t), (long long)mism);
        CHECK(nonfinite == 0, "tensor %s: %lld non-finite inputs", fc_tensor_name(t), (long long)nonfinite);
        /* count untouched (poison) elements in a: alloc - numel for a layout with gaps */
        int64_t poison = 0;
        for (int64_t e = 0; e < a.alloc_elems; e++) {
            double v = a.elem_size == 2 ? fc_f16_to_double(((uint16_t *)a.alloc)[e]) : ((float *)a.alloc)[e];
            if (isnan(v)) poison++;
        }
        int64_t written = t == FC_T_MASK ? n / c.p.heads_q : n;
        CHECK(poison == a.alloc_elems - written, "tensor %s: %lld poison of %lld, expected %lld", fc_tensor_name(t),
              (long long)poison, (long long)a.alloc_elems, (long long)(a.alloc_elems - written));
        fc_buf_free(&a);
        fc_buf_free(&b);
    }
}

/* Every distribution: finite values, the promised properties, a different seed differs. */
static void test_distributions(int gen) {
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < FC_DIST_COUNT; k++) {
            fc_case c;
            fc_case_default(&c);
            c.gen = gen;
            c.p.dtype = dt ? FA_BF16 : FA_F16;
            c.p.seqlen_k = 64; c.p.head_dim_qk = 16;
            c.dist[FC_T_K].kind = (fc_dist_kind)k;
            int64_t idx[4] = {0, 0, 0, 0};
            int nonfinite = 0, zeros = 0, subnormal = 0, nonint = 0, ties_broken = 0, rows_differ = 0, big = 0;
            double maxabs = 0;
            for (idx[1] = 0; idx[1] < 64; idx[1]++)
                for (idx[3] = 0; idx[3] < 16; idx[3]++) {
                    double x = fc_case_value(&c, FC_T_K, idx);
                    if (!isfinite(x)) nonfinite++;
                    if (x == 0) zeros++;
                    double minnorm = dt ? ldexp(1, -126) : ldexp(1, -14);
                    if (x != 0 && fabs(x) < minnorm) subnormal++;
                    if (x != floor(x)) nonint++;
                    if (fabs(x) > maxabs) maxabs = fabs(x);
                    if (fabs(x) > 50) big++;
                    int64_t pair[4] = {0, idx[1] ^ 1, 0, idx[3]}, first[4] = {0, 0, 0, idx[3]};
                    if (fc_case_value(&c, FC_T_K, pair) != x) ties_broken++;
                    if (fc_case_value(&c, FC_T_K, first) != x) rows_differ++;
                }
            const char *nm = fc_dist_name((fc_dist_kind)k);
            CHECK(nonfinite == 0, "%s: %d non-finite", nm, nonfinite);
            switch (k) {
            case FC_DIST_TINY: CHECK(subnormal > 50 && maxabs < 1e-2, "%s: %d subnormals max %g", nm, subnormal, maxabs); break;
            case FC_DIST_SPARSE_INT: CHECK(nonint == 0 && zeros > 600 && zeros < 1000 && maxabs == 2, "%s: nonint %d zeros %d", nm, nonint, zeros); break;
            case FC_DIST_TIES: CHECK(ties_broken == 0, "%s: %d pairs differ", nm, ties_broken); break;
            case FC_DIST_CONST_ROWS: CHECK(rows_differ == 0, "%s: %d rows differ", nm, rows_differ); break;
            case FC_DIST_LARGE: CHECK(maxabs > (dt ? 1e13 : 16000), "%s: max %g", nm, maxabs); break;
            case FC_DIST_HEAVY_TAIL: CHECK(maxabs > 50 && big >= 3, "%s: max %g, %d above 50", nm, maxabs, big); break;
            case FC_DIST_SPIKES: CHECK(big >= 1 && big < 60, "%s: %d spikes", nm, big); break;
            default: CHECK(maxabs > 1 && maxabs < 8 && ties_broken > 900, "%s: max %g", nm, maxabs);
            }
            int64_t e0[4] = {0, 3, 0, 5};
            double a = fc_case_value(&c, FC_T_K, e0);
            c.seed = 2;
            int same = 0;
            for (int s = 0; s < 8; s++) { e0[1] = s; if (fc_case_value(&c, FC_T_K, e0) == a) same++; }
            CHECK(same < 8 || k == FC_DIST_SPARSE_INT, "%s: seed has no effect", nm);
        }
}

static void test_masks(void) {
    fc_case c;
    fc_case_default(&c);
    c.p.batch = 2; c.p.heads_q = c.p.heads_kv = 2; c.p.seqlen_q = 12; c.p.seqlen_k = 20;
    for (int k = 1; k < FC_MASK_COUNT; k++) {
        c.mask.kind = (fc_mask_kind)k;
        int ninf = 0, nfin = 0, nzero = 0, rowfull = 0, colfull = 0, bcast_bad = 0;
        int64_t idx[4];
        for (idx[0] = 0; idx[0] < 2; idx[0]++)
            for (idx[1] = 0; idx[1] < 2; idx[1]++) {
                for (idx[2] = 0; idx[2] < 12; idx[2]++) {
                    int r = 0;
                    for (idx[3] = 0; idx[3] < 20; idx[3]++) {
                        double m = fc_case_value(&c, FC_T_MASK, idx);
                        if (m == -INFINITY) { ninf++; r++; } else if (m == 0) nzero++; else if (isfinite(m)) nfin++;
                    }
                    if (r == 20) rowfull++;
                }
                for (idx[3] = 0; idx[3] < 20; idx[3]++) {
                    int r = 0;
                    for (idx[2] = 0; idx[2] < 12; idx[2]++) r += fc_case_value(&c, FC_T_MASK, idx) == -INFINITY;
                    if (r == 12) colfull++;
                }
            }
        const char *nm = fc_mask_name((fc_mask_kind)k);
        switch (k) {
        case FC_MASK_RANDOM_NEGINF: CHECK(ninf > 100 && nzero > 500 && rowfull == 0, "%s", nm); break;
        case FC_MASK_STRIPES: CHECK(ninf > 300 && nzero > 300, "%s", nm); break;
        case FC_MASK_FULL_ROWS: CHECK(rowfull >= 4 && ninf == rowfull * 20, "%s rows %d", nm, rowfull); break;
        case FC_MASK_FULL_COLS: CHECK(colfull >= 4 && ninf == colfull * 12, "%s cols %d", nm, colfull); break;
        case FC_MASK_RANDOM_FINITE: CHECK(nfin > 900 && ninf == 0, "%s", nm); break;
        case FC_MASK_KEY_PADDING: CHECK(colfull == 2 * 3 + 2 * 6 && ninf == colfull * 12 && rowfull == 0, "%s cols %d", nm, colfull); break;
        case FC_MASK_RANDOM_MIXED:
            CHECK(ninf > 40 && nfin > 700 && nzero == 0 && rowfull == 0, "%s inf %d finite %d", nm, ninf, nfin);
            {   /* width 5: rows 2 and 7 of each (b, h) entirely -inf, the others mixed */
                fc_case w = c;
                w.mask.width = 5;
                int full = 0, mixed_rows = 0;
                int64_t x[4];
                for (x[0] = 0; x[0] < 2; x[0]++)
                    for (x[1] = 0; x[1] < 2; x[1]++)
                        for (x[2] = 0; x[2] < 12; x[2]++) {
                            int ni = 0, nf = 0;
                            for (x[3] = 0; x[3] < 20; x[3]++) {
                                double m = fc_case_value(&w, FC_T_MASK, x);
                                ni += m == -INFINITY;
                                nf += isfinite(m) && m != 0;
                            }
                            full += ni == 20 && x[2] % 5 == 2;
                            mixed_rows += nf > 0 && x[2] % 5 != 2;
                        }
                CHECK(full == 8 && mixed_rows == 40, "%s width 5: %d full rows (want 8), %d mixed", nm, full, mixed_rows);
            }
            break;
        }
        c.mask.broadcast_batch = 1;
        int64_t a[4] = {0, 1, 3, 4}, b[4] = {1, 1, 3, 4};
        for (a[3] = 0; a[3] < 20; a[3]++) { b[3] = a[3]; if (fc_case_value(&c, FC_T_MASK, a) != fc_case_value(&c, FC_T_MASK, b)) bcast_bad++; }
        CHECK(bcast_bad == 0, "%s: batch broadcast differs", nm);
        c.mask.broadcast_batch = 0;
    }
}

/* The encoders (bit arithmetic) against fc_round_to (frexp/nearbyint): every
 * value of the format, every midpoint between neighbours and the doubles just
 * beside it, the overflow thresholds, and random doubles over the whole range. */
static int encoder_agrees(fa_dtype d, double x) {
    uint16_t h = d == FA_BF16 ? fc_bf16_from_double(x) : fc_f16_from_double(x);
    double got = d == FA_BF16 ? fc_bf16_to_double(h) : fc_f16_to_double(h);
    double want = fc_round_to(d, x);
    return got == want && signbit(got) == signbit(want);
}

static void test_encoders(void) {
    for (int dt = 0; dt < 2; dt++) {
        fa_dtype d = dt ? FA_BF16 : FA_F16;
        int bad = 0;
        int64_t tried = 0;
        for (uint32_t h = 0; h < 0x7C00u + (dt ? 0x300u : 0u); h++) { /* fp16 < 0x7C00, bf16 < 0x7F80: finite */
            double a = dt ? fc_bf16_to_double((uint16_t)h) : fc_f16_to_double((uint16_t)h);
            double b = dt ? fc_bf16_to_double((uint16_t)(h + 1)) : fc_f16_to_double((uint16_t)(h + 1));
            if (isnan(a) || isnan(b)) continue;
            if (isinf(b)) b = dt ? 0x1p128 : 65536.0;        /* the next value past the largest finite */
            double mid = 0.5 * (a + b);                      /* exact: a, b have few bits */
            double xs[6] = {a, mid, nextafter(mid, 0), nextafter(mid, INFINITY), nextafter(a, INFINITY), b};
            for (int k = 0; k < 6; k++)
                for (int sg = 0; sg < 2; sg++) {
                    tried++;
                    if (!encoder_agrees(d, sg ? -xs[k] : xs[k])) bad++;
                }
        }
        for (int i = 0; i < 200000; i++) {
            uint64_t r = fc_rng_hash(7, (uint64_t)dt, (uint64_t)i, 0);
            double x = ldexp(1.0 + fc_rng_u01(r), (int)(r % 300) - 160) * ((r >> 20) & 1 ? -1 : 1);
            tried++;
            if (!encoder_agrees(d, x)) bad++;
        }
        const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, 1e-310, -1e-310, 65504.0, 65519.999, 65520.0, 1e300,
                                   0x1.FEp127, 0x1.FFp127, 0x1.FEFFFFFFFFFFFp127};
        for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
            tried++;
            if (!encoder_agrees(d, specials[i])) bad++;
        }
        CHECK(bad == 0, "%s: encoder and fc_round_to differ on %d of %lld values", dt ? "bf16" : "fp16", bad,
              (long long)tried);
    }
}

/* fc_case_fill (nested loops, shared hash prefixes) against fc_case_value
 * (element by element), for every distribution, mask kind, broadcast, dtype,
 * and permuted / padded / offset layouts; everything outside the tensor stays
 * poison. Plus a digest of the generated bytes of fixed cases, computed with
 * the generator as it was before the fast fill (commit 08004ee), so a change
 * of any generated value (a repro-format change) fails here. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 0x100000001B3ull; }
    return h;
}

static void fill_case(int i, int gen, fc_case *c) {
    uint64_t h = fc_rng_hash(1234, (uint64_t)i, 0, 0);
    fc_case_default(c);
    c->gen = gen;
    c->p.batch = 1 + (int64_t)(h % 3);
    c->p.heads_kv = 1 + (int64_t)((h >> 2) % 2);
    c->p.heads_q = c->p.heads_kv * (1 + (int64_t)((h >> 3) % 3));
    c->p.seqlen_q = (int64_t)((h >> 5) % 23);
    c->p.seqlen_k = (int64_t)((h >> 10) % 19);
    c->p.head_dim_qk = 1 + (int64_t)((h >> 15) % 17);
    c->p.head_dim_v = 1 + (int64_t)((h >> 20) % 9);
    c->p.dtype = (i & 1) ? FA_BF16 : FA_F16;
    for (int t = 0; t < FC_N_DIST_INPUTS; t++) {
        c->dist[t].kind = (fc_dist_kind)((i / 2 + t) % FC_DIST_COUNT);
        c->dist[t].amp = ((h >> (25 + t)) & 1) ? 3.5 : 0.0;
        c->dist[t].prob = ((h >> (29 + t)) & 1) ? 0.25 : 0.0;
    }
    /* the kinds before RANDOM_MIXED: FILL_DIGEST pins their inputs (test_masks covers the later kinds) */
    c->mask.kind = (fc_mask_kind)((i / 3) % FC_MASK_RANDOM_MIXED);
    c->mask.broadcast_batch = (h >> 33) & 1;
    c->mask.broadcast_heads = (h >> 34) & 1;
    c->mask.density = ((h >> 35) & 1) ? 0.6 : 0.0;
    c->mask.width = (int64_t)((h >> 36) % 5);
    c->mask.shift = (int64_t)((h >> 39) % 3);
    for (int t = 0; t <= FC_T_MASK; t++) {
        uint64_t g = fc_rng_hash(h, (uint64_t)t, 1, 0);
        fc_layout *l = &c->layout[t];
        for (int k = 3; k > 0; k--) {                 /* a permutation of 0..3 */
            int j = (int)((g >> (4 * k)) % (uint64_t)(k + 1)), tmp = l->order[k];
            l->order[k] = l->order[j];
            l->order[j] = tmp;
        }
        l->pad[(g >> 20) & 3] = (int64_t)((g >> 22) % 3);
        l->offset = (int64_t)((g >> 25) % 5);
    }
    c->seed = h;
}

static void test_fill_matches_value(int gen, uint64_t want_digest) {
    uint64_t digest = 0xCBF29CE484222325ull;
    for (int i = 0; i < 96; i++) {
        fc_case c;
        fill_case(i, gen, &c);
        char msg[256];
        CHECK(fc_case_check(&c, msg, sizeof msg) == 0, "case %d: %s", i, msg);
        for (int t = 0; t <= FC_T_MASK; t++) {
            fc_buf b;
            CHECK(fc_buf_alloc(&c, t, 8, FC_POISON_B, &b, msg, sizeof msg) == 0, "%s", msg);
            fc_case_fill(&c, &b);
            int64_t idx[4] = {0, 0, 0, 0}, n = fc_case_numel(&c, t), mism = 0, logical = 0;
            unsigned char *is_logical = calloc((size_t)b.alloc_elems + 1, 1);
            for (int64_t e = 0; e < n; e++) {
                int64_t r = e;
                for (int k = b.ndim - 1; k >= 0; k--) { idx[k] = r % b.dim[k]; r /= b.dim[k]; }
                double want = fc_case_value(&c, t, idx), got = fc_buf_get(&b, idx);
                if (!(got == want && signbit(got) == signbit(want))) mism++;
                is_logical[fc_buf_index(&b, idx)] = 1;
            }
            int64_t not_poison = 0;
            for (int64_t e = 0; e < b.alloc_elems; e++) {
                if (is_logical[e]) { logical++; continue; }
                int p = b.elem_size == 2 ? ((uint16_t *)b.alloc)[e] == FC_POISON_B_16
                                         : ((uint32_t *)b.alloc)[e] == FC_POISON_B_32;
                if (!p) not_poison++;
            }
            CHECK(mism == 0, "case %d tensor %s: %lld of %lld elements differ from fc_case_value", i,
                  fc_tensor_name(t), (long long)mism, (long long)n);
            CHECK(not_poison == 0, "case %d tensor %s: %lld elements outside the tensor written", i,
                  fc_tensor_name(t), (long long)not_poison);
            digest = fnv(digest, &t, sizeof t);
            digest = fnv(digest, b.alloc, (size_t)b.alloc_elems * b.elem_size);
            free(is_logical);
            fc_buf_free(&b);
        }
    }
    printf("fill digest (generator %d) %016llx\n", gen, (unsigned long long)digest);
    CHECK(digest == want_digest, "generator %d: generated inputs changed: digest %016llx, expected %016llx", gen,
          (unsigned long long)digest, (unsigned long long)want_digest);
}

/* ---------------------------------------------------------------------------
 * Text format
 * ------------------------------------------------------------------------- */
static void roundtrip(const fc_case *c, const char *what) {
    char text[8192], msg[512];
    size_t n = fc_case_write(c, text, sizeof text);
    CHECK(n < sizeof text, "%s: text too long", what);
    fc_case r;
    int rc = fc_case_parse(text, &r, msg, sizeof msg);
    CHECK(rc == 0, "%s: parse failed: %s\n%s", what, msg, text);
    CHECK(rc != 0 || fc_case_equal(c, &r), "%s: round trip differs\n%s", what, text);
    char text2[8192];
    fc_case_write(&r, text2, sizeof text2);
    CHECK(strcmp(text, text2) == 0, "%s: second write differs", what);
}

static void test_text(void) {
    fc_case c;
    fc_case_default(&c);
    roundtrip(&c, "default");
    /* a crowded case */
    c.p.batch = 3; c.p.seqlen_q = 0; c.p.seqlen_k = 97; c.p.heads_q = 6; c.p.heads_kv = 2;
    c.p.head_dim_qk = 72; c.p.head_dim_v = 40; c.p.dtype = FA_BF16; c.p.softmax_scale = 0.1f;
    c.p.causal = FA_CAUSAL_BOTTOM_RIGHT; c.p.window_left = 5; c.p.window_right = 0;
    c.p.window_align = FA_ALIGN_BOTTOM_RIGHT;
    c.mask.kind = FC_MASK_STRIPES; c.mask.width = 3; c.mask.shift = 0; c.mask.density = 0.125; c.mask.amp = 1.0 / 3;
    c.mask.broadcast_heads = 1;
    c.layout[FC_T_LSE].order[0] = 2; c.layout[FC_T_LSE].order[2] = 0; c.layout[FC_T_LSE].pad[1] = 7;
    c.layout[FC_T_DV].offset = 11; c.layout[FC_T_DV].order[0] = 3; c.layout[FC_T_DV].order[3] = 0;
    c.dist[FC_T_V].kind = FC_DIST_SPIKES; c.dist[FC_T_V].amp = 0.1; c.dist[FC_T_V].prob = 1e-300;
    c.seed = 0xFFFFFFFFFFFFFFFFull;
    c.backward = 0;
    roundtrip(&c, "crowded");
    /* pseudo-random cases */
    for (int i = 0; i < 300; i++) {
        uint64_t h = fc_rng_hash(99, (uint64_t)i, 0, 0);
        fc_case_default(&c);
        c.p.seqlen_q = (int64_t)(h % 50); c.p.seqlen_k = (int64_t)((h >> 8) % 50);
        c.p.dtype = (h >> 16) & 1 ? FA_BF16 : FA_F16;
        c.p.causal = (fa_causal)((h >> 17) % 3);
        c.p.softmax_scale = (float)fc_rng_u01(fc_rng_hash(h, 1, 0, 0));
        c.mask.kind = (fc_mask_kind)((h >> 20) % FC_MASK_COUNT);
        c.mask.density = fc_rng_u01(fc_rng_hash(h, 2, 0, 0));
        c.mask.broadcast_batch = (h >> 24) & 1;
        for (int t = 0; t < FC_N_DIST_INPUTS; t++) {
            c.dist[t].kind = (fc_dist_kind)((h >> (26 + 3 * t)) % FC_DIST_COUNT);
            c.dist[t].amp = fc_rng_u01(fc_rng_hash(h, 3, (uint64_t)t, 0)) * 1e6;
        }
        for (int t = 0; t < FC_T_COUNT; t++) {
            c.layout[t].pad[(h >> (40 + t)) & 3 % (t == FC_T_LSE ? 3 : 4)] = (int64_t)((h >> 50) % 5);
            c.layout[t].offset = (int64_t)((h >> 55) % 9);
        }
        c.seed = h;
        c.gen = 1 + (int)((h >> 60) & 1);
        char what[32];
        snprintf(what, sizeof what, "random %d", i);
        roundtrip(&c, what);
    }
}

static void expect_error(const char *text, const char *want) {
    fc_case c;
    char msg[512] = "";
    int rc = fc_case_parse(text, &c, msg, sizeof msg);
    CHECK(rc == -1, "accepted bad text: %s", text);
    CHECK(strstr(msg, want) != NULL, "message '%s' lacks '%s'", msg, want);
}

static void test_errors(void) {
    expect_error("shape = 1 2 3\n", "line 1: shape expects 7 integers");
    expect_error("# c\n\ndtype = fp32\n", "line 3: dtype: 'fp32' is not fp16 or bf16");
    expect_error("seed = 1\nseed = 2\n", "line 2: seed given twice (first on line 1)");
    expect_error("colour = red\n", "line 1: unknown key 'colour'");
    expect_error("dist.k = ties\ndist = gaussian\n", "line 2: dist must come before dist.k");
    expect_error("dist.o = gaussian\n", "line 1: dist.o: no distribution for 'o'");
    expect_error("layout.q = order 0 1 1 3\n", "line 1: layout.q: order is not a permutation");
    expect_error("layout.lse = order 0 1 2 3\n", "line 1: layout.lse: expected 'order', 'pad' or 'offset', got '3'");
    expect_error("layout.q = pad 0 0 0 -1\n", "line 1: layout.q: pad entry -1 is negative");
    expect_error("mask = random_neginf density=abc\n", "line 1: density: 'abc' is not a finite number");
    expect_error("mask = holes\n", "line 1: mask: unknown kind 'holes'");
    expect_error("window = 1\n", "line 1: window expects two integers");
    expect_error("shape = 1 16 16 3 2 32 32\n", "case: heads_q = 3 is not a multiple of heads_kv = 2");
    expect_error("mask = random_neginf density=2\n", "case: mask density must be in [0, 1]");
    expect_error("backward = yes\n", "line 1: backward expects 0 or 1");
    expect_error("seed = -4\n", "line 1: seed: '-4' is not an unsigned 64-bit integer");
    expect_error("just words\n", "line 1: expected 'key = value'");
    expect_error("scale = 1e60\n", "line 1: scale 1e60 overflows fp32");
    /* nothing is written into the output case on error */
    fc_case c, before;
    fc_case_default(&c);
    c.seed = 77;
    before = c;
    char msg[256];
    fc_case_parse("seed = 5\nbogus = 1\n", &c, msg, sizeof msg);
    CHECK(fc_case_equal(&c, &before), "failed parse modified the output case");
    /* comments, CR-LF, missing keys keep defaults */
    CHECK(fc_case_parse("  seed = 0x10   # hex\r\ndtype=bf16\r\n", &c, msg, sizeof msg) == 0, "%s", msg);
    CHECK(c.seed == 16 && c.p.dtype == FA_BF16 && c.p.seqlen_q == 16, "defaults/comments");
}

/* issue 12 item 8: sizes whose product overflows 64 bits were accepted and crashed the input
   fill (reported as a backend crash); heads and head dims 0 are outside the contract */
static void test_issue12_overflowing_sizes_rejected(void) {
    expect_error("shape = 16777216 16777216 16777216 65536 65536 64 64\n", "overflows 64 bits");
    expect_error("shape = 16777216 16777216 16777216 1 1 1 1\n", "overflows 64 bits");
    expect_error("shape = 1 16 16 0 0 32 32\n", "at least 1 query head and 1 key/value head");
    expect_error("shape = 1 16 16 2 0 32 32\n", "at least 1 query head and 1 key/value head");
    expect_error("shape = 1 16 16 1 1 0 0\n", "head dims must be >= 1");
    expect_error("shape = 1 16 16 1 1 32 0\n", "head dims must be >= 1");
    /* overflow through a padded stride, not the element count */
    expect_error("shape = 32768 1 32768 32768 32768 32768 1\nlayout.k = pad 4096 4096 4096 4096\n",
                 "overflows 64 bits");
    /* empty problems stay valid */
    fc_case c;
    char msg[256];
    CHECK(fc_case_parse("shape = 0 0 0 1 1 8 8\n", &c, msg, sizeof msg) == 0, "empty problem: %s", msg);
    CHECK(fc_case_parse("shape = 1 0 5 2 1 8 8\n", &c, msg, sizeof msg) == 0, "Sq = 0: %s", msg);
}

/* issue 12 item 10: an empty repro file replayed as the default case */
static void test_issue12_empty_repro_rejected(void) {
    fc_case c;
    char msg[256] = "";
    CHECK(fc_case_parse_repro("", &c, msg, sizeof msg) == -1 && strstr(msg, "empty file"), "empty: '%s'", msg);
    CHECK(fc_case_parse_repro("# only a comment\nseed = 3\n", &c, msg, sizeof msg) == -1 && strstr(msg, "no 'shape"),
          "no shape: '%s'", msg);
    CHECK(fc_case_parse_repro("shape = 1 4 4 1 1 8 8\n", &c, msg, sizeof msg) == 0, "with shape: %s", msg);
    CHECK(fc_case_parse("", &c, msg, sizeof msg) == 0, "fc_case_parse keeps the defaults for partial text");
    char path[] = "/tmp/case_test_emptyXXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        close(fd);
        CHECK(fc_case_load(path, &c, msg, sizeof msg) == -1 && strstr(msg, "not a case file"), "load empty: '%s'", msg);
        unlink(path);
    }
}

/* issue 12 item 16: a nonzero scale that rounds to 0 in fp32 became the default scale */
static void test_issue12_scale_underflow_rejected(void) {
    expect_error("scale = 1e-50\n", "line 1: scale 1e-50 rounds to 0 in fp32");
    expect_error("scale = 1e-40\n", "line 1: scale 1e-40 is subnormal in fp32");
    fc_case c;
    char msg[256];
    CHECK(fc_case_parse("scale = 1e-30\n", &c, msg, sizeof msg) == 0, "normal scale: %s", msg);
    CHECK(fc_case_parse("scale = 0\n", &c, msg, sizeof msg) == 0, "0 = default: %s", msg);
    fc_case_default(&c);
    c.p.softmax_scale = 1e-40f;
    CHECK(fc_case_check(&c, msg, sizeof msg) == -1 && strstr(msg, "subnormal"), "check: '%s'", msg);
}

/* ---------------------------------------------------------------------------
 * Generator versions
 * ------------------------------------------------------------------------- */
static void test_gen_versions(void) {
    fc_case c, d;
    char msg[512], text[8192];
    /* a file without `generator` is version 1, and a v1 case writes no such line */
    CHECK(fc_case_parse("shape = 1 4 4 1 1 8 8\nseed = 3\n", &c, msg, sizeof msg) == 0 && c.gen == FC_GEN_V1,
          "no generator line: gen %d, expected 1 (%s)", c.gen, msg);
    fc_case_write(&c, text, sizeof text);
    CHECK(strstr(text, "generator") == NULL, "a v1 case writes a generator line:\n%s", text);
    /* new cases are the latest version; it round-trips */
    fc_case_default(&d);
    CHECK(d.gen == FC_GEN_V2 && FC_GEN_LATEST == FC_GEN_V2, "fc_case_default: gen %d", d.gen);
    fc_case_write(&d, text, sizeof text);
    CHECK(strstr(text, "generator = 2\n") != NULL, "a v2 case lacks 'generator = 2':\n%s", text);
    CHECK(fc_case_parse(text, &c, msg, sizeof msg) == 0 && c.gen == FC_GEN_V2 && fc_case_equal(&c, &d), "v2 round trip");
    d.gen = FC_GEN_V1;
    CHECK(!fc_case_equal(&c, &d), "fc_case_equal ignores the generator");
    /* the versions give different bytes for the same seed; each is deterministic */
    int64_t idx[4] = {0, 3, 0, 5};
    int differ = 0;
    for (idx[3] = 0; idx[3] < 8; idx[3]++) differ += fc_case_value(&c, FC_T_Q, idx) != fc_case_value(&d, FC_T_Q, idx);
    CHECK(differ >= 6, "v1 and v2 agree on %d of 8 values", 8 - differ);
    /* bad versions: a clear error naming the value */
    expect_error("generator = 3\n", "line 1: generator = 3: unknown input generator version 3 (this build knows 1 to 2)");
    expect_error("generator = 0\n", "line 1: generator = 0: unknown input generator version 0");
    expect_error("generator = -1\n", "unknown input generator version -1");
    expect_error("generator = two\n", "line 1: generator expects one integer, the input generator version");
    expect_error("generator = 1 2\n", "line 1: generator expects one integer");
    expect_error("generator = 1\ngenerator = 2\n", "line 2: generator given twice");
    fc_case_default(&c);
    c.gen = 7;
    CHECK(fc_case_check(&c, msg, sizeof msg) != 0 && strstr(msg, "unknown input generator version 7"),
          "fc_case_check accepted generator 7: %s", msg);
    /* v2 determinism: two fills (one with another thread count) give the same bytes */
    fc_case_default(&c);
    c.p.batch = 2; c.p.seqlen_q = 300; c.p.heads_q = 4; c.p.heads_kv = 4; c.p.head_dim_qk = 64;
    c.dist[FC_T_Q].kind = FC_DIST_HEAVY_TAIL;
    fc_buf a, b;
    CHECK(fc_buf_alloc(&c, FC_T_Q, 4, FC_POISON_A, &a, msg, sizeof msg) == 0, "%s", msg);
    CHECK(fc_buf_alloc(&c, FC_T_Q, 4, FC_POISON_A, &b, msg, sizeof msg) == 0, "%s", msg);
    fc_case_fill(&c, &a);
    fc_case_fill(&c, &b);
    CHECK(memcmp(a.alloc, b.alloc, (size_t)a.alloc_elems * 2) == 0, "v2: two fills differ");
    fc_buf_free(&a);
    fc_buf_free(&b);
}

/* Kolmogorov-Smirnov distance of two sorted samples of n */
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double ks_dist(const double *a, const double *b, int64_t n) {
    int64_t i = 0, j = 0;
    double dmax = 0;
    while (i < n && j < n) {
        double v = a[i] < b[j] ? a[i] : b[j];
        while (i < n && a[i] == v) i++;
        while (j < n && b[j] == v) j++;
        double d = fabs((double)(i - j) / (double)n);
        if (d > dmax) dmax = d;
    }
    return dmax;
}

/* Version 2's distributions against their definitions (case.h) and against version 1:
 * 2^20 values per (distribution, dtype); mean, variance, tail frequencies within ~5
 * standard errors of the exact values, and the two-sample KS distance between v1 and v2
 * below 0.004 (the 1e-6 critical value for n = m = 2^20 is 1.95 sqrt(2/n) = 0.0027, plus
 * the piecewise-linear quantiles' share). */
static void test_gen2_statistics(void) {
    const int64_t S = 1024, D = 1024, n = S * D;
    double *x1 = malloc((size_t)n * sizeof(double)), *x2 = malloc((size_t)n * sizeof(double));
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < FC_DIST_COUNT; k++) {
            if (k == FC_DIST_CONST_ROWS || k == FC_DIST_TIES) continue; /* the gaussian, repeated (test_distributions) */
            fc_case c;
            fc_case_default(&c);
            c.p.dtype = dt ? FA_BF16 : FA_F16;
            c.p.seqlen_k = S; c.p.head_dim_qk = D; c.p.head_dim_v = 1; c.p.seqlen_q = 1;
            c.dist[FC_T_K].kind = (fc_dist_kind)k;
            c.seed = 77 + (uint64_t)k;
            for (int gen = 1; gen <= 2; gen++) {
                c.gen = gen;
                double *x = gen == 1 ? x1 : x2;
                int64_t idx[4] = {0, 0, 0, 0};
                for (idx[1] = 0; idx[1] < S; idx[1]++) fc_case_value_row(&c, FC_T_K, idx, D, x + idx[1] * D);
            }
            double m = 0, v = 0, t3 = 0, t4 = 0, mx = 0, z = 0, neg = 0;
            for (int64_t e = 0; e < n; e++) {
                double y = x2[e];
                m += y; v += y * y;
                t3 += fabs(y) > 3; t4 += fabs(y) > 4; z += y == 0; neg += y < 0;
                if (fabs(y) > mx) mx = fabs(y);
            }
            m /= (double)n; v = v / (double)n - m * m;
            double f3 = t3 / (double)n, f4 = t4 / (double)n, fz = z / (double)n, fn = neg / (double)n;
            qsort(x1, (size_t)n, sizeof(double), cmp_d);
            qsort(x2, (size_t)n, sizeof(double), cmp_d);
            double ks = ks_dist(x1, x2, n);
            const char *nm = fc_dist_name((fc_dist_kind)k);
            printf("gen2 %s %s: mean %.5f var %.5f P(|x|>3) %.3e P(|x|>4) %.3e max %.4g zeros %.4f KS(v1,v2) %.5f\n",
                   nm, dt ? "bf16" : "fp16", m, v, f3, f4, mx, fz, ks);
            CHECK(ks < 0.004, "%s %s: KS distance between v1 and v2 %.5f", nm, dt ? "bf16" : "fp16", ks);
            double se = 1.0 / sqrt((double)n);
            switch (k) {
            case FC_DIST_GAUSSIAN: /* N(0,1): var 2/n^0.5 se; P(|Z|>3) = 2.6998e-3, P(|Z|>4) = 6.334e-5 */
                CHECK(fabs(m) < 5 * se && fabs(v - 1) < 5 * sqrt(2.0) * se, "%s: mean %g var %g", nm, m, v);
                CHECK(fabs(f3 - 2.6998e-3) < 5 * sqrt(2.6998e-3 * se * se), "%s: P(|x|>3) %g", nm, f3);
                CHECK(fabs(f4 - 6.334e-5) < 5 * sqrt(6.334e-5 * se * se), "%s: P(|x|>4) %g", nm, f4);
                CHECK(mx > 4.4 && mx < 9.6, "%s: max %g", nm, mx);
                break;
            case FC_DIST_LARGE: { /* amp clamp(Z, 2): P(clamped) = 0.0455 */
                double amp = dt ? 0x1p44 : 16000.0, cl = 0;
                for (int64_t e = 0; e < n; e++) cl += fabs(x2[e]) >= 2 * amp * (1 - 0x1p-8);
                CHECK(mx <= 2 * amp * (1 + 0x1p-8) && fabs(cl / (double)n - 0.0455) < 0.002, "%s: max %g clamped %g", nm, mx,
                      cl / (double)n);
                CHECK(fabs(m) < 5 * se * amp, "%s: mean %g", nm, m);
                break;
            }
            case FC_DIST_TINY: CHECK(fz == 0 && fabs(fn - 0.5) < 5 * 0.5 * se && mx < 1e-2, "%s: zeros %g neg %g", nm, fz, fn); break;
            case FC_DIST_SPARSE_INT: /* P(0) = 0.8 + 0.2 / 5 = 0.84; values -2..2 */
                CHECK(fabs(fz - 0.84) < 5 * sqrt(0.84 * 0.16) * se && mx == 2 && fabs(m) < 5 * se, "%s: zeros %g", nm, fz);
                break;
            case FC_DIST_HEAVY_TAIL: { /* Cauchy: P(|x| < 1) = 1/2, P(|x| > 100) = 2 atan(1/100)/pi = 6.366e-3 */
                double lt1 = 0, gt100 = 0;
                for (int64_t e = 0; e < n; e++) { lt1 += fabs(x2[e]) < 1; gt100 += fabs(x2[e]) > 100; }
                lt1 /= (double)n; gt100 /= (double)n;
                CHECK(fabs(lt1 - 0.5) < 5 * 0.5 * se, "%s: P(|x|<1) %g", nm, lt1);
                CHECK(fabs(gt100 - 6.366e-3) < 5 * sqrt(6.366e-3) * se + 2e-4, "%s: P(|x|>100) %g", nm, gt100);
                CHECK(mx == 1000, "%s: max %g (clip 1000)", nm, mx);
                break;
            }
            case FC_DIST_SPIKES: { /* spike w.p. 0.01: P(|x| > 10) = 0.01 P(|Z| > 0.1) = 0.0092034 */
                double gt10 = 0;
                for (int64_t e = 0; e < n; e++) gt10 += fabs(x2[e]) > 10;
                gt10 /= (double)n;
                CHECK(fabs(gt10 - 0.0092034) < 5 * sqrt(0.0092034) * se, "%s: P(|x|>10) %g", nm, gt10);
                break;
            }
            default: break;
            }
        }
    free(x1);
    free(x2);
}

/* fc_clock_ns / fc_clock_s, the harness's one clock: monotone, it counts a known sleep (at least
 * its length, not absurdly more), and the seconds form is the nanoseconds scaled */
static void test_clock(void) {
    int64_t prev = fc_clock_ns(), back = 0;
    for (int i = 0; i < 100000; i++) {
        int64_t t = fc_clock_ns();
        back += t < prev;
        prev = t;
    }
    CHECK(back == 0, "the clock went back %lld times", (long long)back);
    const int64_t t0 = fc_clock_ns();
    const double s0 = fc_clock_s();
    usleep(20000);
    const int64_t t1 = fc_clock_ns();
    const double s1 = fc_clock_s();
    CHECK(t1 - t0 >= 20000000 && t1 - t0 < 5000000000LL, "a 20 ms sleep took %lld ns", (long long)(t1 - t0));
    CHECK(s1 - s0 >= 0.019 && s1 - s0 < 5.0 && fabs(s0 - 1e-9 * (double)t0) < 1e-3,
          "seconds: %.9f .. %.9f (ns %lld)", s0, s1, (long long)t0);
}

int main(void) {
    test_clock();
    test_issue12_overflowing_sizes_rejected();
    test_issue12_empty_repro_rejected();
    test_issue12_scale_underflow_rejected();
    test_scalars();
    test_encoders();
    test_layouts_and_values();
    test_fill_matches_value(FC_GEN_V1, FILL_DIGEST);
    test_fill_matches_value(FC_GEN_V2, FILL_DIGEST_V2);
    test_distributions(FC_GEN_V1);
    test_distributions(FC_GEN_V2);
    test_gen_versions();
    test_gen2_statistics();
    test_masks();
    test_text();
    test_errors();
    if (failures) {
        printf("case_test: %d failures\n", failures);
        return 1;
    }
    printf("case_test: all passed\n");
    return 0;
}
