/* bwd_certify_test.c: certification of the CUDA backward (and the forward it runs on): the
 * sweep library's base and cuda sets (properties/sweep/sweep.h: cases, checks, properties)
 * forward and backward, and the misuse suite; certify_driver.h has the options. --sm80: the
 * sm_80 (mma.sync) backward kernels for every call, also where an sm_90 device runs the Hopper
 * kernels (a test policy, kernels/cuda/testing.h). --no-ws: never the warp-specialized Hopper
 * dK/dV kernel (bwd_sm90.cu 2w), so that the 2h kernel it replaces in dense default-mode calls
 * stays certified there too. */
#include "kernels/cuda/tests/certify_driver.h"

static void sm80(fa_cuda_policy *p) { p->bwd_sm90 = 0; }
static void no_ws(fa_cuda_policy *p) { p->bwd_no_ws = 1; }

int main(int argc, char **argv) {
    static const drv_flag flags[] = { { "--sm80", sm80 }, { "--no-ws", no_ws } };
    return drv_main(argc, argv, 1, flags, 2);
}
