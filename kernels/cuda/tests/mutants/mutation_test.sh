#!/usr/bin/env bash
# mutation_test.sh [OPTIONS] FLASHCHECK CONTROL.so MUTANT.so... [--big-only MUTANT.so...]
#
# GPU mutation testing of the CUDA kernels (kernels/cuda/tests/mutants/BUILD). One fixed budget for
# every backend, `flashcheck certify` with:
#     --quick --fuzz-seconds $FUZZ_S --jobs 2 --stress $STRESS --timeout 120
# (default FUZZ_S = 0, STRESS = 3: the quick fixed sweep and property suite, API misuse, and stress
# mode: every sweep case that passes rerun STRESS times at many CTAs under a concurrent GPU load,
# outputs compared bitwise and, on a sample of rows, with the oracle; no fuzz step, so the budget is
# the same cases every time: a kill is reproducible from the failure files of the report). The
# control (the shipped objects through the same .so path) must be CERTIFIED (exit 0); every scored
# mutant must be NOT CERTIFIED (exit 1: killed). A harness error (exit 3 or 4, or a crash of
# flashcheck itself) is neither a kill nor a pass: the test fails and says so. Mutants after
# --big-only are equivalent below 2^31 elements: run and reported, not scored.
#
# Unobservable on this device (README of the class: BUILD, "observable-by"): a scored mutant whose
# NAME.mutant (given with --mutant-src) has the header line `observable-by: race_probe` and that
# certify CERTIFIED (exit 0; a kill is a kill, a harness error stays a failure) is judged by the race
# probe (--race-probe PROBE), run once per invocation, after every certify run, with
# `PROBE --reps R` (default 48) under a timeout (default 120 s). Only a probe that exits 0 and
# prints `VERDICT probe=valid ... tma_race=no ...` and `RULE 3 ...` or `RULE 4 with st_commit
# evidence ...` classes the mutant "unobservable on this device" (not killed, not scored as
# observable, reported with the probe's evidence); anything else (no probe given, probe missing,
# crashed, timed out, INVALID, a TMA race, plain rule 4, no RULE line) leaves it "survived".
# Prints one line per backend (what failed: the categories and the first failing check), the
# probe's evidence when it ran, and the mutation score; exits 0 only when the control passes and
# every observable scored mutant is killed.
# Options: --fuzz-seconds N, --stress N (the budget; the Bazel target uses the defaults), --jobs P,
# --race-probe PROBE, --probe-reps R, --probe-timeout S, --mutant-src NAME.mutant (repeatable).
set -uo pipefail
ANY_DEVICE=0
PROBE=""
PROBE_REPS=48
PROBE_TIMEOUT_S=120
MUTANT_SRCS=()
FUZZ_S=0
STRESS=3
NCPU=$(nproc 2>/dev/null || echo 4)
JOBS=${MUTATION_JOBS:-$(( NCPU >= 16 ? 4 : 1 ))}
while [ $# -gt 0 ]; do
  case "$1" in
    --fuzz-seconds) FUZZ_S=$2; shift 2;;
    --stress) STRESS=$2; shift 2;;
    --jobs) JOBS=$2; shift 2;;
    --race-probe) PROBE=$2; shift 2;;
    --probe-reps) PROBE_REPS=$2; shift 2;;
    --probe-timeout) PROBE_TIMEOUT_S=$2; shift 2;;
    --mutant-src) MUTANT_SRCS+=("$2"); shift 2;;
    --any-device) ANY_DEVICE=1; shift;;   # the script's own test (a stand-in flashcheck, no GPU)
    *) break;;
  esac
done
[ $# -ge 2 ] || { echo "usage: mutation_test.sh [--fuzz-seconds N] [--stress N] [--jobs P] [--race-probe PROBE] [--probe-reps R] [--mutant-src NAME.mutant]... FLASHCHECK CONTROL.so MUTANT.so... [--big-only MUTANT.so...]" >&2; exit 2; }
fc=$1; control=$2; shift 2
scored=(); big=(); mode=scored
for a in "$@"; do
  if [ "$a" = "--big-only" ]; then mode=big; continue; fi
  if [ "$mode" = scored ]; then scored+=("$a"); else big+=("$a"); fi
done
if [ "$ANY_DEVICE" = 0 ] && { ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "H100\|H200\|H800\|GH200"; }; then
  # the mutants are compiled for sm_90a only: on another GPU nothing can be judged (not a pass)
  echo "mutation_test: needs an sm_90 GPU (H100/H200); found: $(nvidia-smi -L 2>/dev/null | head -1)" >&2
  exit 1
fi
work=${TEST_TMPDIR:-$(mktemp -d)}/mutation
rm -rf "$work"; mkdir -p "$work"
budget=(--quick --fuzz-seconds "$FUZZ_S" --jobs 2 --stress "$STRESS" --timeout 120 --quiet)
# JOBS certify runs at a time share the cores: each gets NCPU / JOBS OpenMP threads (the oracle), and
# idle OpenMP threads sleep instead of spinning (several processes' spinning teams on one set of cores
# slow every one of them down many times over)
export OMP_NUM_THREADS=$(( NCPU / JOBS > 0 ? NCPU / JOBS : 1 )) OMP_WAIT_POLICY=passive
echo "mutation_test: budget: flashcheck certify ${budget[*]} (each backend; $JOBS at a time, $OMP_NUM_THREADS OpenMP threads each)"

run_one() { # name so -> writes $work/name.{rc,time,out}
  local name=$1 so=$2 t0 t1
  echo "  started $name"
  t0=$(date +%s.%N)
  "$fc" certify --backend "$so" --out "$work/$name" "${budget[@]}" > "$work/$name.out" 2>&1
  echo $? > "$work/$name.rc"
  t1=$(date +%s.%N)
  python3 -c "print('%.1f' % ($t1 - $t0))" > "$work/$name.time"
  echo "  finished $name: exit $(cat "$work/$name.rc") after $(cat "$work/$name.time") s"
}
name_of() { local b; b=$(basename "$1" .so); echo "${b#lib}"; }

all=("$control" "${scored[@]}" "${big[@]}")
running=0
for so in "${all[@]}"; do
  run_one "$(name_of "$so")" "$so" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
done
wait

# What failed, from report.json: "category:first check" for each failing category.
killed_by() {
  python3 - "$work/$1/report.json" <<'PY'
import json, re, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("(no report: %s)" % e); sys.exit(0)
out = []
for c in r.get("categories", []):
    if c.get("failed", 0):
        first = ""
        for f in c.get("failures", []):
            m = re.match(r"(\S+)", f)
            if m:
                first = m.group(1); break
        out.append("%s(%d)%s" % (c["name"], c["failed"], (" " + first) if first else ""))
print("; ".join(out) if out else "-")
PY
}

# observable_by NAME: the value of NAME.mutant's `observable-by:` header (before its first `file:`
# line), empty when it has none or no --mutant-src names it
observable_by() {
  local f
  for f in "${MUTANT_SRCS[@]}"; do
    if [ "$(basename "$f" .mutant)" = "$1" ]; then
      awk '/^file:/ { exit } /^observable-by:/ { sub(/^observable-by:[ \t]*/, ""); sub(/[ \t]+$/, ""); print; exit }' "$f"
      return
    fi
  done
}

# The race probe: run at most once, only when a mutant needs it; its verdict in PROBE_OK (1: RULE 3
# or 4 with st_commit evidence from a valid run that exited 0) and PROBE_WHY (the evidence or why not).
# $work is emptied at the start of every invocation: no earlier run's output can be read.
PROBE_RAN=0; PROBE_OK=0; PROBE_WHY=""
run_probe() {
  [ "$PROBE_RAN" = 1 ] && return
  PROBE_RAN=1
  local out="$work/race_probe.out" rc verdict rule dev
  if [ -z "$PROBE" ]; then PROBE_WHY="no race probe given (--race-probe)"; return; fi
  if [ ! -x "$PROBE" ]; then PROBE_WHY="race probe $PROBE missing or not executable"; return; fi
  echo "  running the race probe: $(basename "$PROBE") --reps $PROBE_REPS (timeout ${PROBE_TIMEOUT_S} s)"
  timeout "$PROBE_TIMEOUT_S" "$PROBE" --reps "$PROBE_REPS" > "$out" 2>&1
  rc=$?
  verdict=$(grep -m1 '^VERDICT ' "$out")
  rule=$(grep -m1 '^RULE ' "$out")
  dev=$(sed -n 's/^race_probe on \([^(]*[^( ]\) *(.*/\1/p' "$out" | head -1)
  if [ "$rc" != 0 ]; then
    PROBE_WHY="race probe exit $rc$([ "$rc" = 124 ] && echo " (timeout)")${rule:+; $rule}"
  elif [ -z "$verdict" ] || [ -z "$rule" ]; then
    PROBE_WHY="race probe printed no VERDICT/RULE line"
  elif ! echo "$verdict" | grep -q '^VERDICT probe=valid ' || ! echo "$verdict" | grep -q ' tma_race=no '; then
    PROBE_WHY="race probe: $(echo "$verdict" | grep -o 'probe=[A-Za-z]*') $(echo "$verdict" | grep -o 'tma_race=[a-z]*'); $rule"
  elif echo "$rule" | grep -q '^RULE 3 ' || echo "$rule" | grep -q '^RULE 4 with st_commit evidence'; then
    PROBE_OK=1
    PROBE_WHY="race_probe RULE $(echo "$rule" | cut -d' ' -f2-2)$(echo "$rule" | grep -q 'st_commit evidence' && echo ' with st_commit evidence'): $(echo "$verdict" | grep -o 'tma ovl=.*')${dev:+; $dev}"
  else
    PROBE_WHY="race probe: $rule"
  fi
}

status=0; killed=0; total=0; unobs=0
printf '%-34s %-8s %6s  %s\n' "backend" "result" "time_s" "killed by: category(failed cases) first failure"
for so in "${all[@]}"; do
  name=$(name_of "$so"); rc=$(cat "$work/$name.rc"); t=$(cat "$work/$name.time")
  role=scored
  [ "$so" = "$control" ] && role=control
  for b in "${big[@]}"; do [ "$so" = "$b" ] && role=big; done
  case "$rc" in
    0) res=CERTIFIED;; 1) res=KILLED;; 4) res=INCOMPLETE;; 3) res=NO-LOAD;; *) res="rc=$rc";;
  esac
  [ "$role" = control ] && [ "$rc" = 0 ] && res=PASSED
  note=""
  if [ "$role" = scored ] && [ "$rc" = 0 ] && [ "$(observable_by "$name")" = race_probe ]; then
    run_probe
    if [ "$PROBE_OK" = 1 ]; then res=UNOBSERV; note="unobservable on this device ($PROBE_WHY)";
    else note="survived: not shown unobservable ($PROBE_WHY)"; fi
  fi
  label=$name; [ "$role" = scored ] || label="$name ($role)"
  printf '%-34s %-8s %6s  %s\n' "$label" "$res" "$t" "$(killed_by "$name")"
  [ "$res" = UNOBSERV ] && role=unobservable
  [ -n "$note" ] && echo "  $note"
  case "$role" in
    control) if [ "$rc" != 0 ]; then status=1; echo "  FAIL: the unmutated control must be CERTIFIED (exit $rc); output:"; tail -25 "$work/$name.out" | sed 's/^/    /'; fi;;
    unobservable) total=$((total + 1)); unobs=$((unobs + 1));;
    scored)
      total=$((total + 1))
      if [ "$rc" = 1 ]; then killed=$((killed + 1));
      else status=1; echo "  FAIL: mutant $name survived or was not judged (exit $rc)"; tail -15 "$work/$name.out" | sed 's/^/    /'; fi;;
    big) [ "$rc" = 1 ] || [ "$rc" = 0 ] || { status=1; echo "  FAIL: $name: harness error (exit $rc)"; tail -15 "$work/$name.out" | sed 's/^/    /'; };;
  esac
done
if [ "$PROBE_RAN" = 1 ] && [ -s "$work/race_probe.out" ]; then
  echo "race probe evidence (this run):"
  grep -E '^(race_probe on|VERDICT|st_commit:|RULE)' "$work/race_probe.out" | sed 's/^/  /'
fi
python3 -c "
import sys
k, t, u = map(int, sys.argv[1:4])
o = t - u
print('mutation score: %d/%d observable mutants killed (%.0f%%); %d unobservable on this device%s; %d/%d overall'
      % (k, o, 100.0 * k / o if o else 0, u, ' (evidence above)' if u else '', k, t))" "$killed" "$total" "$unobs"
[ ${#big[@]} -gt 0 ] && echo "not scored (equivalent below 2^31 elements; issue 17's production category must kill them): ${big[*]##*/}"
exit $status
