#!/bin/bash
# device_certify.sh: the forward's correctness runs in one GPU-machine call (repository root,
# .device/fwd carried, built by device_build.sh with NOGUARD=1; logs to $OUT):
#   fwd_certify_test (full grid, includes the NaN/Inf hidden-key cases) and sanitize.sh run
#   side by side; the hidden-key cases alone on the old kernel (FWD_NONFINITE_GUARD=0, must
#   fail) and the new one; a quick D = 128 timing of old vs new (the guard's cost); spill
#   instructions in the SASS of the D = 128 kernel, old vs new.
set -u
out="${OUT:-/tmp/certify}"
mkdir -p "$out"
bin="$(pwd)/.device/fwd"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
( cd "$bin" && timeout 560 ./fwd_certify_test --threads 8 > "$out/certify.txt" 2>&1; echo "certify exit $?" > "$out/certify_rc.txt" ) &
pid_c=$!
( cd "$bin" && timeout 560 ./sanitize.sh ./fwd_certify_test > "$out/sanitize.txt" 2>&1; echo "sanitize exit $?" > "$out/sanitize_rc.txt" ) &
pid_s=$!
"$bin/fwd_certify_test" --poison --threads 4 > "$out/poison_new.txt" 2>&1
echo "poison (new kernel): exit $?; $(tail -n 1 "$out/poison_new.txt")"
"$bin/fwd_certify_test_noguard" --poison --threads 4 > "$out/poison_old.txt" 2>&1
echo "poison (old kernel, FWD_NONFINITE_GUARD=0): exit $?; $(tail -n 1 "$out/poison_old.txt")"
grep '^FAIL' "$out/poison_new.txt" | head -n 5
grep '^FAIL' "$out/poison_old.txt" | head -n 3
k='_Z16flash_fwd_kernelILi128ELi128ELi64ELi4ELb1ELb0EEv10fwd_params'
for b in flash_bench flash_bench_noguard; do
    cuobjdump -sass -fun "$k" "$bin/$b" > "$out/sass_$b.txt" 2>&1
    echo "sass $b: $(grep -c STL "$out/sass_$b.txt") STL, $(grep -c LDL "$out/sass_$b.txt") LDL, $(grep -c HMMA "$out/sass_$b.txt") HMMA, $(wc -l < "$out/sass_$b.txt") lines"
done
wait $pid_c
wait $pid_s
cat "$out/certify_rc.txt" "$out/sanitize_rc.txt"
grep -c '^ok' "$out/certify.txt" | sed 's/^/certify ok lines: /'
grep '^FAIL' "$out/certify.txt" | head -n 8
tail -n 2 "$out/certify.txt"
grep -E '^(memcheck|racecheck|initcheck|synccheck):|^sanitize:' "$out/sanitize.txt"
# the guard's cost on the common path: old vs new kernel, same shapes, one after the other
"$bin/flash_bench_noguard" --d 128 --quick --iters 20 > "$out/bench_old.txt" 2>&1
"$bin/flash_bench" --d 128 --quick --iters 20 > "$out/bench_new.txt" 2>&1
echo "== old"; grep '^| 128' "$out/bench_old.txt"
echo "== new"; grep '^| 128' "$out/bench_new.txt"
# development experiments (FWD_DEV_ONE_VARIANT builds: the D = 128, 128x64, bf16 raw-score kernel
# forced for every shape; bench_x_NAME): guard placement and cost, scheduling knobs. Two rounds,
# interleaved; one line per run: TFLOP/s at 2k, 8k non-causal, 2k, 8k causal.
for round in 1 2; do
    for x in "$bin"/bench_x_*; do
        [ -x "$x" ] || continue
        "$x" --d 128 --dtype bf16 --quick --iters 15 > "$out/$(basename "$x")_$round.txt" 2>&1
        echo "$(basename "$x") r$round: $(grep '^| 128' "$out/$(basename "$x")_$round.txt" | awk -F'|' '{printf "%s ", $9}')"
    done
done
