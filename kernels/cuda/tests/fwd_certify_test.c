/* fwd_certify_test.c: certification of the CUDA forward: the sweep library's base and cuda
 * sets (properties/sweep/sweep.h: cases, checks, properties) forward only, and the misuse
 * suite; certify_driver.h has the options. Test policies (kernels/cuda/testing.h), so that
 * every forward kernel family is certified on an H100:
 *   --mma-only: the mma.sync kernel for every call, also where an sm_90 device would run a
 *               wgmma kernel (head dims 104..128);
 *   --no-ws:    never the warp-specialized wgmma kernel (fwd_sm90_ws.cu), so that the plain
 *               wgmma kernel (fwd_sm90.cu, its fallback) stays certified. */
#include "kernels/cuda/tests/certify_driver.h"

static void mma_only(fa_cuda_policy *p) { p->fwd_sm90 = 0; }
static void no_ws(fa_cuda_policy *p) { p->fwd_ws = 0; }

int main(int argc, char **argv) {
    static const drv_flag flags[] = { { "--mma-only", mma_only }, { "--no-ws", no_ws } };
    return drv_main(argc, argv, 0, flags, 2);
}
