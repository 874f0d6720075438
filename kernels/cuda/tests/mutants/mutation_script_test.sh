#!/usr/bin/env bash
# mutation_script_test.sh MUTATION_TEST.SH: the GPU mutation test's verdict logic, on a stand-in
# flashcheck (no GPU): a control that passes and mutants that are killed give exit 0 and the score;
# a surviving mutant, a failing control, or a mutant not judged (harness error, exit 4) fail it.
# The class "unobservable on this device": stand-in race probes; a surviving mutant whose .mutant has
# `observable-by: race_probe` passes as unobservable only on a probe run that exits 0 with a valid
# VERDICT and RULE 3 (or 4 with st_commit evidence); every other probe outcome leaves it survived
# (fail), a mutant without the header is never unobservable, and the probe runs at most once.
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
OPTS=()  # options before FLASHCHECK (the probe, the mutant sources) for the next expect calls
expect() { # want_rc what args...
  local want=$1 what=$2; shift 2
  local out rc
  out=$(TEST_TMPDIR="$tmp/w" bash "$script" --any-device --jobs 2 "${OPTS[@]}" "$tmp/flashcheck" "$@" 2>&1); rc=$?
  if [ "$rc" = "$want" ]; then echo "ok   $what (exit $rc)"; else echo "FAIL $what: exit $rc, want $want"; echo "$out" | sed 's/^/     /'; fails=$((fails + 1)); fi
  LAST="$out"; [ -n "${SHOW:-}" ] && echo "$out"
}
expect 0 "control passes, both mutants killed" libnone.so libm1.so libm2.so
echo "$LAST" | grep -q "mutation score: 2/2 observable mutants killed (100%); 0 unobservable on this device; 2/2 overall" || { echo "FAIL: no 100% score line"; fails=$((fails + 1)); }
echo "$LAST" | grep -q "^m1 .*KILLED.*causal(2) fwd" || { echo "FAIL: no 'killed by' column"; echo "$LAST"; fails=$((fails + 1)); }
expect 1 "a surviving mutant fails the test" libnone.so libm1.so libsurvivor.so
echo "$LAST" | grep -q "mutation score: 1/2 observable" || { echo "FAIL: survivor not in the score"; fails=$((fails + 1)); }
expect 1 "a control that is not certified fails the test" libbad_control.so libm1.so
expect 1 "a mutant not judged (harness error) is no kill" libnone.so libharness.so
expect 0 "a big-only mutant that survives is reported, not scored" libnone.so libm1.so --big-only libsurvivor.so
echo "$LAST" | grep -q "mutation score: 1/1" || { echo "FAIL: big-only mutant scored"; fails=$((fails + 1)); }

# ---- the class "unobservable on this device"
check() { # what pattern: the last output must contain the (grep -E) pattern
  if echo "$LAST" | grep -qE -- "$2"; then echo "ok   $1"; else echo "FAIL $1: no /$2/ in:"; echo "$LAST" | sed 's/^/     /'; fails=$((fails + 1)); fi
}
calls() { [ -f "$tmp/calls" ] && wc -l < "$tmp/calls" | tr -d ' ' || echo 0; }
mkdir -p "$tmp/src" "$tmp/probe"
hunk='file: kernels/cuda/fwd/fwd_sm90_ws.cu
<<<<<<< original
a
=======
b
>>>>>>> mutant'
for m in survivor survivor2 m_hdr harness_hdr; do printf '# a race\nobservable-by: race_probe\n%s\n' "$hunk" > "$tmp/src/$m.mutant"; done
printf '# a race, no header\n%s\n' "$hunk" > "$tmp/src/nohdr_survivor.mutant"
# the header after a file: line is not a header
printf '# late\n%s\nobservable-by: race_probe\n' "$hunk" > "$tmp/src/late_survivor.mutant"
verdict_ok='VERDICT probe=valid (st_last raced at N=4: wg1 K 6336 V 6336, wg2 K 6336 V 6336; tma_waited raced 0; polls given up 0) st_pass raced at N=4: wg1 K 6336 V 6336, wg2 K 6336 V 6336; st_commit raced at N=4: wg1 K 6336 V 6336, wg2 K 6336 V 6336; tma_race=no (smallest N: wg1 K 0 V 0, wg2 K 0 V 0; 0 = none); tma ovl=0 gap_min=116 margin_min=207'
mkprobe() { # name rc body (printed lines)
  { echo '#!/usr/bin/env bash'; echo "echo \"\$*\" >> '$tmp/calls'"; echo "cat <<'EOF'"; echo "race_probe on NVIDIA H100 80GB HBM3 (132 SMs, L2 50 MB): 6336 trials per row (132 CTAs x 48 launches)"; printf '%s\n' "$3"; echo "EOF"; echo "exit $2"; } > "$tmp/probe/$1"
  chmod +x "$tmp/probe/$1"
}
mkprobe rule3 0 "$verdict_ok
RULE 3 (no TMA race, no overlap, margin >= 100 cycles: equivalent on this device by timing)"
mkprobe rule4ev 0 "${verdict_ok/margin_min=207/margin_min=40}
RULE 4 with st_commit evidence (refill bytes overlapped the window or margin < 100, but no st_commit ever raced ...)"
mkprobe rule4 0 "${verdict_ok/ovl=0/ovl=12}
RULE 4 (no TMA race, but refill bytes landed inside the window or margin < 100: not shown equivalent; stress the row with the smallest gap_min)"
mkprobe rule2 0 "${verdict_ok/tma_race=no/tma_race=yes}
RULE 2 (a TMA refill raced: not equivalent; stress the smallest racing N and setup)"
mkprobe invalid 1 "${verdict_ok/probe=valid/probe=INVALID}
RULE 1 (INVALID: nothing can be concluded)"
# a valid-looking RULE 3 from a run that did not finish (timeout's exit status)
mkprobe timeout124 124 "$verdict_ok
RULE 3 (no TMA race, no overlap, margin >= 100 cycles: equivalent on this device by timing)"
mkprobe silent 0 ""
mkprobe crash 139 "race_probe: fwd.cu:1: cudaLaunch: an illegal memory access"
# a RULE 3 line without a valid VERDICT line is not evidence
mkprobe rule3_noverdict 0 "RULE 3 (no TMA race, no overlap, margin >= 100 cycles: equivalent on this device by timing)"
{ echo '#!/usr/bin/env bash'; echo "echo hang >> '$tmp/calls'"; echo 'sleep 30'; } > "$tmp/probe/hang"; chmod +x "$tmp/probe/hang"
SRC=(--mutant-src "$tmp/src/survivor.mutant" --mutant-src "$tmp/src/survivor2.mutant" --mutant-src "$tmp/src/m_hdr.mutant"
     --mutant-src "$tmp/src/harness_hdr.mutant" --mutant-src "$tmp/src/nohdr_survivor.mutant" --mutant-src "$tmp/src/late_survivor.mutant")

rm -f "$tmp/calls"
OPTS=(--race-probe "$tmp/probe/rule3" "${SRC[@]}")
expect 0 "probe RULE 3: a surviving observable-by mutant is unobservable, the test passes" libnone.so libm1.so libsurvivor.so
check "RULE 3: the UNOBSERV row" "^survivor +UNOBSERV "
check "RULE 3: the evidence line" "unobservable on this device \(race_probe RULE 3: tma ovl=0 gap_min=116 margin_min=207; NVIDIA H100 80GB HBM3\)"
check "RULE 3: the score line" "^mutation score: 1/1 observable mutants killed \(100%\); 1 unobservable on this device \(evidence above\); 1/2 overall$"
check "RULE 3: the probe's VERDICT and RULE printed" "^  RULE 3 "
[ "$(calls)" = 1 ] && echo "ok   the probe ran once" || { echo "FAIL: the probe ran $(calls) times"; fails=$((fails + 1)); }
grep -q -- "--reps 48" "$tmp/calls" && echo "ok   the probe ran with --reps 48" || { echo "FAIL: probe args: $(cat "$tmp/calls")"; fails=$((fails + 1)); }

rm -f "$tmp/calls"
OPTS=(--race-probe "$tmp/probe/rule4ev" "${SRC[@]}")
expect 0 "probe RULE 4 with st_commit evidence: unobservable, passes" libnone.so libm1.so libsurvivor.so
check "RULE 4 with evidence: the evidence line" "unobservable on this device \(race_probe RULE 4 with st_commit evidence: tma ovl=0 gap_min=116 margin_min=40"

rm -f "$tmp/calls"
OPTS=(--race-probe "$tmp/probe/rule3" "${SRC[@]}")
expect 0 "two observable-by survivors, one probe run" libnone.so libsurvivor.so libm1.so libsurvivor2.so
check "two unobservable: the score line" "^mutation score: 1/1 observable mutants killed \(100%\); 2 unobservable on this device \(evidence above\); 1/3 overall$"
[ "$(calls)" = 1 ] && echo "ok   the probe ran once for two mutants" || { echo "FAIL: the probe ran $(calls) times for two mutants"; fails=$((fails + 1)); }

for p in rule2 rule4 invalid timeout124 silent crash rule3_noverdict hang missing; do
  rm -f "$tmp/calls"
  OPTS=(--race-probe "$tmp/probe/$p" --probe-timeout 3 "${SRC[@]}")
expect 1 "probe $p: the observable-by mutant survived, the test fails" libnone.so libm1.so libsurvivor.so
  check "probe $p: survived" "^  survived: not shown unobservable"
  check "probe $p: the score line" "^mutation score: 1/2 observable mutants killed \(50%\); 0 unobservable on this device; 1/2 overall$"
  if echo "$LAST" | grep -q UNOBSERV; then echo "FAIL probe $p: classed unobservable"; fails=$((fails + 1)); fi
done

rm -f "$tmp/calls"
OPTS=("${SRC[@]}")
expect 1 "no --race-probe: the observable-by mutant survived" libnone.so libm1.so libsurvivor.so
check "no probe given: survived" "survived: not shown unobservable \(no race probe given"

rm -f "$tmp/calls"
OPTS=(--race-probe "$tmp/probe/rule3" "${SRC[@]}")
expect 1 "a survivor without the header is never unobservable, even on RULE 3" libnone.so libm1.so libnohdr_survivor.so
check "no header: the score line" "^mutation score: 1/2 observable mutants killed \(50%\); 0 unobservable on this device; 1/2 overall$"
[ "$(calls)" = 0 ] && echo "ok   no header: the probe did not run" || { echo "FAIL: the probe ran for a mutant without the header"; fails=$((fails + 1)); }
OPTS=(--race-probe "$tmp/probe/rule3" "${SRC[@]}")
expect 1 "a header after a file: line does not count" libnone.so libm1.so liblate_survivor.so

rm -f "$tmp/calls"
OPTS=(--race-probe "$tmp/probe/rule3" "${SRC[@]}")
expect 0 "a killed observable-by mutant is killed, no probe run" libnone.so libm_hdr.so
check "killed: the row" "^m_hdr +KILLED "
check "killed: the score line" "^mutation score: 1/1 observable mutants killed \(100%\); 0 unobservable on this device; 1/1 overall$"
[ "$(calls)" = 0 ] && echo "ok   killed: the probe did not run" || { echo "FAIL: the probe ran for a killed mutant"; fails=$((fails + 1)); }

OPTS=(--race-probe "$tmp/probe/rule3" "${SRC[@]}")
expect 1 "an observable-by mutant not judged (harness error) stays a failure" libnone.so libharness_hdr.so
if echo "$LAST" | grep -q UNOBSERV; then echo "FAIL: a harness error classed unobservable"; fails=$((fails + 1)); fi
OPTS=(--race-probe "$tmp/probe/rule3" "${SRC[@]}")
expect 1 "unobservable does not excuse a failing control" libbad_control.so libm1.so libsurvivor.so
[ "$fails" = 0 ] && echo "mutation_script_test: all passed" || { echo "mutation_script_test: $fails failure(s)"; exit 1; }
