/* pairs.h: which kernels a head-dim pair (Dqk, Dv) runs on, forward and backward (prefix
 * fa_cuda_). Plain C, shared by the hosts (fwd/fwd_host.cu, bwd/bwd_sm80.cu) and the CPU-side
 * test of the rule (kernels/cuda/tests/pair_rule_test.c).
 *
 * Head dims are multiples of 8 in 8..256 (limits.h), Dqk and Dv independent. The MLA / DeepSeek
 * pair has its own kernels: Dqk in 136..192 (padded to 192: S = Q K^T, dK, dQ) with Dv in 72..128
 * (padded to 128: O += P V, dP = dO V^T, dV), fwd/fwd_tiles.h fwd_pair_tiles and the (192, 128)
 * instantiations of bwd/bwd_sm80.cu. Every other pair runs the equal-dim kernels of the larger
 * padded dim, whose loads zero-fill each tensor's columns past its own head dim (nothing read)
 * and whose stores write each output's own columns. The wgmma (sm_90) kernels take equal head
 * dims only. */
#ifndef FLASHCHECK_CUDA_PAIRS_H
#define FLASHCHECK_CUDA_PAIRS_H
#include <stdint.h>

/* 1 when (dqk, dv) runs the pair's own kernels (padded 192 / 128). */
static inline int fa_cuda_pair_native(int64_t dqk, int64_t dv) {
    return dqk > 128 && dqk <= 192 && dv > 64 && dv <= 128;
}

/* The backward's sm_80 tile code: 192 for the pair's own kernels, else the larger dim padded
 * to 64, 128 or 256. */
static inline int fa_cuda_bwd_tile(int64_t dqk, int64_t dv) {
    const int64_t dmax = dqk > dv ? dqk : dv;
    if (fa_cuda_pair_native(dqk, dv)) return 192;
    return dmax <= 64 ? 64 : (dmax <= 128 ? 128 : 256);
}

#endif /* FLASHCHECK_CUDA_PAIRS_H */
