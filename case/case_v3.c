/* case_v3.c: the contract-v3 fields of a case (fc_v3 in case.h): packed sequences,
 * seqused_k, the paged cache and its block table, softcap, sinks. Dims of packed and
 * paged tensors, the checks (mirroring fa_validate_*: a case outside the contract is a
 * bad case, never a finding), the text keys, the writer and equality. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case/case.h"

/* ---------------------------------------------------------------------------
 * Lengths
 * ------------------------------------------------------------------------- */
int fc_case_is_v3(const fc_case *c) {
    return c->v3.varlen_q || c->v3.varlen_k || c->v3.has_seqused || c->p.page_size >= 1 || c->p.softcap > 0.0f ||
           c->p.has_sinks;
}

int64_t fc_case_seq_q(const fc_case *c, int64_t b) { return c->v3.varlen_q ? c->v3.seqlens_q[b] : c->p.seqlen_q; }

int64_t fc_case_seq_alloc(const fc_case *c, int64_t b) {
    if (c->v3.varlen_k) return c->v3.seqlens_k[b];
    if (c->p.page_size >= 1) return c->v3.max_pages * c->p.page_size;
    return c->p.seqlen_k;
}

int64_t fc_case_seq_k(const fc_case *c, int64_t b) {
    if (c->v3.has_seqused) return c->v3.seqused_k[b];
    if (c->p.page_size >= 1) return c->p.seqlen_k;
    return fc_case_seq_alloc(c, b);
}

int64_t fc_case_total_q(const fc_case *c) {
    if (!c->v3.varlen_q) return c->p.batch * c->p.seqlen_q;
    int64_t t = 0;
    for (int64_t b = 0; b < c->p.batch && b < FC_MAX_SEQS; b++) t += c->v3.seqlens_q[b];
    return t;
}

int64_t fc_case_total_k(const fc_case *c) {
    if (!c->v3.varlen_k) return c->p.batch * c->p.seqlen_k;
    int64_t t = 0;
    for (int64_t b = 0; b < c->p.batch && b < FC_MAX_SEQS; b++) t += c->v3.seqlens_k[b];
    return t;
}

/* sink_h = fp32(amp * N(0,1)) from (seed, h): generator v1: Box-Muller of two counter hashes,
 * v2: fc_gen2_normal of the first; amp defaults
 * to 1 (30 for kind "large": a sink that dominates the row). */
double fc_case_sink(const fc_case *c, int64_t h) {
    const fc_dist *d = &c->v3.sinks;
    double amp = d->amp > 0 ? d->amp : (d->kind == FC_DIST_LARGE ? 30.0 : 1.0);
    if (c->gen == FC_GEN_V2) return (double)(float)(amp * fc_gen2_normal(fc_rng_hash(c->seed, 0x51A4ull, (uint64_t)h, 1)));
    double u1 = fc_rng_u01(fc_rng_hash(c->seed, 0x51A4ull, (uint64_t)h, 1));
    double u2 = fc_rng_u01(fc_rng_hash(c->seed, 0x51A4ull, (uint64_t)h, 2));
    double g = sqrt(-2.0 * log1p(-u1)) * cos(6.283185307179586 * u2);
    return (double)(float)(amp * g);
}

int64_t fc_case_v3_arrays(const fc_case *c, int32_t *cu_q, int32_t *cu_k, int32_t *used, int32_t *table) {
    const int64_t B = c->p.batch;
    if (cu_q) {
        cu_q[0] = 0;
        for (int64_t b = 0; b < B; b++) cu_q[b + 1] = cu_q[b] + (int32_t)fc_case_seq_q(c, b);
    }
    if (cu_k) {
        cu_k[0] = 0;
        for (int64_t b = 0; b < B; b++) cu_k[b + 1] = cu_k[b] + (int32_t)fc_case_seq_alloc(c, b);
    }
    if (used)
        for (int64_t b = 0; b < B; b++) used[b] = (int32_t)fc_case_seq_k(c, b);
    if (c->p.page_size < 1) return 0;
    const int64_t stride = c->v3.max_pages + c->v3.table_pad;
    if (table)
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < stride; j++)
                table[b * stride + j] = j < c->v3.max_pages ? c->v3.block_table[b * c->v3.max_pages + j] : -1;
    return stride;
}

/* ---------------------------------------------------------------------------
 * Dims
 * ------------------------------------------------------------------------- */
int fc_v3_dims(const fc_case *c, int t, int64_t dim[4]) {
    const fa_problem *p = &c->p;
    int q_side = t == FC_T_Q || t == FC_T_DQ || t == FC_T_O || t == FC_T_DO;
    int k_side = t == FC_T_K || t == FC_T_DK || t == FC_T_V || t == FC_T_DV;
    int64_t D = (t == FC_T_Q || t == FC_T_DQ || t == FC_T_K || t == FC_T_DK) ? p->head_dim_qk : p->head_dim_v;
    if (q_side && c->v3.varlen_q) {
        dim[0] = 1; dim[1] = fc_case_total_q(c); dim[2] = p->heads_q; dim[3] = D;
        return 4;
    }
    if (t == FC_T_LSE && c->v3.varlen_q) {
        dim[0] = 1; dim[1] = p->heads_q; dim[2] = fc_case_total_q(c); dim[3] = 1;
        return 3;
    }
    if (k_side && c->v3.varlen_k) {
        dim[0] = 1; dim[1] = fc_case_total_k(c); dim[2] = p->heads_kv; dim[3] = D;
        return 4;
    }
    if (k_side && p->page_size >= 1) {
        dim[0] = c->v3.num_pages; dim[1] = p->page_size; dim[2] = p->heads_kv; dim[3] = D;
        return 4;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Checks (fa_validate_* rules, in case terms)
 * ------------------------------------------------------------------------- */
#define FAIL(...)                                              \
    do {                                                       \
        if (msg && msglen) snprintf(msg, msglen, __VA_ARGS__); \
        return -1;                                             \
    } while (0)

int fc_v3_check(const fc_case *c, char *msg, size_t msglen) {
    const fa_problem *p = &c->p;
    const fc_v3 *v = &c->v3;
    if (!isfinite(p->softcap) || p->softcap < 0.0f) FAIL("softcap %g must be 0 (off) or finite > 0", (double)p->softcap);
    if (p->has_sinks != 0 && p->has_sinks != 1) FAIL("has_sinks must be 0 or 1");
    if ((int)v->sinks.kind < 0 || v->sinks.kind >= FC_DIST_COUNT) FAIL("sinks: unknown distribution");
    if (!(v->sinks.amp >= 0.0 && v->sinks.amp <= 1e4)) FAIL("sinks amp must be in [0, 1e4]");
    if (p->page_size < 0) FAIL("page_size %lld is negative", (long long)p->page_size);
    const int paged = p->page_size >= 1;
    if ((v->varlen_q || v->varlen_k || v->has_seqused || paged) && p->batch > FC_MAX_SEQS)
        FAIL("batch %lld: a varlen or paged case has at most %d sequences", (long long)p->batch, FC_MAX_SEQS);
    if ((v->varlen_q || v->varlen_k) && c->mask.kind != FC_MASK_NONE)
        FAIL("mask: an additive mask is not allowed with packed sequences (seqlens_q / seqlens_k)");
    if (paged && v->varlen_k) FAIL("seqlens_k with paged: K/V are either packed or paged (use seqused_k)");
    const int64_t B = p->batch;
    int64_t tq = 0, tk = 0;
    for (int64_t b = 0; v->varlen_q && b < B; b++) {
        if (v->seqlens_q[b] < 0 || v->seqlens_q[b] > p->seqlen_q)
            FAIL("seqlens_q[%lld] = %lld must be in [0, seqlen_q = %lld]", (long long)b, (long long)v->seqlens_q[b],
                 (long long)p->seqlen_q);
        tq += v->seqlens_q[b];
    }
    for (int64_t b = 0; v->varlen_k && b < B; b++) {
        if (v->seqlens_k[b] < 0 || v->seqlens_k[b] > p->seqlen_k)
            FAIL("seqlens_k[%lld] = %lld must be in [0, seqlen_k = %lld]", (long long)b, (long long)v->seqlens_k[b],
                 (long long)p->seqlen_k);
        tk += v->seqlens_k[b];
    }
    if (tq > INT32_MAX || tk > INT32_MAX) FAIL("packed rows exceed int32 (cu_seqlens are int32)");
    if (paged) {
        if (v->max_pages < 1) FAIL("paged: no block_table rows (block_table.<b> = page,page,...)");
        if (v->max_pages > FC_MAX_PAGES) FAIL("paged: max_pages %lld exceeds %d", (long long)v->max_pages, FC_MAX_PAGES);
        if (v->num_pages < 1 || v->num_pages > 99999) FAIL("paged: num_pages must be in [1, 99999]");
        if (v->table_pad < 0 || v->table_pad > 4096) FAIL("paged: table_pad must be in [0, 4096]");
        if (B * v->max_pages > FC_MAX_TABLE) FAIL("paged: batch * max_pages exceeds %d table entries", FC_MAX_TABLE);
        if (p->page_size > (1 << 24) || v->max_pages * p->page_size < p->seqlen_k)
            FAIL("paged: max_pages (%lld) * page_size (%lld) must hold seqlen_k = %lld keys", (long long)v->max_pages,
                 (long long)p->page_size, (long long)p->seqlen_k);
    }
    for (int64_t b = 0; v->has_seqused && b < B; b++) {
        int64_t cap = fc_case_seq_alloc(c, b) < p->seqlen_k ? fc_case_seq_alloc(c, b) : p->seqlen_k;
        if (v->seqused_k[b] < 0 || v->seqused_k[b] > cap)
            FAIL("seqused_k[%lld] = %lld must be in [0, %lld] (the keys allocated to sequence %lld, at most seqlen_k)",
                 (long long)b, (long long)v->seqused_k[b], (long long)cap, (long long)b);
    }
    for (int64_t b = 0; paged && b < B; b++) {
        int64_t pages = (fc_case_seq_k(c, b) + p->page_size - 1) / p->page_size;
        for (int64_t j = 0; j < pages; j++) {
            int32_t e = v->block_table[b * v->max_pages + j];
            if (e < 0 || e >= v->num_pages)
                FAIL("block_table.%lld entry %lld is %d; used pages must be in [0, num_pages = %lld)", (long long)b,
                     (long long)j, (int)e, (long long)v->num_pages);
        }
    }
    return 0;
}
#undef FAIL

/* ---------------------------------------------------------------------------
 * Text
 * ------------------------------------------------------------------------- */
enum { V3K_SEQLENS_Q, V3K_SEQLENS_K, V3K_SEQUSED, V3K_SOFTCAP, V3K_SINKS, V3K_PAGED };
static const char *const v3_keys[] = {"seqlens_q", "seqlens_k", "seqused_k", "softcap", "sinks", "paged"};

#define PERR(...)                                              \
    do {                                                       \
        if (msg && msglen) snprintf(msg, msglen, __VA_ARGS__); \
        return -1;                                             \
    } while (0)

/* "a,b,c" -> out[0..], count in *n (at most cap). */
static int parse_list(const char *key, const char *s, int64_t *out, int cap, int *n, char *msg, size_t msglen) {
    *n = 0;
    const char *q = s;
    while (*q) {
        char *end;
        long long x = strtoll(q, &end, 10);
        if (end == q) PERR("%s: '%s' is not a comma-separated list of integers", key, s);
        if (*n == cap) PERR("%s: more than %d entries", key, cap);
        out[(*n)++] = x;
        if (*end == ',') q = end + 1;
        else if (*end == 0) q = end;
        else PERR("%s: '%s' is not a comma-separated list of integers", key, s);
    }
    return 0;
}

int fc_v3_parse_key(const char *key, char **tok, int n, fc_case *c, fc_v3_seen *seen, char *msg, size_t msglen) {
    int id = -1;
    for (int k = 0; k < (int)(sizeof v3_keys / sizeof v3_keys[0]); k++)
        if (!strcmp(key, v3_keys[k])) id = k;
    if (id < 0 && !strncmp(key, "block_table.", 12)) {
        char *end;
        long row = strtol(key + 12, &end, 10);
        if (end == key + 12 || *end || row < 0 || row >= FC_MAX_SEQS)
            PERR("%s: the row must be a sequence number in [0, %d)", key, FC_MAX_SEQS);
        if ((seen->rows >> row) & 1) PERR("%s given twice", key);
        seen->rows |= 1ull << row;
        if (n != 1) PERR("%s expects one comma-separated list of page numbers", key);
        int64_t vals[FC_MAX_TABLE];
        int cnt;
        if (parse_list(key, tok[0], vals, FC_MAX_TABLE, &cnt, msg, msglen)) return -1;
        if (cnt > FC_MAX_PAGES) PERR("%s: more than %d pages per sequence", key, FC_MAX_PAGES);
        if (c->v3.max_pages == 0) c->v3.max_pages = cnt;
        if (cnt != c->v3.max_pages) PERR("%s has %d entries, an earlier row %lld: every row has max_pages entries", key,
                                         cnt, (long long)c->v3.max_pages);
        if ((row + 1) * cnt > FC_MAX_TABLE) PERR("%s: the table exceeds %d entries", key, FC_MAX_TABLE);
        for (int j = 0; j < cnt; j++) {
            if (vals[j] < INT32_MIN || vals[j] > INT32_MAX) PERR("%s: entry %d is not an int32", key, j);
            c->v3.block_table[row * cnt + j] = (int32_t)vals[j];
        }
        return 1;
    }
    if (id < 0) return 0;
    if ((seen->keys >> id) & 1) PERR("%s given twice", key);
    seen->keys |= 1ull << id;
    switch (id) {
    case V3K_SEQLENS_Q: case V3K_SEQLENS_K: case V3K_SEQUSED: {
        if (n != 1) PERR("%s expects one comma-separated list (one entry per sequence)", key);
        int64_t *dst = id == V3K_SEQLENS_Q ? c->v3.seqlens_q : id == V3K_SEQLENS_K ? c->v3.seqlens_k : c->v3.seqused_k;
        int cnt;
        if (parse_list(key, tok[0], dst, FC_MAX_SEQS, &cnt, msg, msglen)) return -1;
        if (id == V3K_SEQLENS_Q) c->v3.varlen_q = 1;
        else if (id == V3K_SEQLENS_K) c->v3.varlen_k = 1;
        else c->v3.has_seqused = 1;
        seen->count[id] = cnt;
        return 1;
    }
    case V3K_SOFTCAP: {
        char *end;
        double x = n == 1 ? strtod(tok[0], &end) : 0;
        if (n != 1 || end == tok[0] || *end || !isfinite(x) || x < 0 || !isfinite((float)x))
            PERR("softcap expects one finite number >= 0 (0: off)");
        c->p.softcap = (float)x;
        return 1;
    }
    case V3K_SINKS: {
        int k = fc_dist_by_name(tok[0]);
        if (k < 0) PERR("sinks: unknown distribution '%s' (gaussian, large, ...)", tok[0]);
        c->v3.sinks.kind = (fc_dist_kind)k;
        c->v3.sinks.amp = 0;
        for (int i = 1; i < n; i++) {
            char *end;
            if (strncmp(tok[i], "amp=", 4)) PERR("sinks: unknown option '%s' (amp=<x>)", tok[i]);
            c->v3.sinks.amp = strtod(tok[i] + 4, &end);
            if (*end || !isfinite(c->v3.sinks.amp)) PERR("sinks: amp '%s' is not a number", tok[i] + 4);
        }
        c->p.has_sinks = 1;
        return 1;
    }
    case V3K_PAGED: {
        int64_t v[3];
        if (n != 3) PERR("paged expects: page_size num_pages table_pad");
        for (int i = 0; i < 3; i++) {
            char *end;
            v[i] = strtoll(tok[i], &end, 10);
            if (end == tok[i] || *end || v[i] < 0) PERR("paged: '%s' is not an integer >= 0", tok[i]);
        }
        if (v[0] < 1) PERR("paged: page_size must be >= 1");
        c->p.page_size = v[0];
        c->v3.num_pages = v[1];
        c->v3.table_pad = v[2];
        return 1;
    }
    }
    return 0;
}

int fc_v3_parse_end(fc_case *c, const fc_v3_seen *seen, char *msg, size_t msglen) {
    const int64_t B = c->p.batch;
    static const int list_ids[3] = {V3K_SEQLENS_Q, V3K_SEQLENS_K, V3K_SEQUSED};
    for (int k = 0; k < 3; k++)
        if (((seen->keys >> list_ids[k]) & 1) && seen->count[list_ids[k]] != B)
            PERR("%s has %d entries but batch is %lld (one per sequence)", v3_keys[list_ids[k]],
                 seen->count[list_ids[k]], (long long)B);
    int paged = (seen->keys >> V3K_PAGED) & 1;
    if (!paged && seen->rows) PERR("block_table.<b> given without 'paged = page_size num_pages table_pad'");
    if (paged) {
        uint64_t want = B >= 64 ? ~0ull : ((1ull << B) - 1);
        if (seen->rows != want) PERR("paged: give block_table.0 .. block_table.%lld (one row per sequence)", (long long)(B - 1));
    }
    return 0;
}
#undef PERR

static void list_out(char *tmp, size_t cap, const int64_t *x, int64_t n) {
    size_t len = 0;
    tmp[0] = 0;
    for (int64_t i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(tmp + len, cap - len, "%s%lld", i ? "," : "", (long long)x[i]);
}

size_t fc_v3_write(const fc_case *c, char *buf, size_t buflen) {
    const fc_v3 *v = &c->v3;
    const int64_t B = c->p.batch < FC_MAX_SEQS ? c->p.batch : FC_MAX_SEQS;
    char tmp[1024], line[1100];
    size_t len = 0;
#define OUT(...)                                                                     \
    do {                                                                             \
        int k_ = snprintf(line, sizeof line, __VA_ARGS__);                           \
        if (k_ > 0) {                                                                \
            if (buf && len < buflen) snprintf(buf + len, buflen - len, "%s", line); \
            len += (size_t)k_;                                                       \
        }                                                                            \
    } while (0)
    if (v->varlen_q) { list_out(tmp, sizeof tmp, v->seqlens_q, B); OUT("seqlens_q = %s\n", tmp); }
    if (v->varlen_k) { list_out(tmp, sizeof tmp, v->seqlens_k, B); OUT("seqlens_k = %s\n", tmp); }
    if (v->has_seqused) { list_out(tmp, sizeof tmp, v->seqused_k, B); OUT("seqused_k = %s\n", tmp); }
    if (c->p.softcap != 0.0f) OUT("softcap = %.9g\n", (double)c->p.softcap);
    if (c->p.has_sinks) OUT("sinks = %s amp=%.17g\n", fc_dist_name(v->sinks.kind), v->sinks.amp);
    if (c->p.page_size >= 1) {
        OUT("paged = %lld %lld %lld   # page_size num_pages table_pad\n", (long long)c->p.page_size,
            (long long)v->num_pages, (long long)v->table_pad);
        for (int64_t b = 0; b < B; b++) {
            int64_t row[FC_MAX_TABLE];
            int64_t m = v->max_pages;
            for (int64_t j = 0; j < m && b * m + j < FC_MAX_TABLE; j++) row[j] = v->block_table[b * m + j];
            list_out(tmp, sizeof tmp, row, m);
            OUT("block_table.%lld = %s\n", (long long)b, tmp);
        }
    }
#undef OUT
    if (buf && buflen && len >= buflen) buf[buflen - 1] = 0;
    return len;
}

int fc_v3_equal(const fc_case *a, const fc_case *b) {
    const fc_v3 *x = &a->v3, *y = &b->v3;
    if (a->p.softcap != b->p.softcap || a->p.has_sinks != b->p.has_sinks || a->p.page_size != b->p.page_size) return 0;
    if (x->varlen_q != y->varlen_q || x->varlen_k != y->varlen_k || x->has_seqused != y->has_seqused) return 0;
    const int64_t B = a->p.batch < FC_MAX_SEQS ? a->p.batch : FC_MAX_SEQS;
    for (int64_t i = 0; i < B; i++) {
        if (x->varlen_q && x->seqlens_q[i] != y->seqlens_q[i]) return 0;
        if (x->varlen_k && x->seqlens_k[i] != y->seqlens_k[i]) return 0;
        if (x->has_seqused && x->seqused_k[i] != y->seqused_k[i]) return 0;
    }
    if (a->p.has_sinks && (x->sinks.kind != y->sinks.kind || x->sinks.amp != y->sinks.amp)) return 0;
    if (a->p.page_size >= 1) {
        if (x->num_pages != y->num_pages || x->max_pages != y->max_pages || x->table_pad != y->table_pad) return 0;
        int64_t n = B * x->max_pages;
        if (n > FC_MAX_TABLE) n = FC_MAX_TABLE;
        for (int64_t i = 0; i < n; i++)
            if (x->block_table[i] != y->block_table[i]) return 0;
    }
    return 1;
}
