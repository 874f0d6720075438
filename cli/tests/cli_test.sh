#!/usr/bin/env bash
# cli_test.sh FLASHCHECK MAKE_NPY FAULTY_SO: exercises every `flashcheck` subcommand, including bad
# input, deliberately broken backends (CPU mutants) and wrong outputs that must FAIL.
# Prints one line per check and "N passed, N failed"; exits non-zero if any check failed.
set -uo pipefail
fc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
make_npy=$2
faulty=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
tmp=${TEST_TMPDIR:-$(mktemp -d)}/cli
rm -rf "$tmp"; mkdir -p "$tmp"
export OMP_NUM_THREADS=1
pass=0; fail=0
out="$tmp/out.txt"

# expect RC PATTERN DESCRIPTION -- COMMAND...: run COMMAND, check its exit code and that its
# output (stdout+stderr) matches the extended regex PATTERN ("" = no output check)
expect() {
  local rc=$1 pat=$2 what=$3; shift 4
  "$@" >"$out" 2>&1; local got=$?
  if [ "$got" -eq "$rc" ] && { [ -z "$pat" ] || grep -Eq -- "$pat" "$out"; }; then
    pass=$((pass + 1)); echo "ok    $what"
  else
    fail=$((fail + 1)); echo "FAIL  $what: exit $got (want $rc), pattern '$pat'"; sed 's/^/      | /' "$out" | tail -15
  fi
}
check() { # CONDITION-COMMAND DESCRIPTION
  if eval "$1"; then pass=$((pass + 1)); echo "ok    $2"; else fail=$((fail + 1)); echo "FAIL  $2 ($1)"; fi
}

# --- help, usage, exit codes --------------------------------------------------------------
expect 0 "usage: flashcheck COMMAND" "flashcheck --help" -- "$fc" --help
expect 2 "usage: flashcheck COMMAND" "no command is a usage error" -- "$fc"
expect 2 "unknown command 'bogus'" "unknown command" -- "$fc" bogus
for sub in certify fuzz repro shrink verify; do
  expect 0 "usage: flashcheck $sub" "$sub --help" -- "$fc" $sub --help
  expect 2 "unknown option|unknown option or argument" "$sub rejects an unknown option" -- "$fc" $sub --no-such-option
done

# --- repro ----------------------------------------------------------------------------------
reg=fuzz/regressions
expect 0 "^PASS" "repro of a regression file passes on cpu" -- "$fc" repro $reg/fwd/fully_masked_rows.case --backend cpu
expect 0 "PASS: the invalid call was rejected" "repro of an API-misuse file" -- "$fc" repro $reg/misuse/lse_inside_o.case --backend cpu
expect 2 "cannot open" "repro of a missing file" -- "$fc" repro "$tmp/nope.case" --backend cpu
printf 'shape = 1 x 3\n' > "$tmp/garbage.case"
expect 2 "line 1" "repro of a malformed case names the line" -- "$fc" repro "$tmp/garbage.case" --backend cpu
expect 3 "cannot load backend" "repro with a missing backend .so" -- "$fc" repro $reg/fwd/empty_keys.case --backend /nonexistent/libnone.so
expect 2 "missing FILE" "repro without FILE" -- "$fc" repro --backend cpu
printf 'shape = 2 97 129 4 2 64 64\ncausal = top_left\nbackward = 0\nseed = 5\n' > "$tmp/causal.case"
expect 1 "^FAIL" "repro catches a broken causal mask (mutant causal_off_by_one)" -- \
  env FLASHCHECK_CPU_MUTANT=causal_off_by_one "$fc" repro "$tmp/causal.case" --backend cpu

# --- shrink ---------------------------------------------------------------------------------
sum_before=$(md5sum < "$tmp/causal.case")
expect 0 "wrote .*causal.case.min" "shrink writes FILE.min" -- \
  env FLASHCHECK_CPU_MUTANT=causal_off_by_one "$fc" shrink "$tmp/causal.case" --backend cpu --no-determinism
check '[ "$(md5sum < "$tmp/causal.case")" = "$sum_before" ]' "shrink leaves the input file unchanged"
check '[ -f "$tmp/causal.case.min" ]' "FILE.min exists"
if [ -f "$tmp/causal.case.min" ]; then
  read -r _ _ b sq sk hq hkv d _ < <(grep '^shape' "$tmp/causal.case.min")
  check '[ $((b * sq * sk * hq * d)) -lt $((2 * 97 * 129 * 4 * 64)) ]' "the minimized case is smaller (B=$b Sq=$sq Sk=$sk Hq=$hq D=$d)"
  expect 1 "^FAIL" "the minimized case still fails on the mutant" -- \
    env FLASHCHECK_CPU_MUTANT=causal_off_by_one "$fc" repro "$tmp/causal.case.min" --backend cpu
  expect 0 "^PASS" "the minimized case passes on the real backend" -- "$fc" repro "$tmp/causal.case.min" --backend cpu
fi
expect 1 "nothing to shrink" "shrink of a passing case" -- "$fc" shrink $reg/fwd/empty_keys.case --backend cpu

# --- fuzz -----------------------------------------------------------------------------------
expect 0 "cases/s" "fuzz: short campaign on cpu, status and summary" -- \
  "$fc" fuzz --backend cpu --time 4 --jobs 1 --max-seq 32 --max-dim 32 --corpus "$tmp/corpus" --findings "$tmp/findings"
check '[ -n "$(ls "$tmp/corpus")" ]' "fuzz: the corpus grew"
check '[ -z "$(ls "$tmp/findings" 2>/dev/null | grep case)" ]' "fuzz: no finding on the real backend"
expect 1 "NEW FINDING" "fuzz finds a broken backend (mutant lse_log2)" -- \
  env FLASHCHECK_CPU_MUTANT=lse_log2 "$fc" fuzz --backend cpu --time 10 --jobs 2 --max-seq 32 --max-dim 32 \
  --corpus "$tmp/corpus2" --findings "$tmp/findings2"
check 'grep -q "^# state: cpu/fwd/lse/" "$tmp"/findings2/*.case' "fuzz: findings carry the crash state (pass/tensor)"
f1=$(ls "$tmp"/findings2/*.case 2>/dev/null | head -1)
[ -n "$f1" ] && expect 1 "same as recorded" "repro of a fuzz finding reproduces its state" -- \
  env FLASHCHECK_CPU_MUTANT=lse_log2 "$fc" repro "$f1" --backend cpu
expect 2 "--jobs needs" "fuzz rejects --jobs 0" -- "$fc" fuzz --backend cpu --jobs 0

# --- verify ---------------------------------------------------------------------------------
/usr/bin/python3 "$make_npy" "$tmp/npy" || { echo "FAIL  make_npy.py"; fail=$((fail + 1)); }
n="$tmp/npy"
expect 0 "^PASS" "verify: correct fp16 fwd+bwd outputs (GQA, causal bottom-right)" -- "$fc" verify --dir "$n/good" --causal bottom_right
expect 0 "^PASS" "verify: bf16 bits, [B,H,S,D], Fortran order, v2 header, -inf mask" -- "$fc" verify --dir "$n/good_bf16" --layout bhsd
expect 1 "o .* FAIL" "verify: one wrong element of o FAILS" -- "$fc" verify --dir "$n/wrong_o" --causal bottom_right
expect 1 "dq .* FAIL" "verify: dq off by 1% FAILS" -- "$fc" verify --dir "$n/wrong_dq" --causal bottom_right
expect 1 "^FAIL" "verify: non-causal outputs checked as causal FAIL" -- "$fc" verify --dir "$n/wrong_causal" --causal bottom_right
# rounding bias (mean signed error/bound): near 0 for correctly rounded outputs; o rounded toward zero
# (still inside its bound) shows a clearly negative toward-zero mean
expect 0 "^PASS" "verify: correct outputs, rounding bias in the JSON" -- "$fc" verify --dir "$n/good" --causal bottom_right --json "$tmp/vgood.json"
check '/usr/bin/python3 -c "import json,sys; t=json.load(open(sys.argv[1]))[\"tensors\"]; assert all(abs(t[k][\"mean_bias\"]) < 0.01 and abs(t[k][\"mean_bias_toward_zero\"]) < 0.01 for k in t), t" "$tmp/vgood.json"' "verify: correctly rounded outputs have |mean bias| < 0.01"
expect 0 "^  o .* -0\.[0-9]+ ok$" "verify: o truncated toward zero passes its bound, bias0 column negative" -- "$fc" verify --dir "$n/trunc_o" --causal bottom_right --json "$tmp/vtrunc.json"
check '/usr/bin/python3 -c "import json,sys; o=json.load(open(sys.argv[1]))[\"tensors\"][\"o\"]; assert o[\"mean_bias_toward_zero\"] < -0.05 and abs(o[\"mean_bias\"]) < 0.05, o" "$tmp/vtrunc.json"' "verify: o truncated toward zero shows a toward-zero mean bias < -0.05"
expect 2 "'<f8' is not supported" "verify: float64 array is rejected with a hint" -- \
  "$fc" verify --q "$n/bad_float64.npy" --k "$n/good/k.npy" --v "$n/good/v.npy" --o "$n/good/o.npy"
expect 2 "truncated data" "verify: truncated file" -- \
  "$fc" verify --q "$n/bad_truncated.npy" --k "$n/good/k.npy" --v "$n/good/v.npy" --o "$n/good/o.npy"
expect 2 "big endian" "verify: big-endian file" -- \
  "$fc" verify --q "$n/bad_bigendian.npy" --k "$n/good/k.npy" --v "$n/good/v.npy" --o "$n/good/o.npy"
expect 2 "shapes disagree" "verify: inconsistent shapes" -- "$fc" verify --dir "$n/bad_shape"
expect 2 "q, k and v are required" "verify: missing arrays" -- "$fc" verify --o "$n/good/o.npy"
expect 2 "--causal must be" "verify: bad --causal" -- "$fc" verify --dir "$n/good" --causal sideways

# --- certify --------------------------------------------------------------------------------
expect 0 "result: CERTIFIED" "certify --quick on cpu" -- "$fc" certify --backend cpu --quick --fuzz-seconds 2 --jobs 1 --out "$tmp/r1"
check '[ -f "$tmp/r1/report.md" ] && [ -f "$tmp/r1/report.json" ]' "certify wrote report.md and report.json"
check '/usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r[\"result\"]==\"PASS\" and len(r[\"categories\"])>=10" "$tmp/r1/report.json"' "report.json parses and says PASS"
check '/usr/bin/python3 -c "import json,sys; b=json.load(open(sys.argv[1]))[\"rounding_bias\"]; assert set(b) >= {\"o\",\"lse\",\"dq\",\"dk\",\"dv\"} and all(v[\"elements\"] > 0 and abs(v[\"mean_bias\"]) < 0.01 for v in b.values()), b" "$tmp/r1/report.json"' "certify: report.json rounding bias per tensor, |mean| < 0.01 on the cpu backend"
check 'grep -q "^| o | [0-9]* | " "$tmp/r1/report.md"' "certify: report.md has the rounding-bias table"
expect 2 "already holds a report" "certify refuses to overwrite a report" -- "$fc" certify --backend cpu --quick --out "$tmp/r1"
expect 2 "cannot read" "certify with a missing baseline" -- "$fc" certify --backend cpu --baseline "$tmp/none.json"
expect 1 "REGRESSION causal" "certify of a broken backend against the baseline flags the regression" -- \
  env FLASHCHECK_CPU_MUTANT=causal_off_by_one "$fc" certify --backend cpu --quick --fuzz-seconds 0 --out "$tmp/r2" --baseline "$tmp/r1/report.json"
check 'grep -q "failures/" "$tmp/r2/report.md"' "the failing report lists repro files"
# cases not judged (harness errors: here the worker is SIGKILLed as by the OOM killer) never certify
expect 4 "^result: INCOMPLETE" "certify: cases killed from outside on some shapes end INCOMPLETE (exit 4)" -- \
  env FAULTY_MODE=killed "$fc" certify --backend "$faulty" --quick --fuzz-seconds 0 --out "$tmp/r3"
check 'grep -Eq "^not judged: [0-9]+ case\(s\).*shapes [0-9]+" "$out"' "certify: the summary lists the categories not judged"
check '/usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r[\"result\"]==\"INCOMPLETE\" and r[\"not_judged\"][\"shapes\"]>0 and any(c[\"status\"]==\"INCOMPLETE\" for c in r[\"categories\"])" "$tmp/r3/report.json"' "report.json: result INCOMPLETE, not_judged per category"
check 'grep -q "result: \*\*INCOMPLETE\*\*" "$tmp/r3/report.md" && grep -q "Not judged.*shapes" "$tmp/r3/report.md"' "report.md: INCOMPLETE and the categories not judged"
check '! grep -q "failures/" "$tmp/r3/report.md" && [ ! -d "$tmp/r3/failures" ]' "certify: killed cases are not findings against the backend"
expect 4 "^result: INCOMPLETE" "certify: every case killed (nothing judged) is INCOMPLETE, never CERTIFIED" -- \
  env FAULTY_MODE=killed_all "$fc" certify --backend "$faulty" --quick --fuzz-seconds 0 --out "$tmp/r4"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
