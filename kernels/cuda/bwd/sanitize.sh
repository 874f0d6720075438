#!/bin/bash
# sanitize.sh: run the backward self-check under compute-sanitizer memcheck,
# racecheck, initcheck and synccheck on the representative "sanitize" subset
# (6 sequence-length pairs incl. 0 and 1, head dims 8/72/256, every mask kind,
# causal modes, windows, GQA, non-contiguous dO, misaligned pointers, both modes).
# Then, when the certify binary is given (or found next to the self-check), the
# same four tools on its sanitize subset of the special cases (NaN/Inf at hidden
# positions and the fp16 dS-overflow finding), which run the slow exact paths.
# Usage (GPU machine): kernels/cuda/bwd/sanitize.sh [path/to/bwd_selfcheck [path/to/bwd_certify_test]]
# Exit status: non-zero when any tool reports an error or a case fails.
set -u
BIN=${1:-.device/bwd/bwd_selfcheck}
CERT=${2:-$(dirname $BIN)/bwd_certify_test}
rc=0
for tool in memcheck racecheck initcheck synccheck; do
    extra=""
    # the backward keeps one cached device workspace per GPU for the life of the process
    # (flash_bwd.cu, "workspace"): a leak report would only name that buffer
    [ $tool = memcheck ] && extra="--leak-check no"
    [ $tool = racecheck ] && extra="--racecheck-report all"
    echo "== compute-sanitizer --tool $tool"
    compute-sanitizer --tool $tool $extra --error-exitcode 9 $BIN sanitize > /tmp/san_$tool.log 2>&1
    r=$?
    tail -n 4 /tmp/san_$tool.log
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FAIL" /tmp/san_$tool.log | head -5
    [ $r -ne 0 ] && { echo "== $tool: exit $r"; rc=1; }
done
if [ -x "$CERT" ]; then
    for tool in memcheck racecheck initcheck synccheck; do
        extra=""
        [ $tool = memcheck ] && extra="--leak-check no"
        [ $tool = racecheck ] && extra="--racecheck-report all"
        echo "== compute-sanitizer --tool $tool (special cases, slow paths)"
        compute-sanitizer --tool $tool $extra --error-exitcode 9 $CERT --special-only --sanitize --threads 16 \
            > /tmp/san_special_$tool.log 2>&1
        r=$?
        tail -n 2 /tmp/san_special_$tool.log
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^FAIL" /tmp/san_special_$tool.log | head -5
        [ $r -ne 0 ] && { echo "== $tool (special): exit $r"; rc=1; }
    done
else
    echo "== $CERT not found: special cases not sanitized"
    rc=1
fi
exit $rc
