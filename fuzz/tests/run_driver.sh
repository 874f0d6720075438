#!/usr/bin/env bash
# run_driver.sh DRIVER ARGS...: run a standalone fuzz driver under `bazel test`
# (cwd = the workspace runfiles root) and pass its exit status through.
# The driver prints one line per replayed file and a summary line; a finding
# exits 1 and its repro lands in $TEST_UNDECLARED_OUTPUTS_DIR/findings.
set -uo pipefail
driver=$1; shift
"$driver" "$@"
rc=$?
if [ $rc -ne 0 ] && [ -d "${TEST_UNDECLARED_OUTPUTS_DIR:-/nonexistent}/findings" ]; then
  for f in "$TEST_UNDECLARED_OUTPUTS_DIR"/findings/*.case; do
    [ -f "$f" ] && { echo "==== $f"; cat "$f"; }
  done
fi
exit $rc
