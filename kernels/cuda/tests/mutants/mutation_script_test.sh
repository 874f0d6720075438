#!/usr/bin/env bash
# mutation_script_test.sh MUTATION_TEST.SH: the GPU mutation test's verdict logic, on a stand-in
# flashcheck (no GPU): a control that passes and mutants that are killed give exit 0 and the score;
# a surviving mutant, a failing control, or a mutant not judged (harness error, exit 4) fail it.
set -uo pipefail
script=$(realpath "$1")
tmp=${TEST_TMPDIR:-$(mktemp -d)}/mst
rm -rf "$tmp"; mkdir -p "$tmp"
cat > "$tmp/flashcheck" <<'FAKE'
#!/usr/bin/env bash
# certify --backend X --out DIR ...: the verdict is in X's name (none/ok: CERTIFIED, survivor:
# CERTIFIED, harness: INCOMPLETE, anything else: NOT CERTIFIED by category "causal")
be=""; out=""
while [ $# -gt 0 ]; do case "$1" in --backend) be=$2; shift 2;; --out) out=$2; shift 2;; *) shift;; esac; done
mkdir -p "$out"
case "$(basename "$be")" in
  *none*|*ok*|*survivor*) echo '{"categories":[{"name":"causal","failed":0,"failures":[]}]}' > "$out/report.json"; exit 0;;
  *harness*) echo '{"categories":[{"name":"causal","failed":0,"not_judged":3,"failures":[]}]}' > "$out/report.json"; exit 4;;
  *) echo '{"categories":[{"name":"causal","failed":2,"failures":["fwd o bound causal ... -> failures/x.case"]}]}' > "$out/report.json"; exit 1;;
esac
FAKE
chmod +x "$tmp/flashcheck"
fails=0
expect() { # want_rc what args...
  local want=$1 what=$2; shift 2
  local out rc
  out=$(TEST_TMPDIR="$tmp/w" bash "$script" --any-device --jobs 2 "$tmp/flashcheck" "$@" 2>&1); rc=$?
  if [ "$rc" = "$want" ]; then echo "ok   $what (exit $rc)"; else echo "FAIL $what: exit $rc, want $want"; echo "$out" | sed 's/^/     /'; fails=$((fails + 1)); fi
  LAST="$out"
}
expect 0 "control passes, both mutants killed" libnone.so libm1.so libm2.so
echo "$LAST" | grep -q "mutation score: 2/2 killed (100%)" || { echo "FAIL: no 100% score line"; fails=$((fails + 1)); }
echo "$LAST" | grep -q "^m1 .*KILLED.*causal(2) fwd" || { echo "FAIL: no 'killed by' column"; echo "$LAST"; fails=$((fails + 1)); }
expect 1 "a surviving mutant fails the test" libnone.so libm1.so libsurvivor.so
echo "$LAST" | grep -q "mutation score: 1/2" || { echo "FAIL: survivor not in the score"; fails=$((fails + 1)); }
expect 1 "a control that is not certified fails the test" libbad_control.so libm1.so
expect 1 "a mutant not judged (harness error) is no kill" libnone.so libharness.so
expect 0 "a big-only mutant that survives is reported, not scored" libnone.so libm1.so --big-only libsurvivor.so
echo "$LAST" | grep -q "mutation score: 1/1" || { echo "FAIL: big-only mutant scored"; fails=$((fails + 1)); }
[ "$fails" = 0 ] && echo "mutation_script_test: all passed" || { echo "mutation_script_test: $fails failure(s)"; exit 1; }
