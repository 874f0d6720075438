#!/bin/bash
# probe_dryrun_test.sh PROBE_PY FAKE_TORCH_INIT: probe_cudnn.py's decision logic without a GPU. A numpy
# stand-in for torch (probe_fake/) whose SDPA backends are emulations of planted settings (cudnn:
# scale unfolded, against the preset's measured fold: the probe must say CONTRADICTS; dP not
# rounded, GQA fused; flash: its FlashAttention-2 settings; math: fp32, D from P); the probe must
# recover each planted field, find its controls consistent, and report a failed control when flash
# is planted folding the scale.
set -u
probe=$1; fake=$(dirname "$(dirname "$2")")
py=/usr/bin/python3
"$py" -c "import numpy" 2>/dev/null || { echo "SKIPPED: no numpy"; exit 0; }
args=(--trials 2 --tests fold:fp16,dp:bf16,gqa:bf16 --backends cudnn,flash,math --budget 1000)
out=$(PYTHONPATH="$fake:$(dirname "$probe")" "$py" "$probe" "${args[@]}" 2>&1); rc=$?
fail=0
check() { if grep -Eq "$1" <<<"$out"; then echo "ok    $2"; else echo "FAIL  $2 (no line matching '$1')"; fail=1; fi; }
[ $rc -eq 0 ] || { echo "FAIL  probe exit $rc"; fail=1; }
check '^cudnn +ds_scale_folded +1 +0 +CONTRADICTS' "cudnn planted unfolded: measured 0, against the preset's measured 1"
check '^cudnn +dp_rounded +0 +0 +agrees' "cudnn planted dP unrounded: measured 0, as the preset says"
check '^cudnn +gqa_reduce +round_sum32 +fused ' "cudnn planted fused GQA: measured fused"
check '^flash +gqa_reduce +round_sum32 +round_sum32 +agrees' "flash: per-head rounding, fp32 sum"
check '^math +d_source +P +P +agrees' "math: D from P"
check '^math +ds_rounded +0 +0 +agrees' "math: dS not rounded"
check 'controls \(flash, math\) consistent' "controls consistent"
out2=$(PROBE_FAKE_FLASH_FOLD=1 PYTHONPATH="$fake:$(dirname "$probe")" "$py" "$probe" --trials 2 --tests fold:fp16 \
       --backends flash --budget 1000 2>&1)
if grep -Eq '^flash +ds_scale_folded +0 +1 +CONTRADICTS' <<<"$out2" && grep -q "CONTROL FAILED" <<<"$out2"; then
  echo "ok    a flash planted folding the scale: CONTRADICTS and CONTROL FAILED"
else echo "FAIL  a flash planted folding the scale was not reported"; fail=1; fi
[ $fail -eq 0 ] || { echo "$out" | tail -40; exit 1; }
echo "probe dry run: all checks passed"
