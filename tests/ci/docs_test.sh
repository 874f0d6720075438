#!/usr/bin/env bash
# docs_test.sh README SEEDS... -- REGRESSIONS...: the README holds no clock time and no commit hash
# (dated results go to results files), names every top-level module in its layout table and states
# where tests live; no seed file is a copy of a regression file (seeds reference them instead).
set -uo pipefail
readme=$1; shift
seeds=(); regs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do seeds+=("$1"); shift; done
shift
regs=("$@")
fails=0
ok() { echo "ok    $1"; }
ko() { echo "FAIL  $1"; fails=$((fails + 1)); }

bad=$(grep -nE '\b[0-2]?[0-9]:[0-5][0-9]\b|\bUTC\b' "$readme")
[ -z "$bad" ] && ok "README: no clock time" || ko "README: clock times: $bad"
# a commit hash: 7-40 hex digits with at least one letter and one digit
bad=$(grep -noE '\b[0-9a-f]{7,40}\b' "$readme" | grep -E ':[^:]*[a-f][^:]*$' | grep -E ':[^:]*[0-9][^:]*$')
[ -z "$bad" ] && ok "README: no commit hash" || ko "README: commit-hash-like tokens: $bad"
missing=""
for m in kernels/ case/ oracle/ properties/ fuzz/ cli/ report/ tests/ ci/ build/; do
  grep -qE "^\| \`$m" "$readme" || missing="$missing $m"
done
[ -z "$missing" ] && ok "README: layout table names the modules" || ko "README: layout table lacks$missing"
grep -q "Where tests live" "$readme" && ok "README: states where tests live" || ko "README: no test-location convention"

[ ${#seeds[@]} -gt 0 ] && [ ${#regs[@]} -gt 0 ] || ko "no seed or regression file given"
ncopies=0
for s in "${seeds[@]}"; do
  case "$s" in fuzz/regressions/*) continue ;; esac   # a reference to the regression file itself
  for r in "${regs[@]}"; do
    if cmp -s "$s" "$r"; then ko "seed $s is a copy of $r (reference the regression file instead)"; ncopies=$((ncopies + 1)); fi
  done
done
[ $ncopies -eq 0 ] && ok "no seed copies a regression file (${#seeds[@]} seeds, ${#regs[@]} regressions)"
[ $fails -eq 0 ] && echo "docs: all checks ok" || { echo "docs: $fails check(s) failed"; exit 1; }
