#!/usr/bin/env bash
# Checks ci/count_results.sh: the CI's closing line must count Bazel's results exactly, count a build
# error as a failure, and never report success when no test ran.
set -uo pipefail
count="$1"
fails=0
t() { # name rc expected_line expected_exit log...
  local name=$1 rc=$2 want=$3 want_exit=$4; shift 4
  local log; log=$(mktemp); printf '%s\n' "$@" > "$log"
  local got; got=$(bash "$count" "$log" "$rc" 2>/dev/null | tail -n 1); local ex=$?
  bash "$count" "$log" "$rc" >/dev/null 2>&1; ex=$?
  if [ "$got" != "$want" ] || [ "$ex" -ne "$want_exit" ]; then
    echo "FAIL $name: got '$got' exit $ex, want '$want' exit $want_exit"; fails=$((fails+1))
  else echo "ok   $name"; fi
}
t mixed 3 "2 passed, 2 failed, 1 skipped" 1 \
  "//a:x                 PASSED in 0.1s" "//a:y        (cached) PASSED in 0.1s" \
  "//b:z                 FAILED in 2.0s" "//b:w      TIMEOUT in 60.0s" "//g:gpu    SKIPPED" "INFO: noise PASSED"
t allpass 0 "3 passed, 0 failed, 1 skipped" 0 "//a:x  PASSED in 1s" "//a:y  PASSED in 1s" "//a:z  PASSED in 1s" "//g:g  SKIPPED"
t builderr 1 "1 passed, 1 failed, 0 skipped" 1 "//a:x  PASSED in 1s" "ERROR: //b:BUILD: no such target"
t nobuild 1 "0 passed, 1 failed, 0 skipped" 1 "//a:x  FAILED TO BUILD"
t notests 0 "0 passed, 1 failed, 0 skipped" 1 "INFO: nothing"
t onlyskip 0 "0 passed, 1 failed, 2 skipped" 1 "//g:a  SKIPPED" "//g:b  SKIPPED"
[ $fails -eq 0 ] && echo "count_results: all cases ok" || { echo "count_results: $fails case(s) failed"; exit 1; }
