/* cpu_ftz.h: the CPU backend run in flush-to-zero mode, for testing the
 * oracle's underflow floor (oracle/BOUNDS.md section 9). Not a mutant: it is
 * a correct backend for a different precision profile.
 *
 * Same arithmetic as fa_backend_cpu() (cpu_fwd.c, cpu_bwd.c), with the x86
 * MXCSR bits FTZ (results below 2^-126 become 0) and DAZ (operands below
 * 2^-126 are read as 0) set in every thread of the call, as a GPU kernel
 * built with -ftz and ex2.approx.ftz behaves: expf results below 2^-126
 * become 0, fp32 products and sums of or into the subnormal range become 0,
 * bf16 inputs below 2^-126 (fp32 subnormals once converted) are read as 0,
 * and so an output below 2^-126 is stored as 0. The MXCSR of every thread is
 * restored before the call returns. Its table declares flushes_subnormals = 1
 * (otherwise the CPU profile). On a target without MXCSR (not x86) forward
 * and backward return FA_ERR_UNSUPPORTED. */
#ifndef FLASHCHECK_CPU_FTZ_H
#define FLASHCHECK_CPU_FTZ_H

#include "kernels/flash_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The "cpu_ftz" backend table (host memory). */
const fa_backend *fa_backend_cpu_ftz(void);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_CPU_FTZ_H */
