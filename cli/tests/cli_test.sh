#!/usr/bin/env bash
# cli_test.sh FLASHCHECK MAKE_NPY ENOSPC_SO FAULTY_SO: exercises every `flashcheck` subcommand, including
# bad input, deliberately broken backends (CPU mutants, FAULTY_SO: a backend that kills its process)
# and wrong outputs that must FAIL; the "issue12 item N" checks are the regressions of issue 12
# (ENOSPC_SO: a test-only LD_PRELOAD shim that fails writes under $FC_TEST_ENOSPC_DIR with ENOSPC,
# a full disk there).
# Prints one line per check and "N passed, N failed"; exits non-zero if any check failed.
set -uo pipefail
fc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
make_npy=$2
enospc=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
faulty=$(cd "$(dirname "$4")" && pwd)/$(basename "$4")
tmp=${TEST_TMPDIR:-$(mktemp -d)}/cli
rm -rf "$tmp"; mkdir -p "$tmp"
export OMP_NUM_THREADS=1
pass=0; fail=0
out="$tmp/out.txt"

# expect RC PATTERN DESCRIPTION -- COMMAND..., check CONDITION DESCRIPTION
. ./cli/tests/expect.sh || { echo "FAIL  cannot read cli/tests/expect.sh (run from the repository or runfiles root)"; exit 1; }

# --- help, usage, exit codes --------------------------------------------------------------
expect 0 "usage: flashcheck COMMAND" "flashcheck --help" -- "$fc" --help
expect 2 "usage: flashcheck COMMAND" "no command is a usage error" -- "$fc"
expect 2 "unknown command 'bogus'" "unknown command" -- "$fc" bogus
for sub in certify fuzz repro shrink verify cases inputs; do
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
# a shrink cut off by SIGTERM (a CI step's time limit) writes the smallest failing case found so far
printf 'shape = 3 384 384 8 4 128 128\ncausal = top_left\nbackward = 1\nseed = 5\n' > "$tmp/slow.case"
env FLASHCHECK_CPU_MUTANT=causal_off_by_one "$fc" shrink "$tmp/slow.case" --backend cpu --max-runs 400 > "$tmp/shr.out" 2>&1 &
shr=$!
for _ in $(seq 1200); do grep -q "^shrinking" "$tmp/shr.out" && break; sleep 0.05; done
sleep 0.3; kill -TERM $shr; wait $shr; shr_rc=$?
check '[ $shr_rc -eq 0 ] && grep -q "stopped by signal 15" "$tmp/shr.out" && grep -q "wrote .*slow.case.min" "$tmp/shr.out"' \
  "shrink cut off by SIGTERM says so, writes FILE.min and exits 0"
check '[ -s "$tmp/slow.case.min" ] && grep -q "^shape" "$tmp/slow.case.min"' "the cut-off shrink's FILE.min is a case file"

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
expect 2 "--budget needs small or production" "fuzz rejects an unknown --budget" -- "$fc" fuzz --backend cpu --budget huge
expect 2 "--max-work needs" "fuzz rejects --max-work 0" -- "$fc" fuzz --backend cpu --max-work 0
expect 0 "budget S<=1024 D<=32 B<=4 Hq<=16 work<=4194304" "fuzz --budget production with --max-* overrides (given before or after it)" -- \
  "$fc" fuzz --backend cpu --time 2 --jobs 1 --max-seq 1024 --budget production --max-dim 32 --max-work 4194304 --corpus "$tmp/corpus_p" --findings "$tmp/findings_p"

# --- verify ---------------------------------------------------------------------------------
/usr/bin/python3 "$make_npy" "$tmp/npy" || { echo "FAIL  make_npy.py"; fail=$((fail + 1)); }
n="$tmp/npy"
expect 0 "^PASS" "verify: correct fp16 fwd+bwd outputs (GQA, causal bottom-right)" -- "$fc" verify --dir "$n/good" --causal bottom_right
expect 0 "^PASS" "verify: bf16 bits, [B,H,S,D], Fortran order, v2 header, -inf mask" -- "$fc" verify --dir "$n/good_bf16" --layout bhsd
expect 1 "o .* FAIL" "verify: one wrong element of o FAILS" -- "$fc" verify --dir "$n/wrong_o" --causal bottom_right
expect 1 "dq .* FAIL" "verify: dq off by 1% FAILS" -- "$fc" verify --dir "$n/wrong_dq" --causal bottom_right
expect 1 "^FAIL" "verify: non-causal outputs checked as causal FAIL" -- "$fc" verify --dir "$n/wrong_causal" --causal bottom_right
# regression (BOUNDS.md 5.0): without --lse the backward is judged against any LSE a correct forward may give;
# verify used to substitute the oracle's LSE and failed a correct backward that read its own forward's LSE
expect 0 "any LSE a correct forward may give" "verify without --lse: backward with an LSE within the forward bound PASSES" -- \
  "$fc" verify --dir "$n/lse_shift" --json "$tmp/vshift.json"
check '/usr/bin/python3 -c "import json,sys; assert json.load(open(sys.argv[1]))[\"backward_lse\"] == \"any-correct-forward\"" "$tmp/vshift.json"' "verify --json: backward_lse any-correct-forward without --lse"
expect 0 "^  lse .* ok$" "verify: that shifted LSE given passes the forward LSE check (a correct forward may give it)" -- \
  "$fc" verify --dir "$n/lse_shift_given"
expect 1 "dq .* FAIL" "verify: the exact LSE given, which that backward did not read, FAILS it" -- \
  "$fc" verify --dir "$n/lse_shift_exact"
expect 1 "dq .* FAIL" "verify without --lse: a backward dropping D_i still FAILS" -- "$fc" verify --dir "$n/lse_shift_broken"
# rounding bias (mean signed error/bound): near 0 for correctly rounded outputs; o rounded toward zero
# (still inside its bound) shows a clearly negative toward-zero mean
expect 0 "^PASS" "verify: correct outputs, rounding bias in the JSON" -- "$fc" verify --dir "$n/good" --causal bottom_right --json "$tmp/vgood.json"
check '/usr/bin/python3 -c "import json,sys; t=json.load(open(sys.argv[1]))[\"tensors\"]; assert all(abs(t[k][\"mean_bias\"]) < 0.01 and abs(t[k][\"mean_bias_toward_zero\"]) < 0.01 for k in t), t" "$tmp/vgood.json"' "verify: correctly rounded outputs have |mean bias| < 0.01"
expect 0 "^  o .* -0\.[0-9]+ ok$" "verify: o truncated toward zero passes its bound, bias0 column negative" -- "$fc" verify --dir "$n/trunc_o" --causal bottom_right --json "$tmp/vtrunc.json"
check '/usr/bin/python3 -c "import json,sys; o=json.load(open(sys.argv[1]))[\"tensors\"][\"o\"]; assert o[\"mean_bias_toward_zero\"] < -0.05 and abs(o[\"mean_bias\"]) < 0.05, o" "$tmp/vtrunc.json"' "verify: o truncated toward zero shows a toward-zero mean bias < -0.05"
expect 1 "non-finite failure at .*got 0, ref inf" "verify: o = 0 where an infinite v makes the exact value +inf FAILS (BOUNDS.md 11.1)" -- \
  "$fc" verify --dir "$n/inf_v_zero" --causal bottom_right
expect 0 "not judged: no finite bound" "verify: NaN there passes (0 * inf), and the unjudged elements are counted, not silent" -- \
  "$fc" verify --dir "$n/inf_v_nan" --causal bottom_right
expect 2 "'<f8' is not supported" "verify: float64 array is rejected with a hint" -- \
  "$fc" verify --q "$n/bad_float64.npy" --k "$n/good/k.npy" --v "$n/good/v.npy" --o "$n/good/o.npy"
expect 2 "truncated data" "verify: truncated file" -- \
  "$fc" verify --q "$n/bad_truncated.npy" --k "$n/good/k.npy" --v "$n/good/v.npy" --o "$n/good/o.npy"
expect 2 "big endian" "verify: big-endian file" -- \
  "$fc" verify --q "$n/bad_bigendian.npy" --k "$n/good/k.npy" --v "$n/good/v.npy" --o "$n/good/o.npy"
expect 2 "shapes disagree" "verify: inconsistent shapes" -- "$fc" verify --dir "$n/bad_shape"
expect 2 "q, k and v are required" "verify: missing arrays" -- "$fc" verify --o "$n/good/o.npy"
expect 2 "--causal must be" "verify: bad --causal" -- "$fc" verify --dir "$n/good" --causal sideways
presets="tensorcore, tensorcore-hopper, fp32, torch-flash, torch-efficient, torch-cudnn, torch-math, torch-math-lowp, torch-flex"
for pr in tensorcore fp32 torch-flash torch-efficient torch-cudnn torch-math torch-math-lowp; do
  expect 0 "profile $pr" "verify --profile $pr: correct outputs pass" -- "$fc" verify --dir "$n/good" --causal bottom_right --profile $pr
done
expect 2 "known presets are $presets" "verify: unknown --profile lists the presets" -- "$fc" verify --dir "$n/good" --profile bogus

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
# --profile NAME overrides the backend's declared profile; a wrong preset still fails (the
# CPU backend rounds P to the dtype, the fp32 preset says it does not)
expect 2 "known presets are $presets" "certify: unknown --profile lists the presets" -- "$fc" certify --backend cpu --profile bogus
expect 2 "known presets are $presets" "fuzz: unknown --profile lists the presets" -- "$fc" fuzz --backend cpu --profile bogus
expect 0 "result: CERTIFIED" "certify --profile tensorcore on cpu" -- \
  "$fc" certify --backend cpu --quick --fuzz-seconds 0 --profile tensorcore --out "$tmp/r3"
check '/usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r[\"profile\"]==\"tensorcore\" and all(\"overflow_sensitive\" in c for c in r[\"categories\"])" "$tmp/r3/report.json"' "report.json names the profile and counts overflow-sensitive cases"
check 'grep -q "precision profile: tensorcore" "$tmp/r3/report.md"' "report.md names the profile"
expect 1 "result: NOT CERTIFIED" "certify --profile fp32 on cpu (P rounded, the preset says not) fails" -- \
  "$fc" certify --backend cpu --quick --fuzz-seconds 0 --profile fp32 --out "$tmp/r4"
expect 1 "masked_row|lse" "certify --profile torch-flash on cpu fails: empty rows' LSE is -inf, the preset says +inf" -- \
  "$fc" certify --backend cpu --quick --fuzz-seconds 0 --profile torch-flash --out "$tmp/r5"
# --category NAME: one category of the fixed sweep through the same pipeline, nothing else run
expect 2 "--category needs a category of the fixed sweep: shapes, causal" "certify: unknown --category lists the categories" -- \
  "$fc" certify --backend cpu --category bogus
expect 0 "result: CERTIFIED -- category only: empty" "certify --category empty: that category alone" -- \
  "$fc" certify --backend cpu --category empty --fuzz-seconds 5 --out "$tmp/r6"
check '/usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1])); c={x[\"name\"]: x for x in r[\"categories\"]}; assert r[\"only_category\"]==\"empty\" and c[\"empty\"][\"status\"]==\"PASS\" and c[\"empty\"][\"cases\"]>0 and all(x[\"status\"]==\"not run\" and x[\"cases\"]==0 for n,x in c.items() if n!=\"empty\"), c" "$tmp/r6/report.json"' "certify --category: report.json names it; every other category (fuzz, misuse too) not run"
expect 1 "result: NOT CERTIFIED -- category only: causal" "certify --category causal of a broken backend fails" -- \
  env FLASHCHECK_CPU_MUTANT=causal_off_by_one "$fc" certify --backend cpu --category causal --fuzz-seconds 0 --out "$tmp/r7"
expect 0 "profile tensorcore" "fuzz --profile tensorcore: the summary names the profile, no finding on cpu" -- \
  "$fc" fuzz --backend cpu --time 2 --jobs 1 --max-seq 32 --max-dim 32 --profile tensorcore --corpus "$tmp/corpus3" --findings "$tmp/findings3"
expect 2 "--oracle needs auto, cpu or gpu" "fuzz: unknown --oracle tier refused" -- "$fc" fuzz --backend cpu --oracle fast
expect 0 "oracle     --oracle cpu: 0 calls on the GPU tier" "fuzz --oracle cpu: the summary counts the oracle calls by tier" -- \
  "$fc" fuzz --backend cpu --time 2 --jobs 1 --max-seq 32 --max-dim 32 --oracle cpu --corpus "$tmp/corpus5" --findings "$tmp/findings5"
expect 1 "NEW FINDING" "fuzz --profile torch-math on cpu finds bound failures (cpu rounds P, the fp32 math graph does not)" -- \
  "$fc" fuzz --backend cpu --time 3 --jobs 1 --max-seq 32 --max-dim 32 --profile torch-math --corpus "$tmp/corpus4" --findings "$tmp/findings4"

# --- issue 12: faults and usability (each check names its item) ------------------------------
i12="$tmp/i12"; mkdir -p "$i12/wd" "$i12/elsewhere" "$i12/full"
cp "$tmp/causal.case" "$i12/wd/x.case"
# item 12: an option's missing value is not taken from the next option
( cd "$i12" && expect 2 "--findings needs" "issue12 item 12: 'fuzz --findings --quiet' is a missing value" -- \
  "$fc" fuzz --backend cpu --findings --quiet )
check '[ ! -e "$i12/--quiet" ]' "issue12 item 12: no directory named --quiet"
expect 2 "--out needs" "issue12 item 12: 'certify --out --quick' is a missing value" -- "$fc" certify --backend cpu --out --quick
# item 10: an empty / shapeless repro file is a bad case file
: > "$i12/empty.case"
expect 2 "empty file is not a case file" "issue12 item 10: an empty repro file is rejected (exit 2)" -- "$fc" repro "$i12/empty.case" --backend cpu
printf 'seed = 3\n' > "$i12/noshape.case"
expect 2 "no 'shape" "issue12 item 10: a repro file without a shape is rejected" -- "$fc" repro "$i12/noshape.case" --backend cpu
# item 8: sizes overflowing 64 bits, 0 heads / head dim 0: bad case, not a backend crash; nothing to shrink
printf 'shape = 16777216 16777216 16777216 65536 65536 64 64\n' > "$i12/overflow.case"
expect 2 "overflows 64 bits" "issue12 item 8: an overflowing shape is a bad case (not crash:SEGV)" -- "$fc" repro "$i12/overflow.case" --backend cpu
expect 2 "overflows 64 bits" "issue12 item 8: shrink refuses an overflowing shape" -- "$fc" shrink "$i12/overflow.case" --backend cpu
check '[ ! -e "$i12/overflow.case.min" ]' "issue12 item 8: no .min of a bad case"
printf 'shape = 1 4 4 0 0 16 16\n' > "$i12/heads0.case"
expect 2 "at least 1 query head" "issue12 item 8: 0 heads is a bad case, not a finding" -- "$fc" repro "$i12/heads0.case" --backend cpu
printf 'shape = 1 4 4 1 1 0 0\n' > "$i12/dim0.case"
expect 2 "head dims must be >= 1" "issue12 item 8: head dim 0 is a bad case, not a finding" -- "$fc" repro "$i12/dim0.case" --backend cpu
# item 8: out of memory while materializing inputs is a harness error (exit 4), not a FAIL
printf 'shape = 1 2097152 16 8 8 128 128\nbackward = 0\n' > "$i12/big.case"
expect 4 "out of memory" "issue12 item 8: out of memory is a harness error (exit 4)" -- \
  bash -c 'ulimit -v 3000000; exec "$0" repro "$1" --backend cpu --no-determinism' "$fc" "$i12/big.case"
expect 2 "--timeout needs seconds >= 1" "issue12 item 8: repro --timeout 0.01 rejected" -- "$fc" repro "$i12/wd/x.case" --timeout 0.01
# item 16: a nonzero scale that rounds to 0 in fp32 is rejected (0 would mean the default)
printf 'shape = 1 4 4 1 1 16 16\nscale = 1e-50\n' > "$i12/scale.case"
expect 2 "scale 1e-50 rounds to 0" "issue12 item 16: case scale 1e-50 rejected" -- "$fc" repro "$i12/scale.case" --backend cpu
expect 2 "--scale 1e-50 rounds to 0" "issue12 item 16: verify --scale 1e-50 rejected" -- "$fc" verify --dir "$n/good" --scale 1e-50
# item 15: a missing --dir is named
expect 2 "--dir /nonexistent/npy: no such directory" "issue12 item 15: verify --dir of a missing directory" -- \
  "$fc" verify --dir /nonexistent/npy
# item 14: wrong lse / mask shapes show the actual shape
expect 2 "it is float32 \[2, 4, 34\]" "issue12 item 14: wrong lse shape shows expected and actual" -- \
  "$fc" verify --dir "$n/bad_lse_shape" --causal bottom_right
expect 2 "it is float32 \[1, 4, 33, 48\]" "issue12 item 14: wrong mask shape shows expected and actual" -- \
  "$fc" verify --dir "$n/bad_mask_shape"
# item 13: a NaN failure is shown, not a passing element as "worst"
expect 1 "non-finite failure at \(b=0, s=5, h=1, d=2\): got nan" "issue12 item 13: verify shows the NaN element" -- \
  "$fc" verify --dir "$n/nan_o" --causal bottom_right
check '! grep -q "worst: got" "$out"' "issue12 item 13: no passing element shown as the worst failure"
# item 6: strict JSON (an infinite ratio), atomic, nothing stale, a full disk is an error
expect 1 "o .* FAIL" "issue12 item 6: verify of a nonzero masked row (ratio inf)" -- \
  "$fc" verify --dir "$n/masked_row_nonzero" --layout bhsd --json "$i12/v.json"
check '/usr/bin/python3 -c "import json,sys
def bad(c): raise ValueError(c)
r = json.load(open(sys.argv[1]), parse_constant=bad); assert r[\"tensors\"][\"o\"][\"worst_ratio\"] == \"inf\", r" "$i12/v.json"' \
  "issue12 item 6: the JSON parses strictly, worst_ratio \"inf\""
mkdir -p "$i12/full/j"
"$fc" verify --dir "$n/good" --causal bottom_right --json "$i12/full/j/r.json" >/dev/null 2>&1
check 'grep -q PASS "$i12/full/j/r.json"' "issue12 item 6: a PASS JSON to be replaced"
expect 4 "No space left on device" "issue12 item 6: --json on a full disk exits 4 with the error" -- \
  env FC_TEST_ENOSPC_DIR="$i12/full/j" LD_PRELOAD="$enospc" "$fc" verify --dir "$n/good" --causal bottom_right --json "$i12/full/j/r.json"
check '[ -z "$(ls -A "$i12/full/j")" ]' "issue12 item 6: no 0-byte, temp or stale PASS file left"
"$fc" verify --dir "$n/good" --causal bottom_right --json "$i12/stale.json" >/dev/null 2>&1
expect 2 "" "issue12 item 6: a later run with bad input" -- "$fc" verify --dir "$n/bad_shape" --json "$i12/stale.json"
check '[ ! -e "$i12/stale.json" ]' "issue12 item 6: the older PASS JSON does not survive a failed later run"
# item 1: under bazel run, relative paths resolve against BUILD_WORKING_DIRECTORY
bwd() { ( cd "$i12/elsewhere" && BUILD_WORKING_DIRECTORY="$i12/wd" "$@" ); }
expect 1 "^FAIL" "issue12 item 1: repro of a relative FILE from BUILD_WORKING_DIRECTORY" -- \
  bwd env FLASHCHECK_CPU_MUTANT=causal_off_by_one "$fc" repro x.case --backend cpu --no-determinism
expect 0 "cases/s" "issue12 item 1: fuzz --corpus/--findings relative" -- \
  bwd "$fc" fuzz --backend cpu --time 2 --jobs 1 --max-seq 32 --max-dim 32 --corpus c1 --findings f1
check '[ -d "$i12/wd/c1" ] && [ -d "$i12/wd/f1" ] && [ ! -e "$i12/elsewhere/c1" ]' "issue12 item 1: the corpus and findings land where the user stands"
expect 0 "^PASS" "issue12 item 1: verify --dir/--json relative" -- bwd "$fc" verify --dir "$n/good" --causal bottom_right --json v1.json
check '[ -f "$i12/wd/v1.json" ]' "issue12 item 1: verify's JSON lands where the user stands"
cp "$tmp/causal.case" "$i12/wd/s.case"
expect 0 "wrote .*s.case.min" "issue12 item 1: shrink of a relative FILE" -- \
  bwd env FLASHCHECK_CPU_MUTANT=causal_off_by_one "$fc" shrink s.case --backend cpu --no-determinism --max-runs 30
# item 11: shrink never replaces an existing .min; a failed write prints the result
sum_min=$(md5sum < "$i12/wd/s.case.min")
expect 0 "wrote .*s.case.min.1" "issue12 item 11: a second shrink writes FILE.min.1" -- \
  env FLASHCHECK_CPU_MUTANT=causal_off_by_one "$fc" shrink "$i12/wd/s.case" --backend cpu --no-determinism --max-runs 30
check '[ "$(md5sum < "$i12/wd/s.case.min")" = "$sum_min" ]' "issue12 item 11: the first .min is unchanged"
mkdir -p "$i12/full/s"; cp "$tmp/causal.case" "$i12/full/s/t.case"
expect 4 "shape = " "issue12 item 11: shrink on a full disk prints the minimized case, exit 4" -- \
  env FC_TEST_ENOSPC_DIR="$i12/full/s" LD_PRELOAD="$enospc" FLASHCHECK_CPU_MUTANT=causal_off_by_one \
  "$fc" shrink "$i12/full/s/t.case" --backend cpu --no-determinism --max-runs 30
# item 5: a --baseline that is not a report is rejected before anything runs
echo '{"not": "a report"}' > "$i12/bogus.json"
expect 2 "is not a flashcheck report" "issue12 item 5: a bad --baseline is rejected at start" -- \
  "$fc" certify --backend cpu --quick --out "$i12/r-bl" --baseline "$i12/bogus.json"
check '[ ! -e "$i12/r-bl" ] && ! grep -q "cases" "$out"' "issue12 item 5: nothing ran for a bad --baseline"
# item 7: an unwritable out dir is found before anything runs
touch "$i12/afile"
expect 4 "nothing was run" "issue12 item 7: certify --out under a regular file" -- "$fc" certify --backend cpu --quick --out "$i12/afile/r"
expect 4 "cannot write to .*No space left on device.*nothing was run" "issue12 item 7: certify --out on a full disk" -- \
  env FC_TEST_ENOSPC_DIR="$i12/full" LD_PRELOAD="$enospc" "$fc" certify --backend cpu --quick --out "$i12/full/r"
check '! grep -q "cases\|report:" "$out"' "issue12 item 7: no case ran, no report path printed"
# items 1 and 4: certify's default out dir lands where the user stands; a second run on it refuses
bwd "$fc" certify --backend cpu --quick --fuzz-seconds 4 --jobs 1 >"$i12/first.log" 2>&1 &
first=$!
rdir=""
for _ in $(seq 100); do rdir=$(ls -d "$i12"/wd/flashcheck-report-cpu-* 2>/dev/null | head -1); [ -n "$rdir" ] && [ -s "$rdir/.flashcheck.lock" ] && break; sleep 0.2; done
check '[ -n "$rdir" ]' "issue12 item 1: certify's default report dir is under BUILD_WORKING_DIRECTORY ($rdir)"
if [ -n "$rdir" ]; then
  expect 2 "in use by another run \(flashcheck pid [0-9]+, started" "issue12 item 4: a second certify on the same --out refuses, naming the first" -- \
    "$fc" certify --backend cpu --quick --fuzz-seconds 0 --out "$rdir"
fi
wait $first; rc_first=$?
check '[ $rc_first -eq 0 ] && grep -q "result: CERTIFIED" "$i12/first.log" && grep -q "\"result\":.*\"PASS\"" "$rdir/report.json"' \
  "issue12 item 4: the first run finished with its own report intact (exit $rc_first)"
# cases not judged (harness errors: here the worker is SIGKILLed as by the OOM killer) never certify
expect 4 "^result: INCOMPLETE" "certify: cases killed from outside on some shapes end INCOMPLETE (exit 4)" -- \
  env FAULTY_MODE=killed "$fc" certify --backend "$faulty" --quick --fuzz-seconds 0 --out "$tmp/r_inc1"
check 'grep -Eq "^not judged: [0-9]+ case\(s\).*shapes [0-9]+" "$out"' "certify: the summary lists the categories not judged"
check '/usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r[\"result\"]==\"INCOMPLETE\" and r[\"not_judged\"][\"shapes\"]>0 and any(c[\"status\"]==\"INCOMPLETE\" for c in r[\"categories\"])" "$tmp/r_inc1/report.json"' "report.json: result INCOMPLETE, not_judged per category"
check 'grep -q "result: \*\*INCOMPLETE\*\*" "$tmp/r_inc1/report.md" && grep -q "Not judged.*shapes" "$tmp/r_inc1/report.md"' "report.md: INCOMPLETE and the categories not judged"
check '! grep -q "failures/" "$tmp/r_inc1/report.md" && [ ! -d "$tmp/r_inc1/failures" ]' "certify: killed cases are not findings against the backend"
expect 4 "^result: INCOMPLETE" "certify: every case killed (nothing judged) is INCOMPLETE, never CERTIFIED" -- \
  env FAULTY_MODE=killed_all "$fc" certify --backend "$faulty" --quick --fuzz-seconds 0 --out "$tmp/r_inc2"
# a fuzz step stopped by a signal (SIGTERM, as from `timeout`, during the fuzz step: the campaign stops
# cleanly and certify writes its reports) checked too little to count: INCOMPLETE with the reason, never
# CERTIFIED (an H100 run read "fuzz empty, 0 cases" and "result: CERTIFIED" after a timeout's SIGTERM)
"$fc" certify --backend cpu --quick --fuzz-seconds 120 --jobs 1 --out "$tmp/r_sig" >"$tmp/sig.out" 2>"$tmp/sig.err" &
sigpid=$!
for _ in $(seq 600); do grep -q "fuzzing 120 s" "$tmp/sig.err" 2>/dev/null && break; sleep 0.2; done
sleep 1; kill -TERM $sigpid; wait $sigpid; rc_sig=$?
check '[ $rc_sig -eq 4 ] && grep -q "^result: INCOMPLETE" "$tmp/sig.out" && grep -Eq "^not judged: .*fuzz 1" "$tmp/sig.out"' \
  "certify: a fuzz step stopped by SIGTERM is not judged: INCOMPLETE (exit $rc_sig), never CERTIFIED"
check 'grep -q "fuzz: harness: the fuzz step was stopped by signal 15" "$tmp/r_sig/report.md" && grep -Eq "^case [0-9]+/[0-9]+ shapes " "$tmp/r_sig/cases.log" && grep -q "^step fuzz: " "$tmp/r_sig/cases.log"' \
  "certify: report.md says why (the signal); cases.log has a line per case and per step"

# --- cases / inputs (issue 14 item 3: the pytest fixture's cases are certify's) -------------
cs="$tmp/cases"
expect 0 "^shapes-001\.case$" "cases --quick writes the fixed sweep as case files" -- "$fc" cases --out "$cs/q" --quick
nq=$(ls "$cs/q"/*.case | wc -l)
check '[ "$nq" -eq "$(/usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sum(c[\"cases\"] for c in r[\"categories\"] if c[\"name\"] in (\"shapes\",\"causal\",\"window\",\"mask\",\"gqa\",\"layout\",\"values\",\"empty\")))" "$tmp/r1/report.json")" ]' \
  "cases --quick: as many files ($nq) as certify --quick ran fixed-sweep cases"
expect 0 "" "cases (full sweep)" -- "$fc" cases --out "$cs/full"
check '[ "$(ls "$cs/full"/*.case | wc -l)" -gt "$nq" ] && [ -f "$cs/full/layout-006.case" ]' "cases: the full sweep is larger than --quick"
bad=0; for f in "$cs/q"/*.case; do "$fc" repro "$f" --backend cpu >/dev/null 2>&1 || { bad=1; echo "      | repro $f: exit $?"; }; done
check '[ $bad -eq 0 ]' "cases: every exported case is accepted by repro (and passes on cpu)"
check 'grep -q "^seed = 0x00000000000003e8" "$cs/q/shapes-001.case" && grep -q "^mask = random_neginf" "$cs/q/mask-001.case" && grep -q "^causal = bottom_right" "$cs/q/causal-004.case"' \
  "cases: certify's seeds and case fields (seed 1000 + job index, masks, causal modes)"
sum_q=$(cat "$cs/q"/*.case | md5sum)
expect 2 "already holds case files.*nothing was overwritten" "cases refuses a DIR that holds case files" -- "$fc" cases --out "$cs/q" --quick
check '[ "$(cat "$cs/q"/*.case | md5sum)" = "$sum_q" ] && [ "$(ls "$cs/q" | wc -l)" -eq "$nq" ]' "cases: the refused run changed nothing"
expect 0 "^mask-001\.case" "cases --category mask" -- "$fc" cases --out "$cs/m" --category mask
check '[ -z "$(ls "$cs/m" | grep -v "^mask-")" ] && [ "$(ls "$cs/m" | wc -l)" -eq 15 ]' "cases --category: only that category's files"
expect 2 "--category bogus: unknown" "cases: unknown category named" -- "$fc" cases --out "$cs/x" --category bogus
expect 2 "--out DIR is required" "cases without --out" -- "$fc" cases
expect 0 "" "inputs of a mask case" -- "$fc" inputs "$cs/q/mask-001.case" --out "$cs/in_mask"
check '/usr/bin/python3 -c "
import json, numpy as np, sys
d = sys.argv[1]; j = json.load(open(d + \"/case.json\"))
a = {n: np.load(d + \"/\" + n + \".npy\") for n in (\"q\", \"k\", \"v\", \"do\", \"mask\")}
assert a[\"q\"].shape == (2, 97, 2, 64) and a[\"k\"].shape == a[\"v\"].shape == (2, 129, 1, 64) and a[\"do\"].shape == (2, 97, 2, 64), {n: x.shape for n, x in a.items()}
assert all(a[n].dtype == np.float16 for n in (\"q\", \"k\", \"v\", \"do\"))
assert a[\"mask\"].dtype == np.float32 and a[\"mask\"].shape == (2, 2, 97, 129) and np.isneginf(a[\"mask\"]).any() and (a[\"mask\"][np.isfinite(a[\"mask\"])] == 0).all()
assert j[\"mask\"] is True and j[\"causal\"] == \"none\" and j[\"window\"] is None and j[\"scale\"] == 0.125 and j[\"layout\"] == \"bshd\" and j[\"dtype\"] == \"float16\", j
assert np.isfinite(a[\"q\"]).all() and 0.8 < a[\"q\"].astype(np.float64).std() < 1.2
" "$cs/in_mask"' "inputs: shapes, dtypes and case.json of a mask case (fp16, mask fp32 [B, Hq, Sq, Sk])"
bfcase=$(grep -l "^dtype = bf16" "$cs/q"/values-*.case | head -1)
expect 0 "" "inputs of a bf16 case" -- "$fc" inputs "$bfcase" --out "$cs/in_bf"
check '/usr/bin/python3 -c "
import json, numpy as np, sys
d = sys.argv[1]; j = json.load(open(d + \"/case.json\")); s = j[\"shape\"]
q = np.load(d + \"/q.npy\"); v = np.load(d + \"/v.npy\")
assert q.dtype == np.uint16 and q.shape == (s[\"B\"], s[\"Sq\"], s[\"Hq\"], s[\"Dqk\"]) and v.shape == (s[\"B\"], s[\"Sk\"], s[\"Hkv\"], s[\"Dv\"])
import os; assert not os.path.exists(d + \"/mask.npy\") and j[\"mask\"] is False and j[\"dtype\"] == \"bfloat16\"
" "$cs/in_bf"' "inputs: bf16 as uint16 bits, no mask.npy for a case without a mask"
"$fc" inputs "$cs/q/window-002.case" --out "$cs/in_w" >/dev/null 2>&1
check '/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j[\"window\"] == [127, 0] and j[\"window_align\"] == \"bottom_right\", j" "$cs/in_w/case.json"' \
  "inputs: case.json carries the window and its alignment"
"$fc" inputs "$cs/q/layout-002.case" --out "$cs/in_l" >/dev/null 2>&1
check 'grep -q "\"case_layout\":.*\"strided\"" "$cs/in_l/case.json" && grep -q "\"case_layout\":.*\"dense\"" "$cs/in_mask/case.json"' "inputs: case.json says when the case's own layouts are strided"
sum_in=$(cat "$cs/in_mask"/* | md5sum)
expect 2 "q.npy already exists.*nothing was overwritten" "inputs refuses a DIR that holds input files" -- "$fc" inputs "$cs/q/shapes-001.case" --out "$cs/in_mask"
check '[ "$(cat "$cs/in_mask"/* | md5sum)" = "$sum_in" ]' "inputs: the refused run changed nothing"
expect 2 "noshape.case.*shape" "inputs: a case file without a shape is a usage error naming the file" -- "$fc" inputs "$i12/noshape.case" --out "$cs/in_bad"
expect 2 "a case FILE is required" "inputs without FILE" -- "$fc" inputs --out "$cs/in_bad"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
