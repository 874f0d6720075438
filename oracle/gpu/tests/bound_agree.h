/* bound_agree.h (tests only): when two double tiers' kernel bounds of one dQ / dK / dV
 * element agree (test_gpu_oracle, test_gpu_bwd_host). BOUNDS.md 12, "Comparing the two
 * tiers' bounds".
 *
 * A bound is a function of the element's reference value as well as of its weights: the
 * RN store's reachable-set bound (BOUNDS.md 5.8, orc_fm_store_bound) is
 *   S = (max(RN(hi) - ref, ref - RN(lo)) (1 + 2^-50) + e + 2^-900) ORC_SAFETY,
 * hi, lo = ref +- w, and the generic store term u_out (|ref| + e + pre) moves with |ref|
 * too. The tiers' references differ by delta = |ref_g - ref_c| <= orc_err_g + orc_err_c
 * (other summation orders, CUDA's exp against glibc's, a warp's tree against a
 * sequential sum), and their orc_err by |e_g - e_c|. Where RN(hi), RN(lo) are the same in
 * both tiers, max(.) is 1-Lipschitz in ref, so
 *   |S_g - S_c| <= ORC_SAFETY (1 + 2^-50) (delta + |e_g - e_c|) + evaluation rounding,
 * and min(generic, S) keeps that (min is 1-Lipschitz in each argument; the generic term's
 * slope in ref is u_out ORC_SAFETY < the same factor). Where pre is below the dtype's
 * resolution, S is about the distance from ref to the nearest dtype value, which may be
 * 2^-20 of |ref| or less: delta (a few ulps of ref) is then 2^-27 .. 2^-23 of the bound,
 * and no 2^-30 equality can hold. Where hi (or lo) lies so close to a rounding boundary
 * of the dtype that the two tiers' hi fall on either side (|hi_g - hi_c| <= delta +
 * |w_g - w_c|), the two RN(hi) are adjacent dtype values r_g != r_c and S moves by up to
 * |r_g - r_c| more: that case is recognised from the bounds themselves (each tier's
 * S / ORC_SAFETY - e, taken off ref, lands on a dtype value) and allowed that much. */
#ifndef FLASHCHECK_BOUND_AGREE_H
#define FLASHCHECK_BOUND_AGREE_H

#include <math.h>

#include "oracle/orc_internal.h"

/* The dtype value that a store bound b of reference ref, oracle error e is anchored at
 * (ref + d or ref - d, d = b / ORC_SAFETY / (1 + 2^-50) - e recovered to ~2^-50 (|ref| + b)),
 * or NaN when neither lies within 2^-44 (|ref| + b) of a dtype value (b is the generic
 * term, or no store bound). */
static double ba_anchor(double b, double ref, double e, int bf16) {
    if (!isfinite(b) || !isfinite(ref) || !isfinite(e)) return NAN;
    double d = (b / ORC_SAFETY - e) / (1 + 0x1p-50), tol = 0x1p-44 * (fabs(ref) + b);
    if (d < 0) return NAN;
    for (int s = -1; s <= 1; s += 2) {
        double x = ref + s * d, r = orc_fm_round16(x, bf16);
        if (isfinite(r) && fabs(x - r) <= tol) return r;
    }
    return NAN;
}

/* The dtype's spacing at magnitude a (fp16 / bf16, subnormals included). */
static double ba_ulp(double a, int bf16) {
    int mant = bf16 ? 7 : 10, emin = bf16 ? -126 : -14;
    int E = a > 0 ? ilogb(a) : emin;
    return ldexp(1.0, (E > emin ? E : emin) - mant);
}

/* 1 if kernel bounds bg (one tier, reference rg, orc_err eg) and bc (the other) of one
 * gradient element agree: to 2^-30 (the evaluation's rounding, ORC_SAFETY's margin) plus
 * ORC_SAFETY (1 + 2^-50) (|rg - rc| + |eg - ec|), plus |r_g - r_c| where the two are
 * store bounds anchored at adjacent dtype values r_g != r_c (the header's derivation). */
static int ba_bounds_agree(double bg, double bc, double rg, double rc, double eg, double ec, int bf16) {
    if ((isnan(bg) && isnan(bc)) || bg == bc) return 1;
    if (!isfinite(bg) || !isfinite(bc)) return 0;
    double dref = isfinite(rg) && isfinite(rc) ? fabs(rg - rc) : 0, de = isfinite(eg) && isfinite(ec) ? fabs(eg - ec) : 0;
    double tol = 0x1p-30 * fmax(bg, bc) + ORC_SAFETY * (1 + 0x1p-50) * (dref + de) * (1 + 0x1p-50);
    if (fabs(bg - bc) <= tol) return 1;
    double ag = ba_anchor(bg, rg, eg, bf16), ac = ba_anchor(bc, rc, ec, bf16);
    if (isnan(ag) || isnan(ac) || ag == ac) return 0;
    if (!(fabs(ag - ac) <= ba_ulp(fmax(fabs(ag), fabs(ac)), bf16))) return 0; /* adjacent only */
    return fabs(bg - bc) <= tol + ORC_SAFETY * (1 + 0x1p-50) * fabs(ag - ac) * (1 + 0x1p-50);
}

/* Reference-time escalation (orc_bwd.c, orc_gpu_bwd: an element whose vector has an
 * orc_err > escalate_ratio * bound) replaces ref and orc_err by the MPFR tier's, e =
 * orc_mpfr_err(x, e_double, prec, nterms) = U_D |x| + 2^(55 - prec) e_double (1 + nterms),
 * but keeps the bound, which the tier computed from its double reference and e_double. So
 * for an escalated element the two tiers' bounds differ by what their double references
 * did, |rg_d - rc_d| <= eg_d + ec_d, not by the MPFR references' difference (0 when both
 * escalated). Returns an upper bound on e_double from the escalated e (x the MPFR value):
 * the inverse of orc_mpfr_err, each of its three roundings (<= 2^-53 relative) and the
 * subtraction's (<= ulp(e)) covered by 2^-50 of e and of the result. */
static double ba_err_before(double e, double x, int prec, double nterms) {
    if (!isfinite(e) || !isfinite(x)) return e;
    double t = e - ORC_U_D * fabs(x) + 0x1p-50 * e;
    if (t < 0) t = 0x1p-50 * e;
    return ldexp(t / (1 + nterms), prec - 55) * (1 + 0x1p-50);
}

/* ba_bounds_agree for an element escalated in either tier (esc_g, esc_c: its
 * ORC_F_ESCALATED; eg, ec: the orc_err as stored). The double references and errors the
 * bounds came from are unknown beyond |r_d - exact| <= e_d (ba_err_before for an escalated
 * tier): dref + de <= (eg_d + ec_d) + max(eg_d, ec_d) <= 2 (eg_d + ec_d). The store bound's
 * RN(hi) values then differ by |hi_g - hi_c| plus at most one dtype spacing at |ref| + bound
 * (the anchors cannot be recovered from the MPFR reference), |hi_g - hi_c| <= dref + de +
 * the 2^-30 of w: allowed 2^-29 max(bg, bc) + ORC_SAFETY (1 + 2^-49) (2 (dref + de) + ulp). */
static int ba_bounds_agree_esc(double bg, double bc, double rg, double rc, double eg, double ec, int esc_g, int esc_c,
                               int prec, double nterms, int bf16) {
    if (!esc_g && !esc_c) return ba_bounds_agree(bg, bc, rg, rc, eg, ec, bf16);
    if ((isnan(bg) && isnan(bc)) || bg == bc) return 1;
    if (!isfinite(bg) || !isfinite(bc)) return 0;
    double xg = isfinite(rg) ? rg : 0, xc = isfinite(rc) ? rc : 0;
    double dg = esc_g ? ba_err_before(eg, xg, prec, nterms) : eg, dc = esc_c ? ba_err_before(ec, xc, prec, nterms) : ec;
    if (!isfinite(dg) || !isfinite(dc)) return 0;
    double mb = fmax(bg, bc), d = 2 * (dg + dc);
    double ulp = ba_ulp(fmax(fabs(xg), fabs(xc)) + mb + d, bf16);
    return fabs(bg - bc) <= 0x1p-29 * mb + ORC_SAFETY * (1 + 0x1p-49) * (2 * d + ulp);
}

#endif /* FLASHCHECK_BOUND_AGREE_H */
