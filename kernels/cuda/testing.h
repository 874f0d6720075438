/* testing.h: the CUDA backend's test hooks (prefix fa_cuda_). Not part of the API: only
 * test and benchmark targets see this header (//kernels/cuda:testing, testonly).
 *
 * A policy says which kernel family runs where a choice exists; fa_cuda_forward and
 * fa_cuda_backward (what the backend table ships) always run fa_cuda_policy_default. A test
 * that must certify another path (the mma.sync forward at head dims the wgmma kernel takes
 * on an H100, the sm_80 backward kernels there) calls the *_policy entry points with its own
 * policy: the same compiled code, no process-wide switch, no environment variable. */
#ifndef FLASHCHECK_CUDA_TESTING_H
#define FLASHCHECK_CUDA_TESTING_H
#include "kernels/flash_api.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int fwd_family;   /* -1: the default tile family (fwd/fwd_tiles.h); 0..3: that family */
    int fwd_sm90;     /* -1: default (wgmma kernel on sm_90 at padded head dim 128); 0: never; 1: also at 64 */
    int bwd_sm90;     /* 1: the Hopper backward kernels where eligible (default); 0: never */
    int bwd_sm90_det; /* 1: also in the deterministic mode (default); 0: not there */
    int bwd_sm90_dq;  /* 1: deterministic dQ on the Hopper dQ kernel (default); 0: bwd_dq_kernel */
    int fwd_ws;       /* 1: the warp-specialized wgmma forward where it applies (default); 0: never */
    int fwd_no_decode; /* 0: default; 1: no decode path (Sq <= 16 keeps the general tile rule, no
                          split-KV): the same kernel and tile for every Sq, for bitwise comparisons */
    int fwd_split;    /* decode split-KV count: 0: the host's rule (fwd_host.cu); -1: no split; n > 0:
                         n splits, cut down to what the profile's split rule admits (at least
                         fwd_split_min_blocks key blocks a split) and to one split per block pair */
    void *fwd_events[2]; /* NULL: none; else two cudaEvent_t the forward records on its stream just
                            before its first launch and just after its last (before it waits), so a
                            benchmark can time the call's GPU work alone, as torch's asynchronous
                            calls are timed (kernels/cuda/bench/bench.c --decode) */
    int bwd_vl_per_seq; /* 0: default (varlen backward in one grid where the Hopper kernels run);
                           1: every varlen backward sequence by sequence (bwd_host.cu bwd_varlen) */
    int fwd_decode_general; /* 0: default (the decode tile runs fwd/fwd_decode.cu's kernel); 1: the
                               general mma.sync kernel's decode instantiation (fwd_sm80.cu) instead:
                               the same tile, grid and arithmetic, for bitwise comparisons */
    int bwd_no_ws;      /* 0: default (dense default-mode Hopper calls on the warp-specialized dK/dV
                           kernel, bwd_sm90.cu 2w); 1: on the 2h kernel there too */
} fa_cuda_policy;

/* {-1, -1, 1, 1, 1, 1, 0, 0, {NULL, NULL}, 0, 0, 0} (backend.cu) */
extern const fa_cuda_policy fa_cuda_policy_default;

fa_status fa_cuda_forward_policy(const fa_fwd_args *args, const fa_cuda_policy *policy, fa_error *err);
fa_status fa_cuda_backward_policy(const fa_bwd_args *args, const fa_cuda_policy *policy, fa_error *err);

#ifdef __cplusplus
}
#endif
#endif
