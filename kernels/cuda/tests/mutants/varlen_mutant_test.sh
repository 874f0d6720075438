#!/usr/bin/env bash
# varlen_mutant_test.sh BWD_V3_TEST CONTROL.so MUTANT.so
#
# The one-grid varlen backward's mutant (bwd_sm90_varlen_k_start: a sequence's first key row read
# from cu_seqlens_q) against the test that must kill it: //kernels/cuda/tests:bwd_v3_test with its
# varlen calls through a loaded backend (--backend; the per-sequence dense reference and the forward
# stay the test binary's own). The control (libnone.so: the shipped objects through the same .so
# path) must pass (exit 0); the mutant must fail a check (exit 1: killed). A harness error (exit 2,
# a crash or a timeout) is neither: this test fails and says so. Exit 0 only when both hold.
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: $0 BWD_V3_TEST CONTROL.so MUTANT.so"; exit 2; }
test_bin=$1 control=$2 mutant=$3
fails=0
run() { # label lib want_rc
  local out rc
  out=$("$test_bin" --backend "$2" 2>&1); rc=$?
  echo "$1: exit $rc: $(echo "$out" | tail -n 1)"
  if [ "$rc" != "$3" ]; then
    echo "FAIL $1: want exit $3"; echo "$out" | grep -m 3 "^FAIL\|no backend\|error"; fails=$((fails + 1))
  fi
}
run "control $(basename "$control")" "$control" 0
run "mutant $(basename "$mutant")" "$mutant" 1
[ "$fails" = 0 ] && echo "varlen_mutant_test: control passed, mutant killed" || { echo "varlen_mutant_test: $fails failure(s)"; exit 1; }
