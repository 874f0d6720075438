/* bench.c: the CUDA backend's benchmark, forward and backward (prefix bench_).
 *
 * For every configuration of the grid (pass, head dim D, sequence length S, causal, dtype):
 *   1. check: the same D, dtype, causal and kernel policy on one (batch, head) against the oracle
 *      (oracle/oracle.h, the backend's precision profile): forward at S keys with 64 sampled
 *      rows, backward at min(S, 1024) with 64 sampled dQ rows and 16 dK/dV columns. A failed
 *      check marks the row FAIL and the program exits 1 (its timings are still printed).
 *   2. timing, CUDA events on one stream, W warm-up calls, then N timed iterations, median:
 *        call     events around the whole call as a user sees it (host checks, launches, the
 *                 synchronization inside the call), the stream idle before it;
 *        kernels  the same call queued behind a 300 us spin kernel (bench_gpu.cu), so the host
 *                 work before the first launch is hidden: the GPU time of the kernels (plus the
 *                 host latency after an internal synchronization: the backward reads its screen
 *                 back for fp16 and for causal calls).
 *      Inputs rotate between two sets (each tensor is B*S*H*D = tokens * hidden elements, 64 MiB
 *      at the defaults, more than the L2), uniform in [-1, 1).
 *   3. with --torch (default: the torch_bench.py next to this program when python3 and it are
 *      found): `python3 torch_bench.py` with the same grid times PyTorch's SDPA FLASH_ATTENTION and
 *      CUDNN_ATTENTION backends the same two ways (torch.cuda._sleep as the spin), and the table
 *      is merged.
 * Shapes: B = tokens / S, H = hidden / D (Hkv = H), BSHD contiguous, causal top-left.
 * FLOPs: forward 4 B H S^2 D (halved for causal), backward 2.5x the forward's. TFLOP/s from the
 * kernels time.
 *
 * usage: bench [--pass fwd|bwd|both] [--d LIST] [--s LIST] [--causal LIST] [--dtype LIST]
 *              [--iters N] [--warmup N] [--tokens N] [--hidden N] [--deterministic]
 *              [--policy default|sm80|nows|nobws|fam1|perseq|decgen] [--no-check] [--torch FILE | --no-torch] [--out FILE] [--v3]
 *              [--decode] [--pick LIST] [--split N] [--split-list LIST] [--pages-in-order]
 * --v3: instead of the grid, the contract-v3 problems (bench_v3: packed varlen, paged K/V, decode at
 *       Sq = 1 with caches of 4k..128k keys) beside torch's counterparts, one table; then the varlen
 *       backward (bench_v3_bwd) beside FlashAttention-2's varlen backward and cuDNN's, a second table
 *       (not with --pass fwd; --pass bwd: that table alone).
 * --decode: as --v3 with the decode problems only (v3_decode_probs: B 1 and 8, GQA 32/8 and
 *       MHA 32/32, caches 4k..128k, D = 128, bf16), beside the SDPA backends.
 * --pick LIST: only these problems of the --v3 / --decode list (0-based indices).
 * --split N: the decode split count pinned (kernels/cuda/testing.h fwd_split; -1: no split).
 * --split-list LIST: one split count per picked problem, in order (0: the host's rule; -1: none;
 *       n: pinned as --split n), e.g. a previous split rule's counts beside the current one.
 * --pages-in-order: paged problems with the block table 0, 1, 2, ... instead of shuffled pages
 *       (what the page order costs: the same kernels and addresses' layout, sequential pages).
 * The --v3 / --decode tables time both ways (call and kernels) and print the sync floor: the
 * latency of returning from a synchronous call, part of our kernels time, not of torch's.
 * LIST: comma-separated (--d 64,128 --s 512,2048 --causal 0,1 --dtype bf16,fp16).
 * --policy sm80: the mma.sync kernels everywhere (kernels/cuda/testing.h), for comparisons;
 * --policy nows: the plain wgmma forward instead of the warp-specialized one;
 * --policy nobws: the 2h Hopper backward dK/dV kernel instead of the warp-specialized one;
 * --policy fam1: the 64-row tile family everywhere (decode on it instead of the 16-row tile);
 * --policy decgen: the decode tile on the general mma.sync kernel (fwd_sm80.cu) instead of
 *       fwd_decode.cu's kernel (same tile, grid and arithmetic).
 * --out FILE: the merged Markdown table is also written there (e.g. bench/RESULTS-<date>.md). */
#define _POSIX_C_SOURCE 200809L /* popen, readlink, access, clock_gettime under -std=c11 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/testing.h"
#include "kernels/flash_api.h"
#include "oracle/oracle.h"

cudaError_t bench_spin(void *st, int us);
cudaError_t bench_fill(uint16_t *x, int64_t n, uint64_t seed, int bf16);

#define BENCH_MAXL 16
#define BENCH_SPIN_US 300

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "bench: %s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct {
    int n;
    int v[BENCH_MAXL];
} bench_list;

typedef struct {
    int fwd, bwd;
    bench_list d, s, causal, dtype; /* dtype: 1 bf16, 0 fp16 */
    int iters, warmup, deterministic, check, v3;
    bench_list pick; /* --pick: indices into the --v3 / --decode problem list (n = 0: all) */
    int pages_in_order; /* --pages-in-order: paged problems read pages 0, 1, 2, ... (no shuffle) */
    int split_list[32], n_split_list; /* --split-list: per picked problem, testing.h fwd_split */
    int64_t tokens, hidden;
    fa_cuda_policy pol;
    const char *policy_name, *torch, *out;
} bench_opts;

/* one row of the table: ours, then torch's flash and cudnn (ms < 0: not measured / failed) */
typedef struct {
    int bwd, d, s, causal, bf16;
    double call_ms, kern_ms, flops;
    double flash_call, flash_kern, cudnn_call, cudnn_kern;
    int check;           /* 1 pass, 0 fail, -1 not run */
    double check_ratio;  /* worst err/bound of the check */
} bench_row;

static int parse_list(const char *s, bench_list *l, int is_dtype) {
    l->n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (l->n == BENCH_MAXL) return 0;
        if (is_dtype) {
            if (!strcmp(tok, "bf16")) l->v[l->n++] = 1;
            else if (!strcmp(tok, "fp16")) l->v[l->n++] = 0;
            else return 0;
        } else {
            char *end;
            long x = strtol(tok, &end, 10);
            if (*end || x < 0) return 0;
            l->v[l->n++] = (int)x;
        }
    }
    return l->n > 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static fa_tensor bshd(void *ptr, int64_t S, int64_t H, int64_t D) {
    fa_tensor t;
    t.ptr = ptr;
    t.stride[0] = S * H * D;
    t.stride[1] = H * D;
    t.stride[2] = D;
    t.stride[3] = 1;
    return t;
}

static fa_problem problem(int64_t B, int64_t S, int64_t H, int64_t D, int bf16, int causal) {
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.batch = B; p.seqlen_q = S; p.seqlen_k = S; p.heads_q = H; p.heads_kv = H;
    p.head_dim_qk = D; p.head_dim_v = D;
    p.dtype = bf16 ? FA_BF16 : FA_F16;
    p.softmax_scale = 0.f;
    p.causal = causal ? FA_CAUSAL_TOP_LEFT : FA_CAUSAL_NONE;
    p.window_left = -1; p.window_right = -1;
    p.window_align = FA_ALIGN_TOP_LEFT;
    return p;
}

// ----------------------------------------------------------------------------
// the check: one (batch, head) against the oracle

static void host_fill(uint16_t *x, int64_t n, uint64_t seed, fa_dtype dt) {
    uint64_t z = seed;
    for (int64_t i = 0; i < n; i++) {
        z += 0x9E3779B97F4A7C15ull;
        uint64_t y = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        y = (y ^ (y >> 27)) * 0x94D049BB133111EBull;
        y ^= y >> 31;
        x[i] = orc_encode((double)(y >> 11) * 0x1p-53 * 2.0 - 1.0, dt);
    }
}

/* 1 pass, 0 fail; *ratio: the worst err/bound over the checked outputs. */
static int bench_check(const bench_opts *o, int bwd, int64_t S, int64_t D, int bf16, int causal, double *ratio) {
    const int64_t Sc = bwd && S > 1024 ? 1024 : S, n = Sc * D;
    const fa_problem pr = problem(1, Sc, 1, D, bf16, causal);
    const fa_precision prof = fa_backend_cuda()->precision;
    uint16_t *h[8]; /* q k v do o dq dk dv */
    float *hlse = malloc((size_t)Sc * 4);
    void *d[8];
    float *dlse;
    for (int x = 0; x < 8; x++) {
        h[x] = malloc((size_t)n * 2);
        CK(cudaMalloc(&d[x], (size_t)n * 2));
    }
    CK(cudaMalloc((void **)&dlse, (size_t)Sc * 4));
    for (int x = 0; x < 4; x++) {
        host_fill(h[x], n, 0x5eed0000u + (uint64_t)x * 7919u + (uint64_t)S * 31u + (uint64_t)D, pr.dtype);
        CK(cudaMemcpy(d[x], h[x], (size_t)n * 2, cudaMemcpyHostToDevice));
    }
    fa_fwd_args fa;
    memset(&fa, 0, sizeof fa);
    fa.p = pr;
    fa.q = bshd(d[0], Sc, 1, D); fa.k = bshd(d[1], Sc, 1, D); fa.v = bshd(d[2], Sc, 1, D);
    fa.o = bshd(d[4], Sc, 1, D);
    fa.lse.ptr = dlse; fa.lse.stride[0] = Sc; fa.lse.stride[1] = Sc; fa.lse.stride[2] = 1;
    fa_error err;
    int ok = 1;
    *ratio = 0;
    if (fa_cuda_forward_policy(&fa, &o->pol, &err) != FA_OK) {
        fprintf(stderr, "bench check: forward: %s\n", err.msg);
        ok = 0;
    }
    CK(cudaMemcpy(h[4], d[4], (size_t)n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hlse, dlse, (size_t)Sc * 4, cudaMemcpyDeviceToHost));
    orc_options opt;
    orc_options_init(&opt);
    opt.max_rows = 64;
    opt.max_cols = 16;
    opt.baseline = 0;
    fa_fwd_args hf = fa;
    hf.q.ptr = h[0]; hf.k.ptr = h[1]; hf.v.ptr = h[2]; hf.o.ptr = h[4]; hf.lse.ptr = hlse;
    if (ok && !bwd) {
        orc_fwd_result res;
        orc_stats so, sl;
        if (orc_fwd(&hf, &prof, &opt, &res, &err) != FA_OK ||
            orc_compare_fwd(&res, &hf.o, &hf.lse, &so, &sl, &err) != FA_OK) {
            fprintf(stderr, "bench check: oracle: %s\n", err.msg);
            ok = 0;
        } else {
            ok = so.failed == 0 && sl.failed == 0 && so.checked > 0;
            *ratio = so.worst_ratio > sl.worst_ratio ? so.worst_ratio : sl.worst_ratio;
            orc_fwd_free(&res);
        }
    } else if (ok) {
        fa_bwd_args ba;
        memset(&ba, 0, sizeof ba);
        ba.p = pr;
        ba.q = fa.q; ba.k = fa.k; ba.v = fa.v; ba.o = fa.o; ba.lse = fa.lse;
        ba.dout = bshd(d[3], Sc, 1, D);
        ba.dq = bshd(d[5], Sc, 1, D); ba.dk = bshd(d[6], Sc, 1, D); ba.dv = bshd(d[7], Sc, 1, D);
        ba.deterministic = o->deterministic;
        if (fa_cuda_backward_policy(&ba, &o->pol, &err) != FA_OK) {
            fprintf(stderr, "bench check: backward: %s\n", err.msg);
            ok = 0;
        } else {
            for (int x = 5; x < 8; x++) CK(cudaMemcpy(h[x], d[x], (size_t)n * 2, cudaMemcpyDeviceToHost));
            fa_bwd_args hb = ba;
            hb.q.ptr = h[0]; hb.k.ptr = h[1]; hb.v.ptr = h[2]; hb.dout.ptr = h[3]; hb.o.ptr = h[4];
            hb.lse.ptr = hlse; hb.dq.ptr = h[5]; hb.dk.ptr = h[6]; hb.dv.ptr = h[7];
            orc_bwd_result res;
            orc_stats s3[3];
            if (orc_bwd(&hb, &prof, &opt, &res, &err) != FA_OK ||
                orc_compare_bwd(&res, &hb.dq, &hb.dk, &hb.dv, &s3[0], &s3[1], &s3[2], &err) != FA_OK) {
                fprintf(stderr, "bench check: oracle: %s\n", err.msg);
                ok = 0;
            } else {
                for (int x = 0; x < 3; x++) {
                    ok = ok && s3[x].failed == 0 && s3[x].checked > 0;
                    if (s3[x].worst_ratio > *ratio) *ratio = s3[x].worst_ratio;
                }
                orc_bwd_free(&res);
            }
        }
    }
    for (int x = 0; x < 8; x++) {
        free(h[x]);
        CK(cudaFree(d[x]));
    }
    free(hlse);
    CK(cudaFree(dlse));
    return ok;
}

// ----------------------------------------------------------------------------
// timing

typedef struct {
    uint16_t *q[2], *k[2], *v[2], *o[2], *dout[2], *dq[2], *dk[2], *dv[2];
    float *lse[2];
} bench_bufs;

/* One configuration: ours, both timings. Returns 0 when a call failed. */
static int bench_time(const bench_opts *o, bench_bufs *bf, bench_row *r, cudaStream_t st) {
    const int64_t S = r->s, D = r->d, B = o->tokens / S, H = o->hidden / D;
    const fa_problem pr = problem(B, S, H, D, r->bf16, r->causal);
    fa_fwd_args fa[2];
    fa_bwd_args ba[2];
    for (int x = 0; x < 2; x++) {
        memset(&fa[x], 0, sizeof fa[x]);
        fa[x].p = pr;
        fa[x].q = bshd(bf->q[x], S, H, D); fa[x].k = bshd(bf->k[x], S, H, D); fa[x].v = bshd(bf->v[x], S, H, D);
        fa[x].o = bshd(bf->o[x], S, H, D);
        fa[x].lse.ptr = bf->lse[x]; fa[x].lse.stride[0] = H * S; fa[x].lse.stride[1] = S; fa[x].lse.stride[2] = 1;
        fa[x].stream = st;
        memset(&ba[x], 0, sizeof ba[x]);
        ba[x].p = pr;
        ba[x].q = fa[x].q; ba[x].k = fa[x].k; ba[x].v = fa[x].v; ba[x].o = fa[x].o; ba[x].lse = fa[x].lse;
        ba[x].dout = bshd(bf->dout[x], S, H, D);
        ba[x].dq = bshd(bf->dq[x], S, H, D); ba[x].dk = bshd(bf->dk[x], S, H, D); ba[x].dv = bshd(bf->dv[x], S, H, D);
        ba[x].deterministic = o->deterministic;
        ba[x].stream = st;
    }
    fa_error err;
    if (r->bwd) /* O and LSE of both input sets */
        for (int x = 0; x < 2; x++)
            if (fa_cuda_forward_policy(&fa[x], &o->pol, &err) != FA_OK) {
                fprintf(stderr, "bench: forward D=%d S=%d: %s\n", r->d, r->s, err.msg);
                return 0;
            }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double *tc = malloc(sizeof(double) * (size_t)o->iters), *tk = malloc(sizeof(double) * (size_t)o->iters);
    int ok = 1;
    for (int it = -o->warmup; ok && it < o->iters; it++) {
        for (int mode = 0; mode < 2 && ok; mode++) { /* 0: call, 1: kernels (behind the spin) */
            const int x = (it + o->warmup) & 1;
            CK(cudaStreamSynchronize(st));
            if (mode == 1) CK(bench_spin(st, BENCH_SPIN_US));
            CK(cudaEventRecord(e0, st));
            fa_status s = r->bwd ? fa_cuda_backward_policy(&ba[x], &o->pol, &err)
                                 : fa_cuda_forward_policy(&fa[x], &o->pol, &err);
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            if (s != FA_OK) {
                fprintf(stderr, "bench: %s D=%d S=%d: %s\n", r->bwd ? "backward" : "forward", r->d, r->s, err.msg);
                ok = 0;
                break;
            }
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (it >= 0) (mode ? tk : tc)[it] = ms;
        }
    }
    if (ok) {
        r->call_ms = median(tc, o->iters);
        r->kern_ms = median(tk, o->iters);
    }
    free(tc);
    free(tk);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return ok;
}

// ----------------------------------------------------------------------------
// torch companion and the table

static const char *list_str(const bench_list *l, int is_dtype, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < l->n && k + 12 < n; i++) {
        if (is_dtype) k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? "," : "", l->v[i] ? "bf16" : "fp16");
        else k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? "," : "", l->v[i]);
    }
    return buf;
}

/* Run the torch companion with the same grid; fill the flash / cudnn columns. Returns 0 when
 * it could not run (the columns stay empty and the table says so). */
static int bench_torch(const bench_opts *o, bench_row *rows, int nrows) {
    char ds[64], ss[128], cs[16], ts[32], cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 '%s' --pass %s --d %s --s %s --causal %s --dtype %s --iters %d --warmup %d --tokens %lld "
             "--hidden %lld --spin-us %d",
             o->torch, o->fwd && o->bwd ? "both" : (o->fwd ? "fwd" : "bwd"), list_str(&o->d, 0, ds, sizeof ds),
             list_str(&o->s, 0, ss, sizeof ss), list_str(&o->causal, 0, cs, sizeof cs),
             list_str(&o->dtype, 1, ts, sizeof ts), o->iters, o->warmup, (long long)o->tokens, (long long)o->hidden,
             BENCH_SPIN_US);
    fprintf(stderr, "bench: %s\n", cmd);
    fflush(NULL);
    FILE *f = popen(cmd, "r");
    if (!f) return 0;
    char line[512];
    int got = 0;
    while (fgets(line, sizeof line, f)) {
        char pass[8], dt[8], be[16];
        int d, s, c;
        double call, kern;
        if (sscanf(line, "%7s %d %d %d %7s %15s %lf %lf", pass, &d, &s, &c, dt, be, &call, &kern) != 8) {
            fputs(line, stderr); /* torch's own messages (device, versions, a rejected shape) */
            continue;
        }
        for (int i = 0; i < nrows; i++) {
            bench_row *r = &rows[i];
            if (r->bwd != !strcmp(pass, "bwd") || r->d != d || r->s != s || r->causal != c ||
                r->bf16 != !strcmp(dt, "bf16"))
                continue;
            if (!strcmp(be, "flash")) { r->flash_call = call; r->flash_kern = kern; got++; }
            if (!strcmp(be, "cudnn")) { r->cudnn_call = call; r->cudnn_kern = kern; got++; }
        }
    }
    int rc = pclose(f);
    if (rc != 0) fprintf(stderr, "bench: the torch companion exited with status %d\n", rc);
    return got > 0;
}

static void fmt_ms(char *b, size_t n, double call, double kern) {
    if (call < 0) snprintf(b, n, "-");
    else snprintf(b, n, "%.3f / %.3f", call, kern);
}

static void fmt_tf(char *b, size_t n, double flops, double ms) {
    if (ms <= 0) snprintf(b, n, "-");
    else snprintf(b, n, "%.1f", flops / (ms * 1e-3) / 1e12);
}

static void fmt_ratio(char *b, size_t n, double ours, double theirs) {
    if (ours <= 0 || theirs <= 0) snprintf(b, n, "-");
    else snprintf(b, n, "%.2f", theirs / ours);
}

static void print_table(FILE *f, const bench_opts *o, const bench_row *rows, int nrows) {
    struct cudaDeviceProp prop;
    int dev = 0;
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&prop, dev);
    fprintf(f, "Device: %s (%d SMs). Grid: tokens %lld, hidden %lld, causal top-left, BSHD; backward mode: %s; "
               "kernel policy: %s; median of %d after %d warm-up.\n",
            prop.name, prop.multiProcessorCount, (long long)o->tokens, (long long)o->hidden,
            o->deterministic ? "deterministic" : "default", o->policy_name, o->iters, o->warmup);
    fprintf(f, "ms = call / kernels (bench.c); TFLOP/s and ratios from the kernels time; x / y = speed of "
               "cuda relative to y (> 1: cuda faster).\n\n");
    fprintf(f, "| pass | D | S | causal | dtype | check (err/bound) | cuda ms | flash ms | cudnn ms | cuda TFLOP/s "
               "| flash TFLOP/s | cudnn TFLOP/s | cuda / flash | cuda / cudnn |\n");
    fprintf(f, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nrows; i++) {
        const bench_row *r = &rows[i];
        char chk[32], m0[32], m1[32], m2[32], t0[16], t1[16], t2[16], r1[16], r2[16];
        if (r->check < 0) snprintf(chk, sizeof chk, "not run");
        else snprintf(chk, sizeof chk, "%s %.3g", r->check ? "ok" : "FAIL", r->check_ratio);
        fmt_ms(m0, sizeof m0, r->call_ms, r->kern_ms);
        fmt_ms(m1, sizeof m1, r->flash_call, r->flash_kern);
        fmt_ms(m2, sizeof m2, r->cudnn_call, r->cudnn_kern);
        fmt_tf(t0, sizeof t0, r->flops, r->kern_ms);
        fmt_tf(t1, sizeof t1, r->flops, r->flash_kern);
        fmt_tf(t2, sizeof t2, r->flops, r->cudnn_kern);
        fmt_ratio(r1, sizeof r1, r->kern_ms, r->flash_kern);
        fmt_ratio(r2, sizeof r2, r->kern_ms, r->cudnn_kern);
        fprintf(f, "| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r->bwd ? "bwd" : "fwd",
                r->d, r->s, r->causal ? "yes" : "no", r->bf16 ? "bf16" : "fp16", chk, m0, m1, m2, t0, t1, t2, r1, r2);
    }
}

// ----------------------------------------------------------------------------
// contract v3 problems (--v3): varlen, paged, decode, beside torch_bench.py --v3 in one run

/* kind 0: packed varlen batch (cu_seqlens_q = cu_seqlens_k, lengths v3_len), Sq = Sk per sequence;
 * kind 1: paged K/V (B sequences of S keys, page_size pages in a shuffled table), Sq = Sk = S;
 * kind 2: decode, Sq = 1 against Sk keys (dense K/V; page > 0: paged).
 * torch_bench.py --v3 gets the same list (the spec string) and times its counterparts: kind 0:
 * aten._flash_attention_forward with cu_seqlens (FA2 varlen) and cuDNN; kind 1: SDPA flash / cuDNN
 * on the dense K/V of the same problem; kind 2: SDPA flash / cuDNN / efficient at Sq = 1. */
typedef struct {
    int kind, B, Sq, Sk, Hq, Hkv, D, causal, page;
} v3_prob;

/* varlen lengths: deterministic, 256..4096, the same formula in torch_bench.py */
static int v3_len(int b) { return 256 + (b * 1103 + 517) % 3841; }

/* the varlen lengths of a problem (kinds 0 and 3): Sq == 0: v3_len (256..4096); Sq > 0: many short
 * sequences, 1..Sq (torch_bench.py v3_seqlen) */
static int v3_seqlen(int Sq, int b) { return Sq > 0 ? 1 + (b * 1103 + 517) % Sq : v3_len(b); }

static const v3_prob v3_probs[] = {
    {0, 16, 0, 0, 16, 16, 128, 0, 0}, {0, 16, 0, 0, 16, 16, 128, 1, 0}, {0, 16, 0, 0, 32, 8, 128, 1, 0},
    {0, 64, 512, 0, 16, 16, 128, 1, 0},
    {1, 8, 4096, 4096, 16, 16, 128, 1, 0}, {1, 8, 4096, 4096, 16, 16, 128, 1, 256},
    {1, 8, 4096, 4096, 16, 16, 128, 1, 64}, {1, 8, 4096, 4096, 16, 16, 128, 1, 16},
    {2, 8, 1, 4096, 32, 8, 128, 0, 0}, {2, 8, 1, 16384, 32, 8, 128, 0, 0}, {2, 8, 1, 65536, 32, 8, 128, 0, 0},
    {2, 8, 1, 131072, 32, 8, 128, 0, 0}, {2, 8, 1, 4096, 16, 16, 128, 0, 0}, {2, 8, 1, 32768, 16, 16, 128, 0, 0},
    {2, 8, 1, 131072, 16, 16, 128, 0, 0}, {2, 8, 1, 16384, 32, 8, 128, 0, 64}, {2, 8, 1, 131072, 32, 8, 128, 0, 64},
};
#define V3_N ((int)(sizeof v3_probs / sizeof v3_probs[0]))

/* --decode: decode only (kind 2, Sq = 1, D = 128): B = 1 and 8, GQA 32/8 and MHA 32/32, caches of
 * 4k, 16k, 64k, 128k keys, and paged (page size 64) at B = 8 GQA. */
static const v3_prob v3_decode_probs[] = {
    {2, 1, 1, 4096, 32, 8, 128, 0, 0},    {2, 1, 1, 16384, 32, 8, 128, 0, 0},    {2, 1, 1, 65536, 32, 8, 128, 0, 0},
    {2, 1, 1, 131072, 32, 8, 128, 0, 0},  {2, 8, 1, 4096, 32, 8, 128, 0, 0},     {2, 8, 1, 16384, 32, 8, 128, 0, 0},
    {2, 8, 1, 65536, 32, 8, 128, 0, 0},   {2, 8, 1, 131072, 32, 8, 128, 0, 0},   {2, 1, 1, 4096, 32, 32, 128, 0, 0},
    {2, 1, 1, 16384, 32, 32, 128, 0, 0},  {2, 1, 1, 65536, 32, 32, 128, 0, 0},   {2, 1, 1, 131072, 32, 32, 128, 0, 0},
    {2, 8, 1, 4096, 32, 32, 128, 0, 0},   {2, 8, 1, 16384, 32, 32, 128, 0, 0},   {2, 8, 1, 65536, 32, 32, 128, 0, 0},
    {2, 8, 1, 131072, 32, 32, 128, 0, 0}, {2, 8, 1, 16384, 32, 8, 128, 0, 64},   {2, 8, 1, 131072, 32, 8, 128, 0, 64},
};
#define V3_DECODE_N ((int)(sizeof v3_decode_probs / sizeof v3_decode_probs[0]))
#define V3_MAXN (V3_N > V3_DECODE_N ? V3_N : V3_DECODE_N)

static void v3_spec(const v3_prob *p, char *b, size_t n) {
    snprintf(b, n, "%d:%d:%d:%d:%d:%d:%d:%d:%d", p->kind, p->B, p->Sq, p->Sk, p->Hq, p->Hkv, p->D, p->causal, p->page);
}

/* The latency a synchronous call adds to the kernels timing (which torch's asynchronous calls
 * do not pay): events around an internal cudaStreamSynchronize of a stream whose last work is
 * the spin, i.e. the time from the spin's end to the host's next record reaching the GPU. */
static double bench_sync_floor(const bench_opts *o, cudaStream_t st) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double t[64];
    const int n = o->iters < 64 ? o->iters : 64;
    for (int it = -2; it < n; it++) {
        CK(cudaStreamSynchronize(st));
        CK(bench_spin(st, BENCH_SPIN_US));
        CK(cudaEventRecord(e0, st));
        CK(cudaStreamSynchronize(st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (it >= 0) t[it] = ms;
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return median(t, n);
}

/* The torch companion of a --v3 table: runs torch_bench.py with FLAG (--v3, --v3bwd) over probs
 * and files each result line "TAG idx backend ms [call_ms]" under its backend: cols[c][idx] = ms
 * for names[c]; call_ms (when given and tcall != NULL) into tcall[idx], the smallest kept. Other
 * lines go to stderr. */
static void v3_torch(const bench_opts *o, const char *flag, const char *tag, const v3_prob *probs, int nprob,
                     const char *const *names, double *const *cols, int ncol, double *tcall) {
    char cmd[4096];
    size_t n = (size_t)snprintf(cmd, sizeof cmd, "python3 '%s' %s --iters %d --warmup %d --spin-us %d --probs ",
                                o->torch, flag, o->iters, o->warmup, BENCH_SPIN_US);
    for (int i = 0; i < nprob && n + 64 < sizeof cmd; i++) {
        char sp[96];
        v3_spec(&probs[i], sp, sizeof sp);
        n += (size_t)snprintf(cmd + n, sizeof cmd - n, "%s%s", i ? "," : "", sp);
    }
    fprintf(stderr, "bench: %s\n", cmd);
    fflush(NULL);
    FILE *f = popen(cmd, "r");
    char line[512], fmt[32];
    snprintf(fmt, sizeof fmt, "%s %%d %%15s %%lf %%lf", tag);
    while (f && fgets(line, sizeof line, f)) {
        int idx;
        char be[16];
        double ms, cms = -1;
        if (sscanf(line, fmt, &idx, be, &ms, &cms) < 3 || idx < 0 || idx >= nprob) {
            fputs(line, stderr);
            continue;
        }
        for (int c = 0; c < ncol; c++)
            if (!strcmp(be, names[c])) cols[c][idx] = ms;
        if (tcall && cms > 0 && (tcall[idx] < 0 || cms < tcall[idx])) tcall[idx] = cms;
    }
    if (f) pclose(f);
}

/* The fastest of n torch times (<= 0: not measured; -1 if none) and, in r, best / ours with two
 * decimals ("-" when either is missing): > 1 means ours is faster. */
static double v3_best(const double *t, int n, double ours, char *r, size_t rn) {
    double best = -1;
    for (int x = 0; x < n; x++)
        if (t[x] > 0 && (best < 0 || t[x] < best)) best = t[x];
    snprintf(r, rn, "-");
    if (best > 0 && ours > 0) snprintf(r, rn, "%.2f", best / ours);
    return best;
}

static int bench_v3(const bench_opts *o, cudaStream_t st, const v3_prob *probs, int nprob_all) {
    double ours[V3_MAXN], tf[V3_MAXN], gbs[V3_MAXN], fl[V3_MAXN], cu[V3_MAXN], ef[V3_MAXN], cs[V3_MAXN];
    double call[V3_MAXN], tcall[V3_MAXN], gpu[V3_MAXN];
    v3_prob pick[V3_MAXN];
    int nprob = 0, failed = 0;
    for (int i = 0; i < nprob_all; i++) {
        int take = o->pick.n == 0;
        for (int j = 0; j < o->pick.n; j++) take |= o->pick.v[j] == i;
        if (take) pick[nprob++] = probs[i];
    }
    probs = pick;
    const double floor_ms = bench_sync_floor(o, st);
    for (int i = 0; i < nprob; i++) {
        const v3_prob *pp = &probs[i];
        ours[i] = tf[i] = gbs[i] = fl[i] = cu[i] = ef[i] = cs[i] = call[i] = tcall[i] = gpu[i] = -1;
        const int B = pp->B, Hq = pp->Hq, Hkv = pp->Hkv, D = pp->D;
        int32_t cu_s[65];
        int64_t totq, totk, maxs = 0;
        double flops = 0;
        cu_s[0] = 0;
        if (pp->kind == 0) {
            for (int b = 0; b < B; b++) {
                const int L = v3_seqlen(pp->Sq, b);
                cu_s[b + 1] = cu_s[b] + L;
                maxs = L > maxs ? L : maxs;
                flops += 4.0 * Hq * (double)L * L * D * (pp->causal ? 0.5 : 1.0);
            }
            totq = totk = cu_s[B];
        } else {
            totq = (int64_t)B * pp->Sq;
            totk = (int64_t)B * pp->Sk;
            flops = 4.0 * B * Hq * (double)pp->Sq * pp->Sk * D * (pp->causal && pp->kind == 1 ? 0.5 : 1.0);
        }
        const int paged = pp->page > 0;
        const int64_t mpp = paged ? (pp->Sk + pp->page - 1) / pp->page : 0, npages = (int64_t)B * mpp;
        const int64_t kvrows = paged ? npages * pp->page : totk;
        uint16_t *q[2], *k[2], *v[2], *out[2];
        float *lse[2];
        for (int x = 0; x < 2; x++) {
            CK(cudaMalloc((void **)&q[x], (size_t)totq * Hq * D * 2));
            CK(cudaMalloc((void **)&out[x], (size_t)totq * Hq * D * 2));
            CK(cudaMalloc((void **)&k[x], (size_t)kvrows * Hkv * D * 2));
            CK(cudaMalloc((void **)&v[x], (size_t)kvrows * Hkv * D * 2));
            CK(cudaMalloc((void **)&lse[x], (size_t)totq * Hq * 4));
            CK(bench_fill(q[x], totq * Hq * D, 101u + x, 1));
            CK(bench_fill(k[x], kvrows * Hkv * D, 203u + x, 1));
            CK(bench_fill(v[x], kvrows * Hkv * D, 307u + x, 1));
        }
        int32_t *table = NULL;
        if (paged) { /* a shuffled permutation of the pages (LCG, deterministic); --pages-in-order: none */
            table = malloc(sizeof(int32_t) * (size_t)npages);
            for (int64_t x = 0; x < npages; x++) table[x] = (int32_t)x;
            uint64_t z = 12345;
            for (int64_t x = npages - 1; x > 0 && !o->pages_in_order; x--) {
                z = z * 6364136223846793005ull + 1442695040888963407ull;
                const int64_t y = (int64_t)((z >> 33) % (uint64_t)(x + 1));
                const int32_t t = table[x]; table[x] = table[y]; table[y] = t;
            }
        }
        fa_fwd_args fa[2];
        for (int x = 0; x < 2; x++) {
            memset(&fa[x], 0, sizeof fa[x]);
            fa_problem *p = &fa[x].p;
            p->batch = B; p->heads_q = Hq; p->heads_kv = Hkv; p->head_dim_qk = p->head_dim_v = D;
            p->dtype = FA_BF16; p->window_left = p->window_right = -1;
            p->causal = pp->causal ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE;
            fa[x].stream = st;
            if (pp->kind == 0) {
                p->seqlen_q = p->seqlen_k = maxs;
                fa[x].q = (fa_tensor){q[x], {0, (int64_t)Hq * D, D, 1}};
                fa[x].o = (fa_tensor){out[x], {0, (int64_t)Hq * D, D, 1}};
                fa[x].k = (fa_tensor){k[x], {0, (int64_t)Hkv * D, D, 1}};
                fa[x].v = (fa_tensor){v[x], {0, (int64_t)Hkv * D, D, 1}};
                fa[x].lse = (fa_lse){lse[x], {0, totq, 1}};
                fa[x].varlen.cu_seqlens_q = fa[x].varlen.cu_seqlens_k = cu_s;
            } else {
                p->seqlen_q = pp->Sq; p->seqlen_k = pp->Sk;
                fa[x].q = bshd(q[x], pp->Sq, Hq, D);
                fa[x].o = bshd(out[x], pp->Sq, Hq, D);
                if (paged) {
                    p->page_size = pp->page;
                    fa[x].k = (fa_tensor){k[x], {(int64_t)pp->page * Hkv * D, (int64_t)Hkv * D, D, 1}};
                    fa[x].v = (fa_tensor){v[x], {(int64_t)pp->page * Hkv * D, (int64_t)Hkv * D, D, 1}};
                    fa[x].paged.block_table = table;
                    fa[x].paged.table_stride = fa[x].paged.max_pages_per_seq = mpp;
                    fa[x].paged.num_pages = npages;
                } else {
                    fa[x].k = bshd(k[x], pp->Sk, Hkv, D);
                    fa[x].v = bshd(v[x], pp->Sk, Hkv, D);
                }
                fa[x].lse = (fa_lse){lse[x], {(int64_t)Hq * pp->Sq, pp->Sq, 1}};
            }
        }
        cudaEvent_t e0, e1, g0, g1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        CK(cudaEventCreate(&g0));
        CK(cudaEventCreate(&g1));
        /* kernels mode: the call also records g0 / g1 around its GPU work (testing.h fwd_events),
         * timed like torch's asynchronous calls: its "cuda gpu ms" */
        fa_cuda_policy pol = o->pol; /* --split-list: this problem's split count pinned */
        if (i < o->n_split_list) pol.fwd_split = o->split_list[i];
        fa_cuda_policy pol_ev = pol;
        pol_ev.fwd_events[0] = g0;
        pol_ev.fwd_events[1] = g1;
        double *tk = malloc(sizeof(double) * (size_t)o->iters), *tc = malloc(sizeof(double) * (size_t)o->iters);
        double *tg = malloc(sizeof(double) * (size_t)o->iters);
        int ok = 1;
        fa_error err;
        for (int it = -o->warmup; ok && it < o->iters; it++)
            for (int mode = 0; mode < 2 && ok; mode++) { /* 0: call (stream idle), 1: kernels (behind the spin) */
                const int x = (it + o->warmup) & 1;
                CK(cudaStreamSynchronize(st));
                if (mode == 1) CK(bench_spin(st, BENCH_SPIN_US));
                CK(cudaEventRecord(e0, st));
                if (fa_cuda_forward_policy(&fa[x], mode ? &pol_ev : &pol, &err) != FA_OK) {
                    fprintf(stderr, "bench v3 #%d: %s: %s\n", i, err.arg, err.msg);
                    ok = 0;
                }
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (it >= 0) (mode ? tk : tc)[it] = ms;
                if (mode && ok) {
                    CK(cudaEventElapsedTime(&ms, g0, g1));
                    if (it >= 0) tg[it] = ms;
                }
            }
        if (ok) {
            call[i] = median(tc, o->iters);
            ours[i] = median(tk, o->iters);
            gpu[i] = median(tg, o->iters);
            tf[i] = flops / (ours[i] * 1e-3) / 1e12;
            gbs[i] = (double)(pp->kind == 2 ? (int64_t)B * pp->Sk : totk) * Hkv * D * 2 * 2 / (ours[i] * 1e-3) / 1e9;
        } else failed++;
        char sp[96];
        v3_spec(pp, sp, sizeof sp);
        fprintf(stderr, "bench v3 %s: kernels %.4f ms, call %.4f ms\n", sp, ours[i], call[i]);
        free(tk);
        free(tc);
        free(tg);
        free(table);
        CK(cudaEventDestroy(e0));
        CK(cudaEventDestroy(e1));
        CK(cudaEventDestroy(g0));
        CK(cudaEventDestroy(g1));
        for (int x = 0; x < 2; x++) {
            CK(cudaFree(q[x])); CK(cudaFree(out[x])); CK(cudaFree(k[x])); CK(cudaFree(v[x])); CK(cudaFree(lse[x]));
        }
    }
    /* torch companion: the same list */
    if (o->torch) {
        static const char *const names[4] = {"flash", "cudnn", "efficient", "cudnn_seq"};
        double *const cols[4] = {fl, cu, ef, cs};
        v3_torch(o, "--v3", "v3", probs, nprob, names, cols, 4, tcall);
    }
    char split[32] = "";
    if (o->pol.fwd_split) snprintf(split, sizeof split, ", split count %d", o->pol.fwd_split);
    printf("\nContract v3 problems (kernel policy %s%s; bf16, median of %d): kind 0 varlen (B sequences of "
           "256..4096 tokens, packed), 1 paged prefill, 2 decode (Sq = 1). torch: varlen = aten._flash_attention_forward "
           "(cu_seqlens) / cuDNN; paged = SDPA on the dense K/V; decode = SDPA backends (enable_gqa when Hq != Hkv). "
           "ms columns: kernels time behind a spin (ours includes the return from the call's internal synchronization: "
           "the sync floor, %.4f ms on this machine, which torch's asynchronous calls do not pay); best = the fastest "
           "torch column; cuda / best > 1: cuda faster. call: the whole call with the stream idle before it (torch: "
           "the call and torch.cuda.synchronize(); best call = the fastest backend's). cuda gpu ms: our call's GPU "
           "work alone (events the call records around its launches, testing.h fwd_events), timed as torch's "
           "columns are; gpu: best / cuda = the fastest torch column / that.\n\n",
           o->policy_name, split, o->iters, floor_ms);
    printf("| kind | B | Sq | Sk | Hq/Hkv | D | causal | page | cuda ms | TFLOP/s | K+V GB/s | flash ms | cudnn ms | "
           "efficient ms | cuda / best | cuda gpu ms | gpu: best / cuda | cuda call ms | best call ms | call: cuda / best |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nprob; i++) {
        const v3_prob *pp = &probs[i];
        const double t[3] = {fl[i], cu[i], ef[i]};
        char r[16], rc[16], rg[16];
        const double best = v3_best(t, 3, ours[i], r, sizeof r);
        v3_best(&best, 1, gpu[i], rg, sizeof rg);
        v3_best(&tcall[i], 1, call[i], rc, sizeof rc);
        char sqs[16], sks[16];
        snprintf(sqs, sizeof sqs, pp->kind == 0 ? "1..%d" : "%d", pp->Sq);
        snprintf(sks, sizeof sks, "%d", pp->Sk);
        printf("| %s | %d | %s | %s | %d/%d | %d | %s | %d | %.4f | %.1f | %.0f | %.4f | %.4f | %.4f | %s | %.4f | %s | %.4f | %.4f | %s |\n",
               pp->kind == 0 ? "varlen" : (pp->kind == 1 ? "paged" : "decode"), pp->B,
               pp->kind == 0 ? (pp->Sq > 0 ? sqs : "256..4096") : sqs, pp->kind == 0 ? "=Sq" : sks,
               pp->Hq, pp->Hkv, pp->D, pp->causal ? "br" : "no", pp->page, ours[i], tf[i], gbs[i], fl[i], cu[i], ef[i], r,
               gpu[i], rg, call[i], tcall[i], rc);
    }
    /* varlen: cuDNN's dense SDPA once per packed sequence (its varlen entry is not a tuned path) */
    for (int i = 0; i < nprob; i++)
        if (cs[i] > 0)
            printf("\nvarlen #%d (row %d): cuDNN dense SDPA per sequence (B calls on views of the packed tensors): "
                   "%.4f ms; cuda / that = %.2f\n", i, i + 1, cs[i], ours[i] > 0 ? cs[i] / ours[i] : -1.0);
    return failed;
}

/* --v3, second table: the varlen BACKWARD (packed Q/K/V, cu_seqlens_q = cu_seqlens_k, lengths
 * v3_seqlen(Sq, b), causal bottom-right), bf16, D = 128, default mode (not deterministic), beside
 * torch_bench.py --v3bwd: aten._flash_attention_backward with cu_seqlens (FlashAttention-2 varlen
 * backward), aten._cudnn_attention_backward with cu_seqlens, and cuDNN's dense SDPA backward once per
 * sequence. O and LSE come from our forward; dO uniform in [-1, 1). FLOPs: 2.5x the forward's. */
static const v3_prob v3_bwd_probs[] = {
    {3, 16, 0, 0, 16, 16, 128, 0, 0}, {3, 16, 0, 0, 16, 16, 128, 1, 0}, {3, 16, 0, 0, 32, 8, 128, 1, 0},
    {3, 64, 512, 0, 16, 16, 128, 1, 0}, {3, 64, 512, 0, 16, 16, 128, 0, 0},
};
#define V3_BWD_N ((int)(sizeof v3_bwd_probs / sizeof v3_bwd_probs[0]))

static int bench_v3_bwd(const bench_opts *o, cudaStream_t st) {
    double ours[V3_BWD_N], tf[V3_BWD_N], fl[V3_BWD_N], cu[V3_BWD_N], cs[V3_BWD_N];
    int failed = 0;
    for (int i = 0; i < V3_BWD_N; i++) {
        const v3_prob *pp = &v3_bwd_probs[i];
        ours[i] = tf[i] = fl[i] = cu[i] = cs[i] = -1;
        const int B = pp->B, Hq = pp->Hq, Hkv = pp->Hkv, D = pp->D;
        int32_t cu_s[65];
        int64_t maxs = 0;
        double flops = 0;
        cu_s[0] = 0;
        for (int b = 0; b < B; b++) {
            const int L = v3_seqlen(pp->Sq, b);
            cu_s[b + 1] = cu_s[b] + L;
            maxs = L > maxs ? L : maxs;
            flops += 2.5 * 4.0 * Hq * (double)L * L * D * (pp->causal ? 0.5 : 1.0);
        }
        const int64_t tot = cu_s[B];
        uint16_t *q[2], *k[2], *v[2], *out[2], *dout[2], *dq[2], *dk[2], *dv[2];
        float *lse[2];
        fa_fwd_args fa[2];
        fa_bwd_args ba[2];
        for (int x = 0; x < 2; x++) {
            CK(cudaMalloc((void **)&q[x], (size_t)tot * Hq * D * 2));
            CK(cudaMalloc((void **)&out[x], (size_t)tot * Hq * D * 2));
            CK(cudaMalloc((void **)&dout[x], (size_t)tot * Hq * D * 2));
            CK(cudaMalloc((void **)&dq[x], (size_t)tot * Hq * D * 2));
            CK(cudaMalloc((void **)&k[x], (size_t)tot * Hkv * D * 2));
            CK(cudaMalloc((void **)&v[x], (size_t)tot * Hkv * D * 2));
            CK(cudaMalloc((void **)&dk[x], (size_t)tot * Hkv * D * 2));
            CK(cudaMalloc((void **)&dv[x], (size_t)tot * Hkv * D * 2));
            CK(cudaMalloc((void **)&lse[x], (size_t)tot * Hq * 4));
            CK(bench_fill(q[x], tot * Hq * D, 401u + x, 1));
            CK(bench_fill(k[x], tot * Hkv * D, 503u + x, 1));
            CK(bench_fill(v[x], tot * Hkv * D, 607u + x, 1));
            CK(bench_fill(dout[x], tot * Hq * D, 709u + x, 1));
            memset(&fa[x], 0, sizeof fa[x]);
            fa_problem *p = &fa[x].p;
            p->batch = B; p->heads_q = Hq; p->heads_kv = Hkv; p->head_dim_qk = p->head_dim_v = D;
            p->dtype = FA_BF16; p->window_left = p->window_right = -1;
            p->causal = pp->causal ? FA_CAUSAL_BOTTOM_RIGHT : FA_CAUSAL_NONE;
            p->seqlen_q = p->seqlen_k = maxs;
            fa[x].stream = st;
            fa[x].q = (fa_tensor){q[x], {0, (int64_t)Hq * D, D, 1}};
            fa[x].o = (fa_tensor){out[x], {0, (int64_t)Hq * D, D, 1}};
            fa[x].k = (fa_tensor){k[x], {0, (int64_t)Hkv * D, D, 1}};
            fa[x].v = (fa_tensor){v[x], {0, (int64_t)Hkv * D, D, 1}};
            fa[x].lse = (fa_lse){lse[x], {0, tot, 1}};
            fa[x].varlen.cu_seqlens_q = fa[x].varlen.cu_seqlens_k = cu_s;
            memset(&ba[x], 0, sizeof ba[x]);
            ba[x].p = fa[x].p;
            ba[x].q = fa[x].q; ba[x].k = fa[x].k; ba[x].v = fa[x].v; ba[x].o = fa[x].o; ba[x].lse = fa[x].lse;
            ba[x].dout = (fa_tensor){dout[x], {0, (int64_t)Hq * D, D, 1}};
            ba[x].dq = (fa_tensor){dq[x], {0, (int64_t)Hq * D, D, 1}};
            ba[x].dk = (fa_tensor){dk[x], {0, (int64_t)Hkv * D, D, 1}};
            ba[x].dv = (fa_tensor){dv[x], {0, (int64_t)Hkv * D, D, 1}};
            ba[x].varlen = fa[x].varlen;
            ba[x].deterministic = o->deterministic;
            ba[x].stream = st;
        }
        fa_error err;
        int ok = 1;
        for (int x = 0; x < 2 && ok; x++)
            if (fa_cuda_forward_policy(&fa[x], &o->pol, &err) != FA_OK) {
                fprintf(stderr, "bench v3 bwd #%d forward: %s: %s\n", i, err.arg, err.msg);
                ok = 0;
            }
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        double *tk = malloc(sizeof(double) * (size_t)o->iters);
        for (int it = -o->warmup; ok && it < o->iters; it++) {
            const int x = (it + o->warmup) & 1;
            CK(cudaStreamSynchronize(st));
            CK(bench_spin(st, BENCH_SPIN_US));
            CK(cudaEventRecord(e0, st));
            if (fa_cuda_backward_policy(&ba[x], &o->pol, &err) != FA_OK) {
                fprintf(stderr, "bench v3 bwd #%d: %s: %s\n", i, err.arg, err.msg);
                ok = 0;
            }
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (it >= 0) tk[it] = ms;
        }
        if (ok) {
            ours[i] = median(tk, o->iters);
            tf[i] = flops / (ours[i] * 1e-3) / 1e12;
        } else failed++;
        char sp[96];
        v3_spec(pp, sp, sizeof sp);
        fprintf(stderr, "bench v3 bwd %s: %.4f ms\n", sp, ours[i]);
        free(tk);
        CK(cudaEventDestroy(e0));
        CK(cudaEventDestroy(e1));
        for (int x = 0; x < 2; x++) {
            uint16_t *t[8] = {q[x], k[x], v[x], out[x], dout[x], dq[x], dk[x], dv[x]};
            for (int y = 0; y < 8; y++) CK(cudaFree(t[y]));
            CK(cudaFree(lse[x]));
        }
    }
    if (o->torch) {
        static const char *const names[3] = {"flash", "cudnn", "cudnn_seq"};
        double *const cols[3] = {fl, cu, cs};
        v3_torch(o, "--v3bwd", "v3bwd", v3_bwd_probs, V3_BWD_N, names, cols, 3, NULL);
    }
    printf("\nVarlen backward (kernel policy %s; bf16, D = 128, %s mode, kernels time behind a spin, median of %d; "
           "O and LSE from our forward). torch: flash = aten._flash_attention_backward with cu_seqlens "
           "(FlashAttention-2 varlen), cudnn = aten._cudnn_attention_backward with cu_seqlens, cudnn/seq = cuDNN's "
           "dense SDPA backward once per sequence. best = the fastest torch column; cuda / best > 1: cuda faster.\n\n",
           o->policy_name, o->deterministic ? "deterministic" : "default", o->iters);
    printf("| B | lengths | Hq/Hkv | causal | cuda ms | TFLOP/s | flash ms | cudnn ms | cudnn/seq ms | cuda / best |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < V3_BWD_N; i++) {
        const v3_prob *pp = &v3_bwd_probs[i];
        const double t[3] = {fl[i], cu[i], cs[i]};
        char r[16], ls[24];
        v3_best(t, 3, ours[i], r, sizeof r);
        if (pp->Sq > 0) snprintf(ls, sizeof ls, "1..%d", pp->Sq);
        else snprintf(ls, sizeof ls, "256..4096");
        printf("| %d | %s | %d/%d | %s | %.4f | %.1f | %.4f | %.4f | %.4f | %s |\n", pp->B, ls, pp->Hq, pp->Hkv,
               pp->causal ? "br" : "no", ours[i], tf[i], fl[i], cu[i], cs[i], r);
    }
    return failed;
}

// ----------------------------------------------------------------------------
// main

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--pass fwd|bwd|both] [--d LIST] [--s LIST] [--causal LIST] [--dtype LIST] [--iters N]\n"
            "          [--warmup N] [--tokens N] [--hidden N] [--deterministic] [--policy default|sm80|nows|nobws|fam1|perseq|decgen]\n"
            "          [--no-check] [--torch FILE | --no-torch] [--out FILE] [--v3] [--decode] [--pick LIST]\n"
            "          [--split N] [--split-list LIST] [--pages-in-order]\n",
            argv0);
}

int main(int argc, char **argv) {
    bench_opts o;
    memset(&o, 0, sizeof o);
    o.fwd = o.bwd = 1;
    parse_list("64,128", &o.d, 0);
    parse_list("512,1024,2048,4096,8192,16384", &o.s, 0);
    parse_list("0,1", &o.causal, 0);
    parse_list("bf16,fp16", &o.dtype, 1);
    o.iters = 20; o.warmup = 5; o.check = 1; o.tokens = 16384; o.hidden = 2048;
    o.pol = fa_cuda_policy_default;
    o.policy_name = "default";
    static char torch_default[4096];
    {
        /* the companion next to this program: its runfiles (bundle, bazel run) or the source tree */
        char exe[3800];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = 0;
        snprintf(torch_default, sizeof torch_default, "%s.runfiles/flashcheck/kernels/cuda/bench/torch_bench.py", exe);
        if (access(torch_default, R_OK) != 0) snprintf(torch_default, sizeof torch_default, "kernels/cuda/bench/torch_bench.py");
        o.torch = access(torch_default, R_OK) == 0 ? torch_default : NULL;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (!strcmp(a, "--pass") && v) {
            o.fwd = strcmp(v, "bwd") != 0;
            o.bwd = strcmp(v, "fwd") != 0;
            ok = !strcmp(v, "fwd") || !strcmp(v, "bwd") || !strcmp(v, "both");
            i++;
        } else if (!strcmp(a, "--d") && v) ok = parse_list(argv[++i], &o.d, 0);
        else if (!strcmp(a, "--s") && v) ok = parse_list(argv[++i], &o.s, 0);
        else if (!strcmp(a, "--causal") && v) ok = parse_list(argv[++i], &o.causal, 0);
        else if (!strcmp(a, "--dtype") && v) ok = parse_list(argv[++i], &o.dtype, 1);
        else if (!strcmp(a, "--iters") && v) ok = (o.iters = atoi(argv[++i])) > 0;
        else if (!strcmp(a, "--warmup") && v) ok = (o.warmup = atoi(argv[++i])) >= 0;
        else if (!strcmp(a, "--tokens") && v) ok = (o.tokens = atoll(argv[++i])) > 0;
        else if (!strcmp(a, "--hidden") && v) ok = (o.hidden = atoll(argv[++i])) > 0;
        else if (!strcmp(a, "--deterministic")) o.deterministic = 1;
        else if (!strcmp(a, "--no-check")) o.check = 0;
        else if (!strcmp(a, "--v3")) o.v3 = 1;
        else if (!strcmp(a, "--decode")) o.v3 = 2;
        else if (!strcmp(a, "--pages-in-order")) o.pages_in_order = 1;
        else if (!strcmp(a, "--split-list") && v) { /* n,n,...: 0 the host's rule, -1 none, n > 0 pinned */
            const char *c = argv[++i];
            char *end;
            o.n_split_list = 0;
            while (ok && *c && o.n_split_list < 32) {
                const long x = strtol(c, &end, 10);
                ok = end != c && x >= -1 && x <= 256 && (*end == ',' || *end == 0);
                o.split_list[o.n_split_list++] = (int)x;
                c = *end ? end + 1 : end;
            }
            ok = ok && !*c;
        }
        else if (!strcmp(a, "--pick") && v) ok = parse_list(argv[++i], &o.pick, 0);
        else if (!strcmp(a, "--split") && v) ok = (o.pol.fwd_split = atoi(argv[++i])) >= -1;
        else if (!strcmp(a, "--no-torch")) o.torch = NULL;
        else if (!strcmp(a, "--torch") && v) o.torch = argv[++i];
        else if (!strcmp(a, "--out") && v) o.out = argv[++i];
        else if (!strcmp(a, "--policy") && v) {
            o.policy_name = argv[++i];
            if (!strcmp(o.policy_name, "sm80")) {
                o.pol.fwd_sm90 = 0;
                o.pol.bwd_sm90 = 0;
            } else if (!strcmp(o.policy_name, "nows")) {
                o.pol.fwd_ws = 0;
            } else if (!strcmp(o.policy_name, "nobws")) {
                o.pol.bwd_no_ws = 1; /* backward: the 2h Hopper dK/dV kernel instead of the warp-specialized one */
            } else if (!strcmp(o.policy_name, "perseq")) {
                o.pol.bwd_vl_per_seq = 1; /* varlen backward: one launch sequence per sequence */
            } else if (!strcmp(o.policy_name, "decgen")) {
                o.pol.fwd_decode_general = 1; /* decode: the general kernel's decode tile (fwd_sm80.cu) */
            } else if (!strcmp(o.policy_name, "fam1")) {
                o.pol.fwd_family = 1; /* the 64-row family everywhere (decode too: not the 16-row decode tile) */
            } else ok = !strcmp(o.policy_name, "default");
        } else ok = 0;
        if (!ok) {
            usage(argv[0]);
            return 2;
        }
    }
    for (int i = 0; i < o.s.n; i++)
        if (o.s.v[i] <= 0 || o.tokens % o.s.v[i]) { fprintf(stderr, "bench: tokens %% S != 0 for S=%d\n", o.s.v[i]); return 2; }
    for (int i = 0; i < o.d.n; i++)
        if (o.d.v[i] <= 0 || o.hidden % o.d.v[i]) { fprintf(stderr, "bench: hidden %% D != 0 for D=%d\n", o.d.v[i]); return 2; }
    if (fa_cuda_device_count() < 1) {
        fprintf(stderr, "bench: no CUDA device\n");
        return 2;
    }

    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    if (o.v3) { /* only the contract-v3 table (--v3) or its decode table (--decode) */
        int f = 0; /* --pass fwd: the forward table only; --pass bwd: the varlen backward table only */
        if (o.v3 == 2 || o.fwd) f = o.v3 == 2 ? bench_v3(&o, st, v3_decode_probs, V3_DECODE_N) : bench_v3(&o, st, v3_probs, V3_N);
        if (o.v3 == 1 && o.bwd) f += bench_v3_bwd(&o, st);
        CK(cudaStreamDestroy(st));
        return f ? 1 : 0;
    }
    const int64_t n = o.tokens * o.hidden;
    bench_bufs bf;
    for (int x = 0; x < 2; x++) {
        uint16_t **t[8] = {&bf.q[x], &bf.k[x], &bf.v[x], &bf.o[x], &bf.dout[x], &bf.dq[x], &bf.dk[x], &bf.dv[x]};
        for (int y = 0; y < 8; y++) CK(cudaMalloc((void **)t[y], (size_t)n * 2));
        CK(cudaMalloc((void **)&bf.lse[x], (size_t)o.tokens * (size_t)o.hidden / 8 * 4)); /* >= B H S for D >= 8 */
    }
    bench_row rows[2 * BENCH_MAXL * BENCH_MAXL * 2 * 2];
    int nrows = 0, failed = 0;
    const double t0 = now_s();
    for (int di = 0; di < o.dtype.n; di++) {
        const int bf16 = o.dtype.v[di];
        for (int x = 0; x < 2; x++) { /* inputs of this dtype, two sets */
            CK(bench_fill(bf.q[x], n, 11u + x, bf16));
            CK(bench_fill(bf.k[x], n, 23u + x, bf16));
            CK(bench_fill(bf.v[x], n, 37u + x, bf16));
            CK(bench_fill(bf.dout[x], n, 41u + x, bf16));
        }
        CK(cudaDeviceSynchronize());
        for (int pass = 0; pass < 2; pass++) {
            if ((pass == 0 && !o.fwd) || (pass == 1 && !o.bwd)) continue;
            for (int a = 0; a < o.d.n; a++)
                for (int c = 0; c < o.causal.n; c++)
                    for (int b = 0; b < o.s.n; b++) {
                        bench_row *r = &rows[nrows++];
                        memset(r, 0, sizeof *r);
                        r->bwd = pass; r->d = o.d.v[a]; r->s = o.s.v[b]; r->causal = o.causal.v[c]; r->bf16 = bf16;
                        r->call_ms = r->kern_ms = -1;
                        r->flash_call = r->flash_kern = r->cudnn_call = r->cudnn_kern = -1;
                        const double B = (double)(o.tokens / r->s), H = (double)(o.hidden / r->d);
                        r->flops = 4.0 * B * H * r->s * (double)r->s * r->d * (r->causal ? 0.5 : 1.0) * (pass ? 2.5 : 1.0);
                        r->check = -1;
                        if (o.check) {
                            r->check = bench_check(&o, pass, r->s, r->d, bf16, r->causal, &r->check_ratio);
                            failed += !r->check;
                        }
                        if (!bench_time(&o, &bf, r, st)) failed++;
                        fprintf(stderr, "bench: %s D=%d S=%d causal=%d %s: check %s %.3g, call %.3f ms, kernels %.3f ms "
                                        "(%.0f s)\n",
                                pass ? "bwd" : "fwd", r->d, r->s, r->causal, bf16 ? "bf16" : "fp16",
                                r->check < 0 ? "not run" : (r->check ? "ok" : "FAIL"), r->check_ratio, r->call_ms,
                                r->kern_ms, now_s() - t0);
                    }
        }
    }
    for (int x = 0; x < 2; x++) {
        uint16_t *t[8] = {bf.q[x], bf.k[x], bf.v[x], bf.o[x], bf.dout[x], bf.dq[x], bf.dk[x], bf.dv[x]};
        for (int y = 0; y < 8; y++) CK(cudaFree(t[y]));
        CK(cudaFree(bf.lse[x]));
    }
    CK(cudaStreamDestroy(st));
    if (o.torch && !bench_torch(&o, rows, nrows)) fprintf(stderr, "bench: no torch figures (%s)\n", o.torch);
    print_table(stdout, &o, rows, nrows);
    if (o.out) {
        FILE *f = fopen(o.out, "w");
        if (!f) {
            fprintf(stderr, "bench: cannot write %s\n", o.out);
            return 2;
        }
        print_table(f, &o, rows, nrows);
        fclose(f);
    }
    if (failed) fprintf(stderr, "bench: %d configuration(s) failed their check or a call\n", failed);
    return failed ? 1 : 0;
}
