#!/usr/bin/env bash
# replay.sh FLASHCHECK BACKEND DIR...: replay every *.case file under each DIR (recursively) with
# `flashcheck repro FILE --backend BACKEND` and print one line per file:
#   pass        exit 0: the case passes (a recorded failure does not reproduce; an overflow-sensitive
#               NaN/Inf, oracle/BOUNDS.md 11, is no failure either)
#   REPRODUCES  exit 1: the case fails on BACKEND
#   ERROR       any other exit (bad case file, backend not loadable, harness error) or a DIR that is
#               missing or holds no .case file (a replay of nothing proves nothing)
# then "N files: N pass, N reproduce, N errors". Exits 0 only when every file passes.
# Run from the workspace root (Bazel runs tests there; so does ci/run_all.sh in the GPU bundle).
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: replay.sh FLASHCHECK BACKEND DIR..." >&2; exit 2; }
fc=$1; backend=$2; shift 2
case "$fc" in /*) ;; *) fc="$PWD/$fc";; esac
logs=${TEST_TMPDIR:-$(mktemp -d)}/replay-logs
mkdir -p "$logs"
n=0; npass=0; nrep=0; nerr=0
for dir in "$@"; do
  if [ ! -d "$dir" ]; then echo "ERROR       $dir: not a directory"; nerr=$((nerr + 1)); continue; fi
  mapfile -t files < <(find -L "$dir" -type f -name '*.case' | LC_ALL=C sort)
  if [ ${#files[@]} -eq 0 ]; then echo "ERROR       $dir: no .case file"; nerr=$((nerr + 1)); continue; fi
  for f in "${files[@]}"; do
    n=$((n + 1))
    log="$logs/$n.log"
    "$fc" repro "$f" --backend "$backend" >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
      npass=$((npass + 1)); echo "pass        $f"
    elif [ $rc -eq 1 ]; then
      nrep=$((nrep + 1)); echo "REPRODUCES  $f"; tail -n 12 "$log" | sed 's/^/    | /'
    else
      nerr=$((nerr + 1)); echo "ERROR       $f (exit $rc)"; tail -n 8 "$log" | sed 's/^/    | /'
    fi
  done
done
echo "$n files on backend $backend: $npass pass, $nrep reproduce, $nerr errors"
[ $nrep -eq 0 ] && [ $nerr -eq 0 ]
