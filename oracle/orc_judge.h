/* orc_judge.h: the per-element rule of the comparison, the one definition that the host
 * compare (orc_compare.c) and the GPU tier's device compare (oracle/gpu/orc_gpu_cmp.cu)
 * both call. Host and device inline functions (ORC_JD_FN). Not part of the API.
 *
 * orc_jd_elem classifies one element: kernel value kv, reference ref, its certified error
 * oe (|ref - exact| <= oe), the kernel bound, the flags, and thr the overflow threshold of
 * the output dtype (orc_overflow_threshold). final = 0: an element the double reference
 * cannot decide is ORC_JD_UNDECIDED (the caller recomputes it in MPFR and asks again);
 * final = 1: the value is taken as exact. The rule (orc_compare.c's header states it):
 *   err + oe <= bound pass, err - oe > bound fail, else undecided;
 *   a reference NaN needs a kernel NaN, a reference Inf the same Inf (BOUNDS.md 11.1 for
 *   an infinite input: that Inf or NaN); a kernel Inf against a finite reference passes
 *   when dir*ref + bound - oe >= thr, fails when dir*ref + bound + oe < thr, undecided in
 *   between; ORC_F_OVERFLOW with a non-finite kernel value is overflow-sensitive (never a
 *   pass, never a failure); ORC_F_UNCHECKABLE is unchecked.
 * err, ratio: RN double |kv - ref| and err / bound (bound > 0), as the statistics use. */
#ifndef FLASHCHECK_ORC_JUDGE_H
#define FLASHCHECK_ORC_JUDGE_H

#include <math.h>
#include <stdint.h>

#include "oracle/oracle.h"

#ifdef __CUDACC__
#define ORC_JD_FN __host__ __device__ static inline
#else
#define ORC_JD_FN static inline
#endif

/* Classes. Statistics per class (orc_stats fields; vmax = the vector's grid value):
 *   UNDECIDED     nothing (only with final = 0)
 *   UNCHECKED     unchecked++
 *   UNCHECKED_OVF unchecked++, overflow-sensitive (first_ovf_at)
 *   NF_MATCH      checked++, nonfinite_match++, vmax 0
 *   NAN_MISSING   checked++, nan_missing++, failure, vmax Inf
 *   OVF_INF       checked++, overflow_inf++, vmax 0
 *   CHECKED_OVF   checked++, overflow-sensitive
 *   NAN_UNEXP     checked++, nan_unexpected++, failure, vmax Inf
 *   FINITE        checked++, failure when err > bound, worst / hist / exact / max_err, vmax
 *                 ratio, and (bound > 0) the ratio and bias sums */
enum {
    ORC_JD_UNDECIDED = 0,
    ORC_JD_UNCHECKED,
    ORC_JD_UNCHECKED_OVF,
    ORC_JD_NF_MATCH,
    ORC_JD_NAN_MISSING,
    ORC_JD_OVF_INF,
    ORC_JD_CHECKED_OVF,
    ORC_JD_NAN_UNEXP,
    ORC_JD_FINITE
};

typedef struct {
    int cls;
    double err, ratio; /* FINITE only */
} orc_jd;

ORC_JD_FN orc_jd orc_jd_elem(double kv, double ref, double bound, double oe, unsigned fl, double thr,
                             int final) {
    orc_jd r = {ORC_JD_UNDECIDED, 0, 0};
    int ovf = (fl & ORC_F_OVERFLOW) && !isfinite(kv);
    if ((fl & ORC_F_INF_INPUT) && isinf(ref)) {
        r.cls = (isnan(kv) || kv == ref) ? ORC_JD_NF_MATCH : ORC_JD_NAN_MISSING;
        return r;
    }
    if (fl & ORC_F_UNCHECKABLE) {
        r.cls = ovf ? ORC_JD_UNCHECKED_OVF : ORC_JD_UNCHECKED;
        return r;
    }
    if (isnan(ref) || isinf(ref)) {
        int ok = isnan(ref) ? isnan(kv) : (kv == ref);
        r.cls = ok ? ORC_JD_NF_MATCH : ORC_JD_NAN_MISSING;
        return r;
    }
    if (isinf(kv)) {
        double reach = (kv > 0 ? ref : -ref) + bound;
        if (!final && !(reach - oe >= thr) && reach + oe >= thr) return r;
        r.cls = reach - oe >= thr ? ORC_JD_OVF_INF : ovf ? ORC_JD_CHECKED_OVF : ORC_JD_NAN_UNEXP;
        return r;
    }
    if (!isfinite(kv)) {
        r.cls = ovf ? ORC_JD_CHECKED_OVF : ORC_JD_NAN_UNEXP;
        return r;
    }
    double err = fabs(kv - ref);
    if (!final && !(err + oe <= bound) && !(err - oe > bound)) return r;
    r.cls = ORC_JD_FINITE;
    r.err = err;
    r.ratio = bound > 0 ? err / bound : (err > 0 ? INFINITY : 0);
    return r;
}

/* Histogram bucket of a ratio (orc_stats.ratio_hist): floor(log2(ratio)) + 48 clamped to
 * [0, ORC_HIST_BUCKETS); 0 for 0, the last for Inf. Exact (ilogb; subnormals too). */
ORC_JD_FN int orc_jd_bucket(double ratio) {
    if (!(ratio > 0)) return 0;
    if (isinf(ratio)) return ORC_HIST_BUCKETS - 1;
    int k = ilogb(ratio) + 48;
    return k < 0 ? 0 : k > ORC_HIST_BUCKETS - 1 ? ORC_HIST_BUCKETS - 1 : k;
}

#ifndef __CUDACC__
/* Host half of a device compare (orc_compare.c): the elements the device left to it. A
 * dense problem without a naive baseline. tensor: 0 O, 1 LSE (fr), 2 dQ, 3 dK, 4 dV (br).
 * vecs[0..n): ascending vector indices of the block, each with d0[k] its first element
 * the double reference leaves undecided and kv[k dim + d] its decoded kernel values;
 * elements d >= d0[k] are judged exactly as orc_compare_* judges them (MPFR recomputation
 * of the vector), the others are the device's. n = 0 gives the empty part with the grid
 * geometry, dim and thr for the device. Free with orc_cmp_part_free. */
typedef struct {
    orc_stats s;            /* these elements' statistics; median_ratio not set */
    int64_t fail_e, ovf_e, worst_e; /* element (v dim + d) of s.first_fail_at, first_ovf_at,
                                       worst_at; -1: none */
    double *ratios;         /* [nr]: ratios of FINITE elements with bound > 0 */
    int64_t nr;
    double bias, bias_zero; /* sums of the signed ratios (RN, in order) */
    int64_t dim;
    double thr;             /* overflow threshold of the output dtype */
} orc_cmp_part;

fa_status orc_compare_esc(const orc_fwd_result *fr, const orc_bwd_result *br, int tensor, int64_t n,
                          const int64_t *vecs, const int32_t *d0, const double *kv, orc_cmp_part *out,
                          fa_error *err);
void orc_cmp_part_free(orc_cmp_part *p);
/* k-th smallest of a[0..n) (reorders a): the host compare's own selection. */
double orc_cmp_select(double *a, int64_t n, int64_t k);
#endif

#endif /* FLASHCHECK_ORC_JUDGE_H */
