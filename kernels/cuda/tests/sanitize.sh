#!/bin/bash
# sanitize.sh: compute-sanitizer memcheck, racecheck, initcheck and synccheck
# over a representative subset of the forward certification grid (short
# sequences, every mask kind, several head dims, layouts, GQA, empty problems).
# usage: sanitize.sh PATH/TO/fwd_certify_test [EXTRA ARGS, e.g. --mma-only]
# Exit status: 0 only when every tool reports 0 errors and the test passes.
set -u
bin="${1:?usage: sanitize.sh PATH/TO/fwd_certify_test [EXTRA ARGS]}"
shift
cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
if [ ! -x "$cs" ]; then echo "FAIL: compute-sanitizer not found"; exit 1; fi
logs="${TEST_TMPDIR:-$(mktemp -d)}"  # per run: Bazel may run two sanitize tests at once
status=0
for tool in memcheck racecheck initcheck synccheck; do
    extra=""
    [ "$tool" = memcheck ] && extra="--leak-check no"
    echo "=== $tool"
    "$cs" --tool "$tool" $extra --error-exitcode 3 "$bin" --sanitize --threads 16 "$@" > "$logs/sanitize_$tool.log" 2>&1
    rc=$?
    tail -n 3 "$logs/sanitize_$tool.log"
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$logs/sanitize_$tool.log" | tail -n 1)
    echo "$tool: exit $rc; ${summary:-no summary line}"
    if [ $rc -ne 0 ] || ! echo "$summary" | grep -q " 0 "; then status=1; fi
done
[ $status -eq 0 ] && echo "sanitize: all tools clean" || echo "sanitize: FAILED"
exit $status
