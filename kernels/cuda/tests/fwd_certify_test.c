/* fwd_certify_test.c: certification of the CUDA forward: the sweep library's base and cuda
 * sets (properties/sweep/sweep.h: cases, checks, properties) forward only, and the misuse
 * suite; certify_driver.h has the options. --mma-only: the mma.sync kernel for every call,
 * also where an sm_90 device would run the wgmma kernel (head dims 104..128), so that both
 * kernels are certified on an H100 (a test policy, kernels/cuda/testing.h). */
#include "kernels/cuda/tests/certify_driver.h"

static void mma_only(fa_cuda_policy *p) { p->fwd_sm90 = 0; }

int main(int argc, char **argv) { return drv_main(argc, argv, 0, "--mma-only", mma_only); }
