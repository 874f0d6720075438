#!/bin/bash
# run_det_split.sh: where the deterministic mode's time goes (D = 128 and 64, bf16, non-causal):
# per-kernel durations by Nsight Compute (gpu__time_duration.sum, clocks not locked) of one
# bwd_bench call per size (non-causal, then causal; in launch order): preprocess, bwd_g_dkdv_kernel (DQ = true / false), the dQ conversion,
# bwd_dq_kernel. Run from the repository root with the binaries of build_device.sh in .device/bwd.
B=.device/bwd
for a in "128 4096" "128 16384" "64 16384"; do
    echo "== bwd_bench 1 $a (both modes: 5 warm-up + 1 timed call each)"
    timeout 100 ncu --clock-control none -k regex:bwd_ --metrics gpu__time_duration.sum --csv $B/bwd_bench 1 $a 2>/dev/null \
        > ${OUT:-/tmp}/ncu_${a// /_}.csv
    grep -E '"bwd_' ${OUT:-/tmp}/ncu_${a// /_}.csv | awk -F'","' '{sub(/"$/, "", $NF); gsub(/,/, "", $NF);
        if (!($5 in v)) order[++k] = $5; v[$5] = v[$5] " " $NF; u[$5] = $(NF-1)}
        END {for (x = 1; x <= k; x++) print order[x] " [" u[order[x]] "]:" v[order[x]]}'
done
