#!/bin/bash
# sanitize_test.sh PROGRAM [ARGS...]: the compute-sanitizer GPU tests. Runs PROGRAM ARGS under
# memcheck, racecheck, initcheck and synccheck (the BUILD targets pass a test binary with its
# sanitize subset, e.g. fwd_certify_test --sanitize). Passes only when every tool reports 0
# errors / 0 hazards and the program itself passes. memcheck runs without leak checking: the
# backward keeps one cached device workspace per GPU for the life of the process.
set -u
prog="${1:?usage: sanitize_test.sh PROGRAM [ARGS...]}"; shift
cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
[ -x "$cs" ] || { echo "FAIL: compute-sanitizer not found (this GPU test needs it)"; exit 1; }
logs="${TEST_TMPDIR:-$(mktemp -d)}"
status=0
for tool in memcheck racecheck initcheck synccheck; do
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check no)
    [ "$tool" = racecheck ] && extra=(--racecheck-report all)
    log="$logs/sanitize_$tool.log"
    "$cs" --tool "$tool" "${extra[@]}" --error-exitcode 3 "$prog" "$@" > "$log" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)
    echo "$tool: exit $rc; ${summary:-no summary line}; $(grep -E 'failed' "$log" | tail -n 1)"
    if [ $rc -ne 0 ] || ! echo "$summary" | grep -q " 0 "; then status=1; tail -n 20 "$log"; fi
done
[ $status -eq 0 ] && echo "sanitize: all tools clean" || echo "sanitize: FAILED"
exit $status
