/* fz_unit_test.c: the fuzzing building blocks without a backend:
 *   fz_gen   any bytes decode to a valid case; fitting honours a backend's limits;
 *            mutation keeps cases valid; the text form round-trips; the biases show up
 *   fz_store crash-state dedup, atomic no-clobber saving (also under a 4-process race)
 *   fz_feat  ratio buckets; geometry features of known cases */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz/fz_feat.h"
#include "fuzz/fz_gen.h"
#include "fuzz/fz_store.h"

static int failures, checks;
#define CHECK(cond, ...) do { checks++; if (!(cond)) { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static int count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    if (!d) return 0;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name), sl = strlen(suffix);
        if (l >= sl && strcmp(e->d_name + l - sl, suffix) == 0) n++;
    }
    closedir(d);
    return n;
}

static void test_gen(void)
{
    fz_budget b;
    fz_budget_default(&b);
    fa_limits cuda_like = { 256, 8, 0, 16, 1 };
    fa_limits dqk_eq = { 128, 1, 1, 2, 0 };
    fz_rng r;
    fz_rng_seed(&r, 42);
    uint8_t bytes[256];
    char msg[256];
    int tiles = 0, zero = 0, one = 0, prime = 0, gqa = 0, masked = 0, permuted = 0, n = 20000;
    static char text[16384];
    for (int i = 0; i < n; i++) {
        size_t len = fz_rng_below(&r, sizeof bytes);
        for (size_t k = 0; k < len; k++) bytes[k] = (uint8_t)fz_rng_next(&r);
        fc_case c;
        fz_case_from_bytes(bytes, len, &c);
        const fa_limits *lim = i % 3 == 0 ? &cuda_like : i % 3 == 1 ? &dqk_eq : NULL;
        fz_case_fit(&c, &b, lim, i % 2);
        int ok = fc_case_check(&c, msg, sizeof msg) == 0;
        CHECK(ok, "decoded case %d invalid: %s", i, msg);
        if (!ok) break;
        CHECK(c.p.seqlen_q <= b.max_seq && c.p.seqlen_k <= b.max_seq && c.p.head_dim_qk <= b.max_head_dim, "budget");
        if (lim == &cuda_like) {
            CHECK(c.p.head_dim_qk % 8 == 0 && c.p.head_dim_v % 8 == 0, "head dim multiple of 8: %lld %lld",
                  (long long)c.p.head_dim_qk, (long long)c.p.head_dim_v);
            for (int t = 0; t < FC_T_COUNT; t++) {
                if (t == FC_T_MASK || t == FC_T_LSE) continue;
                CHECK(c.layout[t].order[3] == 3 && c.layout[t].pad[3] == 0, "unit last stride for tensor %d", t);
                CHECK(c.layout[t].offset % 8 == 0, "16-byte alignment of tensor %d offset %lld", t, (long long)c.layout[t].offset);
            }
        }
        if (lim == &dqk_eq) CHECK(c.p.head_dim_qk == c.p.head_dim_v, "Dqk == Dv");
        if (i % 2 == 0) CHECK(c.backward == 0, "forward-only backend gets no backward case");
        /* mutation keeps it valid; the text form round-trips */
        fz_case_mutate(&r, &c);
        fz_case_fit(&c, &b, lim, 1);
        CHECK(fc_case_check(&c, msg, sizeof msg) == 0, "mutated case invalid: %s", msg);
        size_t tl = fc_case_write(&c, text, sizeof text);
        fc_case back;
        CHECK(tl < sizeof text && fc_case_parse(text, &back, msg, sizeof msg) == 0 && fc_case_equal(&c, &back),
              "text round trip: %s", msg);
        int64_t s = c.p.seqlen_q;
        tiles += s == 15 || s == 16 || s == 17 || s == 63 || s == 64 || s == 65 || s == 127 || s == 128 || s == 129 || s == 255 || s == 256;
        zero += s == 0;
        one += s == 1;
        prime += s == 97 || s == 113 || s == 251 || s == 131 || s == 61;
        gqa += c.p.heads_q > c.p.heads_kv;
        masked += c.mask.kind != FC_MASK_NONE;
        for (int t = 0; t < FC_T_COUNT; t++) if (c.layout[t].order[0] != 0 || c.layout[t].pad[0] || c.layout[t].pad[1] || c.layout[t].pad[2]) { permuted++; break; }
    }
    /* the biased values must be common (a uniform draw over 0..256 would give ~4%% for all tiles) */
    printf("bias over %d decoded+mutated cases: tile+-1 %d, zero %d, one %d, primes %d, gqa %d, masked %d, non-dense %d\n",
           n, tiles, zero, one, prime, gqa, masked, permuted);
    CHECK(tiles > n / 10, "tile boundaries +-1 are common (%d)", tiles);
    CHECK(zero > n / 100 && one > n / 100, "0 and 1 occur (%d, %d)", zero, one);
    CHECK(prime > n / 100, "primes occur (%d)", prime);
    CHECK(gqa > n / 10 && masked > n / 5 && permuted > n / 10, "gqa %d masked %d layouts %d", gqa, masked, permuted);

    /* the mutator API on text */
    uint8_t out[16384];
    const char *seed = "shape = 1 17 33 2 1 32 32\n";
    size_t m = fz_mutate_input((const uint8_t *)seed, strlen(seed), out, sizeof out - 1, 7, &b, NULL, 1);
    out[m] = 0;
    fc_case c;
    CHECK(m > 0 && fc_case_parse((char *)out, &c, msg, sizeof msg) == 0, "mutated text parses: %s", msg);
    CHECK(fz_mutate_input((const uint8_t *)seed, strlen(seed), out, 16, 7, &b, NULL, 1) == 0, "too small a buffer gives 0");
}

static void test_store(const char *tmp)
{
    char dir[512], path[1024], msg[256], path2[1024];
    snprintf(dir, sizeof dir, "%s/store", tmp);
    fc_case c;
    fc_case_default(&c);
    fz_crash_state s;
    fz_crash_state_make(&s, &c, "cpu", "fwd", "o", "bound");
    CHECK(fz_store_save(dir, &s, &c, "bound: o: 3 elements\nsecond line", path, sizeof path, msg, sizeof msg) == 1, "first save new: %s", msg);
    CHECK(fz_store_save(dir, &s, &c, "other detail", path2, sizeof path2, msg, sizeof msg) == 0 && strcmp(path, path2) == 0, "same state is a duplicate");
    fc_case loaded;
    CHECK(fc_case_load(path, &loaded, msg, sizeof msg) == 0 && fc_case_equal(&c, &loaded), "finding file is a valid case: %s", msg);
    fc_case c2 = c;
    c2.p.seqlen_q = 129;                                  /* another shape bucket */
    fz_crash_state s2;
    fz_crash_state_make(&s2, &c2, "cpu", "fwd", "o", "bound");
    CHECK(fz_crash_state_hash(&s) != fz_crash_state_hash(&s2), "shape bucket is part of the state");
    c2 = c;
    c2.seed = 99;                                         /* same bucket: same state */
    fz_crash_state_make(&s2, &c2, "cpu", "fwd", "o", "bound");
    CHECK(fz_crash_state_hash(&s) == fz_crash_state_hash(&s2), "seed is not part of the state");
    fz_crash_state_make(&s2, &c, "cpu", "fwd", "lse", "bound");
    CHECK(fz_crash_state_hash(&s) != fz_crash_state_hash(&s2), "tensor is part of the state");

    /* race: 4 processes save the same new state at once: exactly one file, no temp left */
    char race[512];
    snprintf(race, sizeof race, "%s/race", tmp);
    fz_crash_state_make(&s2, &c, "cpu", "bwd", "dq", "nan");
    for (int i = 0; i < 4; i++)
        if (fork() == 0) {
            int r = fz_store_save(race, &s2, &c, NULL, NULL, 0, msg, sizeof msg);
            _exit(r == 1 ? 10 : r == 0 ? 11 : 12);
        }
    int news = 0, dups = 0, st;
    for (int i = 0; i < 4; i++) {
        wait(&st);
        news += WEXITSTATUS(st) == 10;
        dups += WEXITSTATUS(st) == 11;
    }
    CHECK(news == 1 && dups == 3, "race: %d new, %d duplicates", news, dups);
    CHECK(count_files(race, ".case") == 1, "race: one file");
    DIR *d = opendir(race);
    struct dirent *e;
    int temps = 0;
    while (d && (e = readdir(d)) != NULL) temps += strncmp(e->d_name, ".tmp-", 5) == 0;
    if (d) closedir(d);
    CHECK(temps == 0, "no temp files left (%d)", temps);
    /* atomic replace */
    snprintf(path, sizeof path, "%s/atomic.txt", tmp);
    CHECK(fz_write_atomic(path, "one", 3, msg, sizeof msg) == 0 && fz_write_atomic(path, "two", 3, msg, sizeof msg) == 0, "%s", msg);
    FILE *f = fopen(path, "r");
    char buf[8] = "";
    if (f) { size_t k = fread(buf, 1, 7, f); buf[k] = 0; fclose(f); }
    CHECK(strcmp(buf, "two") == 0, "atomic write replaced the content");
}

static void test_feat(void)
{
    CHECK(fz_feat_ratio_bucket(0) == 0, "exact is bucket 0");
    int prev = 0;
    for (double x = 1e-12; x < 1e4; x *= 1.7) {
        int b = fz_feat_ratio_bucket(x);
        CHECK(b >= prev && b < FZ_FEAT_RATIO_BUCKETS, "monotone bucket at %g", x);
        prev = b;
    }
    CHECK(fz_feat_ratio_bucket(0.75) != fz_feat_ratio_bucket(1.5), "ratio 0.75 and 1.5 (pass/fail) differ");
    CHECK(fz_feat_ratio_bucket(0.0 / 0.0) == FZ_FEAT_RATIO_BUCKETS - 1, "NaN goes to the top bucket");

    /* causal bottom-right with Sq > Sk: the top rows see nothing */
    fc_case c;
    fc_case_default(&c);
    c.p.seqlen_q = 70; c.p.seqlen_k = 33; c.p.causal = FA_CAUSAL_BOTTOM_RIGHT;
    fz_feat f;
    fz_feat_clear(&f);
    fz_feat_geometry(&f, &c);
    CHECK(f.c[FZ_FEAT_ROWS + 0] > 0, "fully masked rows detected");
    CHECK(f.c[FZ_FEAT_TILES + 4 * 2 + 0] > 0 && f.c[FZ_FEAT_TILES + 4 * 2 + 1] > 0, "partial 64-tiles on both sides");
    /* no mask, Sq = Sk = 64: no masked rows, no partial 64-tile */
    fc_case_default(&c);
    c.p.seqlen_q = c.p.seqlen_k = 64;
    fz_feat_clear(&f);
    fz_feat_geometry(&f, &c);
    CHECK(f.c[FZ_FEAT_ROWS + 0] == 0 && f.c[FZ_FEAT_TILES + 4 * 2 + 0] == 0, "full tiles, no masked rows");
    /* GQA group 4 and a full-column mask */
    c.p.heads_q = 8; c.p.heads_kv = 2; c.mask.kind = FC_MASK_FULL_COLS;
    fz_feat_clear(&f);
    fz_feat_geometry(&f, &c);
    CHECK(f.c[FZ_FEAT_GQA + 2] > 0, "group size 3-4 bucket");
    CHECK(f.c[FZ_FEAT_ROWS + 2] > 0, "keys visible to no query detected");
    /* novelty */
    fz_feat_map map;
    memset(&map, 0, sizeof map);
    int n1 = fz_feat_novel(&map, &f), n2 = fz_feat_novel(&map, &f);
    CHECK(n1 > 0 && n2 == 0 && fz_feat_map_size(&map) == n1, "novelty: %d then %d", n1, n2);
}

/* contract v3: with a backend claiming every feature, generated cases cover packed batches
 * with empty and single-token sequences, caches longer than used, paged caches with shuffled
 * and shared pages in padded tables, softcap and sinks; every one is valid, round-trips as
 * text, and a backend claiming nothing never gets a v3 case. */
static void test_gen_v3(void)
{
    fz_budget b;
    fz_budget_default(&b);
    fa_limits all = {.max_head_dim = 256, .head_dim_multiple = 1, .ptr_align_bytes = 2, .supports_varlen = 1,
                     .supports_paged = 1, .supports_softcap = 1, .supports_sinks = 1};
    fa_limits none = {.max_head_dim = 256, .head_dim_multiple = 1, .ptr_align_bytes = 2};
    fz_rng r;
    fz_rng_seed(&r, 99);
    int n = 3000, v3 = 0, empty_seq = 0, one_seq = 0, longer = 0, paged = 0, shuffled = 0, shared = 0, padded = 0,
        capped = 0, sinks = 0, mutated_v3 = 0;
    static char text[1 << 16];
    for (int i = 0; i < n; i++) {
        fc_case c, back;
        char msg[256];
        fz_case_random(&r, &c);
        if (i % 3 == 0) fz_case_mutate(&r, &c);
        fz_case_fit(&c, &b, i % 5 == 4 ? &none : &all, 1);
        CHECK(fc_case_check(&c, msg, sizeof msg) == 0, "v3 case %d invalid: %s", i, msg);
        if (i % 5 == 4) { CHECK(!fc_case_is_v3(&c), "a backend claiming nothing got a v3 case"); continue; }
        size_t tl = fc_case_write(&c, text, sizeof text);
        CHECK(tl < sizeof text && fc_case_parse(text, &back, msg, sizeof msg) == 0 && fc_case_equal(&c, &back),
              "v3 round trip %d: %s\n%s", i, msg, text);
        if (!fc_case_is_v3(&c)) continue;
        v3++;
        if (i % 3 == 0) mutated_v3++;
        int e = 0, o = 0, l = 0;
        for (int64_t k = 0; k < c.p.batch && c.p.batch >= 2; k++) {
            if (c.v3.varlen_q) { e |= c.v3.seqlens_q[k] == 0; o |= c.v3.seqlens_q[k] == 1; }
            if (c.v3.has_seqused) l |= c.v3.seqused_k[k] < fc_case_seq_alloc(&c, k);
        }
        empty_seq += e; one_seq += o; longer += l;
        if (c.p.page_size >= 1) {
            paged++;
            int sh = 0, rep = 0;
            int64_t m = c.p.batch * c.v3.max_pages;
            for (int64_t x = 1; x < m; x++) sh |= c.v3.block_table[x] != c.v3.block_table[x - 1] + 1;
            for (int64_t x = 0; x < m; x++)
                for (int64_t y = 0; y < x; y++) rep |= c.v3.block_table[x] == c.v3.block_table[y];
            shuffled += sh; shared += rep; padded += c.v3.table_pad > 0;
        }
        capped += c.p.softcap > 0;
        sinks += c.p.has_sinks;
    }
    printf("v3 cases %d/%d: empty seq %d, 1-token seq %d, cache longer than used %d, paged %d (shuffled %d, "
           "shared %d, padded %d), softcap %d, sinks %d, mutated %d\n", v3, n, empty_seq, one_seq, longer, paged,
           shuffled, shared, padded, capped, sinks, mutated_v3);
    CHECK(v3 > n / 10, "v3 cases are generated (%d)", v3);
    CHECK(empty_seq > 10 && one_seq > 10 && longer > 10, "lengths 0, 1 and caches longer than used occur");
    CHECK(paged > 20 && shuffled > 10 && shared > 5 && padded > 10, "paged tables: shuffled, shared, padded");
    CHECK(capped > 10 && sinks > 10, "softcap and sinks occur");
}

/* size budgets: --max-seq alone never reaches long sequences (the work cap shrinks them);
 * the "production" budget keeps S = 16384 and caps work and scores; unknown names are refused */
static void test_budget(void)
{
    fz_budget b, d;
    fz_budget_default(&d);
    b = d;
    b.backward = 1;
    CHECK(fz_budget_preset("bogus", &b) == -1 && b.max_seq == d.max_seq && b.max_work == d.max_work, "unknown preset refused, budget unchanged");
    CHECK(fz_budget_preset("production", &b) == 0 && b.max_seq == 16384 && b.max_head_dim == 128 && b.max_batch == 4 &&
          b.max_heads_q == 16 && b.max_work == (int64_t)1 << 37 && b.max_scores == (int64_t)1 << 29 && b.backward == 1,
          "production preset values (backward setting kept)");
    fc_case c;
    fc_case_default(&c);
    c.p.seqlen_q = c.p.seqlen_k = 16384;
    c.p.head_dim_qk = c.p.head_dim_v = 128;
    fz_case_fit(&c, &b, NULL, 1);
    CHECK(c.p.seqlen_q == 16384 && c.p.seqlen_k == 16384, "production: S=16384 kept (%lld %lld)", (long long)c.p.seqlen_q, (long long)c.p.seqlen_k);
    fz_budget seqonly = d;
    seqonly.max_seq = 16384;
    fc_case_default(&c);
    c.p.seqlen_q = c.p.seqlen_k = 16384;
    c.p.head_dim_qk = c.p.head_dim_v = 128;
    fz_case_fit(&c, &seqonly, NULL, 1);
    CHECK(c.p.seqlen_q < 16384 && c.p.seqlen_q * c.p.seqlen_k * 128 <= d.max_work, "max_seq alone: work cap shrinks S (%lld)", (long long)c.p.seqlen_q);
    fc_case_default(&c);
    c.p.batch = 4; c.p.heads_q = 16; c.p.heads_kv = 4;
    c.p.seqlen_q = c.p.seqlen_k = 16384;
    c.p.head_dim_qk = c.p.head_dim_v = 128;
    fz_case_fit(&c, &b, NULL, 1);
    int64_t sc = c.p.batch * c.p.heads_q * c.p.seqlen_q * c.p.seqlen_k;
    CHECK(sc <= b.max_scores && sc * 128 <= b.max_work && sc > b.max_scores / 4, "production: scores capped at 2^29 (%lld)", (long long)sc);
    fz_budget sm = b;
    CHECK(fz_budget_preset("small", &sm) == 0 && sm.max_seq == d.max_seq && sm.max_work == d.max_work && sm.max_scores == d.max_scores &&
          sm.max_batch == d.max_batch && sm.max_heads_q == d.max_heads_q && sm.backward == 1, "small preset is the default");
    /* stretch: a no-op on the small budget (same rng draws); long sequences on production */
    fz_rng r1, r2;
    fz_rng_seed(&r1, 7);
    fz_rng_seed(&r2, 7);
    int same = 1, longer = 0, n = 400;
    char msg[256];
    for (int i = 0; i < n; i++) {
        fc_case a, a2;
        fz_case_random(&r1, &a);
        a2 = a;
        fz_case_stretch(&r1, &a2, &d);
        same &= a2.p.seqlen_q == a.p.seqlen_q && a2.p.seqlen_k == a.p.seqlen_k;
        fz_case_random(&r2, &c);
        fz_case_stretch(&r2, &c, &b);
        fz_case_fit(&c, &b, NULL, 1);
        CHECK(fc_case_check(&c, msg, sizeof msg) == 0, "production case %d invalid: %s", i, msg);
        longer += c.p.seqlen_q > 8192 || c.p.seqlen_k > 8192;
    }
    CHECK(same, "stretch changes nothing on the small budget");
    CHECK(longer >= n / 20, "production budget: %d of %d cases with S > 8192", longer, n);
}

int main(void)
{
    const char *t = getenv("TEST_TMPDIR");
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s/fz_unit_%d", t ? t : "/tmp", (int)getpid());
    test_gen();
    test_gen_v3();
    test_budget();
    test_store(tmp);
    test_feat();
    printf("%d checks, %d failed\n", checks, failures);
    return failures != 0;
}
