/* oracle_tier.h: internals of the check library shared by check.c and oracle_tier.c
 * (not part of the API). */
#ifndef FLASHCHECK_ORACLE_TIER_H
#define FLASHCHECK_ORACLE_TIER_H

#include "properties/check/check.h"

/* The oracle's host args of r's inputs (views into r's host buffers). */
void fc_oracle_host_fwd_args(const fc_run *r, fa_fwd_args *out);
void fc_oracle_host_bwd_args(const fc_run *r, fa_bwd_args *out);
/* The options the checks use (orc_options_init, no naive baseline). */
void fc_oracle_options(orc_options *opt);
/* 1 if this process can run the GPU tier (orc_gpu_available, asked once). */
int fc_oracle_gpu_usable(void);

#endif
