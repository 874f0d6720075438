#!/usr/bin/env bash
# run_all.sh [FILTER]: run every test in this GPU bundle (see MANIFEST) the way `bazel test` would
# (cwd = the test's runfiles workspace, TEST_SRCDIR/TEST_TMPDIR set), each with a time limit,
# and print one line per test and "N passed, N failed, N skipped". Needs a GPU; no Bazel, no network.
# A test that exits 77 could not run there (e.g. the false-alarm suite without PyTorch): SKIPPED,
# never passed.
# FILTER (a grep pattern) selects tests by label. TIMEOUT_S (default 900) limits each test.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
filter="${1:-.}"; limit="${TIMEOUT_S:-900}"
passed=0; failed=0; skipped=0; logs="$here/logs"; mkdir -p "$logs"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "run_all: no GPU visible (nvidia-smi -L failed): these are GPU tests; not run" >&2
  echo "0 passed, 0 failed, $(grep -c ' tests/' "$here/MANIFEST") skipped"; exit 1
fi
while read -r label path; do
  case "$path" in tests/*) ;; *) continue;; esac
  echo "$label" | grep -q -- "$filter" || continue
  exe="$here/$path"; rf="$exe.runfiles"
  tmp=$(mktemp -d); log="$logs/$(echo "$label" | tr '/:' '__').log"
  start=$(date +%s)
  if [ -d "$rf/flashcheck" ]; then wd="$rf/flashcheck"; else wd="$(dirname "$exe")"; fi
  args=(); [ -f "$(dirname "$exe")/args" ] && mapfile -t args < "$(dirname "$exe")/args"
  ( cd "$wd" && TEST_SRCDIR="$rf" TEST_TMPDIR="$tmp" RUNFILES_DIR="$rf" timeout "$limit" "$exe" "${args[@]}" ) > "$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then passed=$((passed+1)); printf '%-60s PASSED in %ss\n' "$label" "$secs"
  elif [ $rc -eq 77 ]; then skipped=$((skipped+1)); printf '%-60s SKIPPED (exit 77: %s)\n' "$label" "$(tail -n 1 "$log" | cut -c1-100)"
  else failed=$((failed+1)); printf '%-60s FAILED (exit %s) in %ss, log: %s\n' "$label" "$rc" "$secs" "$log"; tail -n 15 "$log" | sed 's/^/    /'; fi
  rm -rf "$tmp"
done < "$here/MANIFEST"
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
