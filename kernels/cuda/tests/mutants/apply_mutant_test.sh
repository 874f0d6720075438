#!/usr/bin/env bash
# apply_mutant_test.sh APPLY_MUTANT.PY MUTANT...: every shipped mutant applies to today's sources
# (its snippets found exactly once: a kernel edit that moves an anchor fails here, in CI, not only
# in the GPU build), and the tool refuses a snippet found 0 or 2 times and a wrong file list.
set -euo pipefail
tool=$(realpath "$1"); shift
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fails=0
for m in "$@"; do
  files=$(grep '^file:' "$m" | sed 's/^file:[[:space:]]*//' | sort -u)
  out="$tmp/$(basename "$m" .mutant)"
  if python3 "$tool" "$m" "$out" $files; then
    for f in $files; do
      if cmp -s "$f" "$out/$f"; then echo "FAIL $m: $f unchanged by the patch"; fails=$((fails + 1)); fi
    done
    echo "ok   $(basename "$m")"
  else
    echo "FAIL $m does not apply"; fails=$((fails + 1))
  fi
done
# the tool's refusals
mkdir -p "$tmp/neg/src"
printf 'a\nb\na\n' > "$tmp/neg/src/f.cu"
printf 'file: f.cu\n<<<<<<< original\na\n=======\nx\n>>>>>>> mutant\n' > "$tmp/neg/twice.mutant"
printf 'file: f.cu\n<<<<<<< original\nzz\n=======\nx\n>>>>>>> mutant\n' > "$tmp/neg/absent.mutant"
printf 'file: f.cu\n<<<<<<< original\nb\n=======\nx\n>>>>>>> mutant\n' > "$tmp/neg/good.mutant"
cd "$tmp/neg/src"
if python3 "$tool" ../twice.mutant ../o1 f.cu 2>/dev/null; then echo "FAIL: a snippet found twice was accepted"; fails=$((fails + 1)); fi
if python3 "$tool" ../absent.mutant ../o2 f.cu 2>/dev/null; then echo "FAIL: a snippet not found was accepted"; fails=$((fails + 1)); fi
printf 'g\n' > g.cu
if python3 "$tool" ../good.mutant ../o3 f.cu g.cu 2>/dev/null; then echo "FAIL: a file list that does not match was accepted"; fails=$((fails + 1)); fi
python3 "$tool" ../good.mutant ../o4 f.cu
# the observable-by header: race_probe before the first file: line is accepted; another value, or
# the header after a file: line, is refused
{ printf 'observable-by: race_probe\n'; cat ../good.mutant; } > ../hdr.mutant
python3 "$tool" ../hdr.mutant ../o5 f.cu || { echo "FAIL: observable-by: race_probe refused"; fails=$((fails + 1)); }
{ printf 'observable-by: sanitizer\n'; cat ../good.mutant; } > ../hdr_bad.mutant
if python3 "$tool" ../hdr_bad.mutant ../o6 f.cu 2>/dev/null; then echo "FAIL: an unknown observable-by value was accepted"; fails=$((fails + 1)); fi
{ cat ../good.mutant; printf 'observable-by: race_probe\n'; } > ../hdr_late.mutant
if python3 "$tool" ../hdr_late.mutant ../o7 f.cu 2>/dev/null; then echo "FAIL: an observable-by header after file: was accepted"; fails=$((fails + 1)); fi
[ "$(cat ../o4/f.cu)" = "$(printf 'a\nx\na')" ] || { echo "FAIL: the good patch gave: $(cat ../o4/f.cu)"; fails=$((fails + 1)); }
[ "$fails" = 0 ] && echo "apply_mutant_test: all passed" || { echo "apply_mutant_test: $fails failure(s)"; exit 1; }
