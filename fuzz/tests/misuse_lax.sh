#!/usr/bin/env bash
# misuse_lax.sh DRIVER LAX_SO: the API-misuse target must catch a backend that accepts
# invalid calls (LAX_MODE=accept) and one that writes before rejecting (LAX_MODE=write).
set -uo pipefail
drv=$1; so=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail=0
for mode in accept write; do
  want=$([ $mode = accept ] && echo accepted_invalid || echo write_on_reject)
  dir="$tmp/findings-$mode"
  LAX_MODE=$mode FLASHCHECK_BACKEND="$so" FLASHCHECK_FINDINGS="$dir" "$drv" -expect_finding fuzz/seeds/misuse >"$tmp/$mode.log" 2>&1
  rc=$?
  n=$(grep -l "^# state: lax/.*/$want/" "$dir"/*.case 2>/dev/null | wc -l)
  if [ $rc -eq 0 ] && [ "$n" -gt 0 ]; then
    echo "ok    LAX_MODE=$mode: $n distinct '$want' finding(s)"
  else
    echo "FAIL  LAX_MODE=$mode: exit $rc, $n '$want' findings"; tail -5 "$tmp/$mode.log"; fail=1
  fi
done
exit $fail
