#!/usr/bin/env bash
# replay_script_test.sh FLASHCHECK REPLAY_SH: replay.sh must fail, naming the file, when a file
# reproduces (a CPU mutant that breaks causal masking replays the causal regressions) or errors
# (a malformed case file, a directory without .case files), and pass with the correct backend.
set -uo pipefail
fc=$1; replay=$2
tmp=${TEST_TMPDIR:-$(mktemp -d)}/rst; rm -rf "$tmp"; mkdir -p "$tmp/bad" "$tmp/empty"
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok    $1"; }
bad() { fail=$((fail + 1)); echo "FAIL  $1"; sed 's/^/      | /' "$tmp/out" | tail -12; }

bash "$replay" "$fc" cpu fuzz/regressions/fwd >"$tmp/out" 2>&1; rc=$?
n=$(ls fuzz/regressions/fwd/*.case | wc -l)
if [ $rc -eq 0 ] && grep -q "^$n files on backend cpu: $n pass, 0 reproduce, 0 errors" "$tmp/out" \
   && [ "$(grep -c '^pass ' "$tmp/out")" -eq "$n" ]; then ok "correct backend: $n files, a line each, all pass"
else bad "correct backend: exit $rc"; fi

FLASHCHECK_CPU_MUTANT=causal_off_by_one bash "$replay" "$fc" cpu fuzz/regressions/fwd >"$tmp/out" 2>&1; rc=$?
if [ $rc -ne 0 ] && grep -q "^REPRODUCES  fuzz/regressions/fwd/causal_bottom_right_sq_gt_sk.case" "$tmp/out" \
   && grep -Eq "files on backend cpu: [0-9]+ pass, [1-9][0-9]* reproduce, 0 errors" "$tmp/out"; then
  ok "mutant causal_off_by_one: the causal regression REPRODUCES, the script fails"
else bad "mutant causal_off_by_one: exit $rc"; fi

printf 'shape = 1 x 3\n' >"$tmp/bad/garbage.case"
bash "$replay" "$fc" cpu "$tmp/bad" >"$tmp/out" 2>&1; rc=$?
if [ $rc -ne 0 ] && grep -q "^ERROR .*garbage.case (exit 2)" "$tmp/out"; then ok "a malformed case file is an ERROR, the script fails"
else bad "malformed case: exit $rc"; fi

bash "$replay" "$fc" cpu "$tmp/empty" >"$tmp/out" 2>&1; rc=$?
if [ $rc -ne 0 ] && grep -q "no .case file" "$tmp/out"; then ok "a directory without .case files is an ERROR (nothing replayed proves nothing)"
else bad "empty directory: exit $rc"; fi

bash "$replay" "$fc" /nonexistent/libnone.so fuzz/regressions/fwd >"$tmp/out" 2>&1; rc=$?
if [ $rc -ne 0 ] && grep -q "(exit 3)" "$tmp/out"; then ok "a backend that cannot be loaded: every file an ERROR"
else bad "missing backend: exit $rc"; fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
