#!/usr/bin/env bash
# campaign_isolation.sh FLASHCHECK FAULTY_SO: a backend that segfaults, hangs or reports a
# device fault on some shapes. For each mode, a short `flashcheck fuzz` must record the fault
# as a finding with its crash state, keep running (cases well beyond the faults), and a
# `flashcheck repro` of the finding must report the same failure.
set -uo pipefail
fc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
so=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
tmp=${TEST_TMPDIR:-$(mktemp -d)}/iso
rm -rf "$tmp"; mkdir -p "$tmp"
export OMP_NUM_THREADS=1
fail=0
for mode in segv hang device; do
  case $mode in segv) want="crash:SEGV";; hang) want="hang";; device) want="device";; esac
  FAULTY_MODE=$mode "$fc" fuzz --backend "$so" --time 12 --jobs 2 --timeout 2 --max-seq 40 --max-dim 32 \
    --corpus "$tmp/c-$mode" --findings "$tmp/f-$mode" >"$tmp/$mode.log" 2>&1
  rc=$?
  f=$(grep -l "^# state: faulty/.*/$want/" "$tmp/f-$mode"/*.case 2>/dev/null | head -1)
  cases=$(sed -n 's/^  cases *\([0-9]*\) checked.*/\1/p' "$tmp/$mode.log")
  if [ $rc -eq 1 ] && [ -n "$f" ] && [ "${cases:-0}" -ge 10 ]; then
    echo "ok    $mode: recorded as '$want' ($(basename "$f")), campaign went on ($cases cases checked)"
  else
    echo "FAIL  $mode: exit $rc, finding '${f:-none}', cases ${cases:-?}"; tail -8 "$tmp/$mode.log"; fail=1; continue
  fi
  FAULTY_MODE=$mode "$fc" repro "$f" --backend "$so" --timeout 3 >"$tmp/$mode.repro" 2>&1
  rrc=$?
  if [ $rrc -eq 1 ] && grep -q "same as recorded" "$tmp/$mode.repro"; then
    echo "ok    $mode: repro reproduces the recorded state"
  else
    echo "FAIL  $mode: repro exit $rrc"; cat "$tmp/$mode.repro"; fail=1
  fi
done
exit $fail
