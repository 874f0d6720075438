#!/usr/bin/env bash
# report_test.sh FLASHCHECK REPORT_CHECK MAKE_NPY: certify's plots (report.md links SVGs that exist and
# parse), and the progress line: none when stderr is not a terminal or with --quiet, one line
# redrawn with \r on a pseudo-terminal (util-linux `script`).
set -uo pipefail
fc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
check_py=$2
make_npy=$3
tmp=${TEST_TMPDIR:-$(mktemp -d)}/report
rm -rf "$tmp"; mkdir -p "$tmp"
export OMP_NUM_THREADS=1
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok    $1"; }
ko() { fail=$((fail + 1)); echo "FAIL  $1"; [ -f "${2:-}" ] && sed 's/^/      | /' "$2" | tail -15; }

# certify on the correct backend: plots linked and present; stderr is a file: no progress line
"$fc" certify --backend cpu --quick --fuzz-seconds 0 --out "$tmp/r1" >"$tmp/o1" 2>"$tmp/e1"
[ $? -eq 0 ] && ok "certify cpu --quick" || ko "certify cpu --quick" "$tmp/e1"
/usr/bin/python3 "$check_py" "$tmp/r1" >"$tmp/c1" 2>&1 && ok "report.md links plots that exist ($(head -1 "$tmp/c1"))" || ko "plots of r1" "$tmp/c1"
grep -qE "[0-9]+/[0-9]+ cases" "$tmp/e1" && ko "no progress line when stderr is not a terminal" "$tmp/e1" || ok "no progress line when stderr is not a terminal"

# a broken backend: a heat map with a failing block, the axes stated
FLASHCHECK_CPU_MUTANT=causal_off_by_one "$fc" certify --backend cpu --quick --fuzz-seconds 0 --out "$tmp/r2" >"$tmp/o2" 2>"$tmp/e2"
[ $? -eq 1 ] && ok "certify of a broken backend fails" || ko "certify of a broken backend fails" "$tmp/o2"
/usr/bin/python3 "$check_py" "$tmp/r2" --want-heat-fail >"$tmp/c2" 2>&1 && ok "heat map of the failing blocks ($(head -1 "$tmp/c2"))" || ko "heat maps of r2" "$tmp/c2"

# a pseudo-terminal: the progress line is there, redrawn with \r; --quiet removes it
if script -qec true /dev/null >/dev/null 2>&1; then
  script -qec "'$fc' certify --backend cpu --quick --fuzz-seconds 0 --out '$tmp/r3'" /dev/null >"$tmp/t3" 2>&1
  grep -qa $'\rflashcheck certify: [0-9]*/[0-9]* cases, [0-9]*s' "$tmp/t3" && ok "certify on a terminal: progress line" || ko "certify on a terminal: progress line" "$tmp/t3"
  script -qec "'$fc' certify --backend cpu --quick --fuzz-seconds 0 --quiet --out '$tmp/r4'" /dev/null >"$tmp/t4" 2>&1
  grep -qa "cases, [0-9]*s" "$tmp/t4" && ko "certify --quiet on a terminal: no progress line" "$tmp/t4" || ok "certify --quiet on a terminal: no progress line"
  printf 'shape = 1 97 129 2 1 32 32\ncausal = top_left\nbackward = 0\nseed = 5\n' > "$tmp/causal.case"
  script -qec "env FLASHCHECK_CPU_MUTANT=causal_off_by_one '$fc' shrink '$tmp/causal.case' --backend cpu --no-determinism --max-runs 30" /dev/null >"$tmp/t5" 2>&1
  grep -qa $'\rflashcheck shrink: [0-9]*/30 runs, [0-9]*s, round 1' "$tmp/t5" && ok "shrink on a terminal: progress line" || ko "shrink on a terminal: progress line" "$tmp/t5"
  grep -qaE $'(^|\r)  round 1: B=' "$tmp/t5" && ok "shrink: round lines start on a clean line" || ko "shrink: round lines start on a clean line" "$tmp/t5"
  /usr/bin/python3 "$make_npy" "$tmp/npy" >/dev/null
  script -qec "'$fc' verify --dir '$tmp/npy/good' --causal bottom_right" /dev/null >"$tmp/t7" 2>&1
  grep -qa $'\rflashcheck verify: 0/4 steps, [0-9]*s, oracle forward' "$tmp/t7" && grep -qa "4/4 steps, [0-9]*s, done" "$tmp/t7" &&
    grep -qa "^PASS" "$tmp/t7" && ok "verify on a terminal: progress line over its steps" || ko "verify on a terminal: progress line" "$tmp/t7"
else
  echo "skip  no working \`script\` (util-linux): pseudo-terminal checks not run"
fi
env FLASHCHECK_CPU_MUTANT=causal_off_by_one "$fc" shrink "$tmp/causal.case" --backend cpu --no-determinism --max-runs 5 >"$tmp/o6" 2>"$tmp/e6"
grep -q "runs," "$tmp/e6" && ko "shrink: no progress line off a terminal" "$tmp/e6" || ok "shrink: no progress line off a terminal"

[ -d "$tmp/npy/good" ] || /usr/bin/python3 "$make_npy" "$tmp/npy" >/dev/null
"$fc" verify --dir "$tmp/npy/good" --causal bottom_right >"$tmp/o8" 2>"$tmp/e8"
[ $? -eq 0 ] && [ ! -s "$tmp/e8" ] && ok "verify: nothing on stderr off a terminal" || ko "verify: nothing on stderr off a terminal" "$tmp/e8"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
