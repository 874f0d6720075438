#!/usr/bin/env bash
# count_results.sh LOG BAZEL_EXIT_CODE: count Bazel's per-target test results from a `bazel test` log
# (--test_summary=short lines "//pkg:name  STATUS ...") and print "N passed, N failed, N skipped".
# Exit 0 only when nothing failed and Bazel itself succeeded (exit 0) or only reported skips.
set -uo pipefail
log=$1; rc=$2
passed=$(grep -Ec '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
skipped=$(grep -Ec '^//[^ ]+ +SKIPPED' "$log")
failed=$(grep -Ec '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY|FAILED TO BUILD)' "$log")
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  # Bazel failed without a failing test line: a build or analysis error. Count it as a failure.
  echo "ci: bazel exited with $rc and no failing test line (build or analysis error); see the log above" >&2
  failed=1
fi
if [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ]; then
  echo "ci: no test ran" >&2
  failed=1
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
