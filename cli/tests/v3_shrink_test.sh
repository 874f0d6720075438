#!/usr/bin/env bash
# v3_shrink_test.sh FLASHCHECK: `flashcheck shrink` of a contract-v3 batch of sequences (packed Q and
# K/V, seqused_k, softcap) that fails on a CPU mutant drops sequences and shortens the rest; the
# minimized case still fails on the mutant, and `repro` of it on the correct backend does not.
set -uo pipefail
fc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
tmp=${TEST_TMPDIR:-$(mktemp -d)}/v3shrink
rm -rf "$tmp"; mkdir -p "$tmp"
export OMP_NUM_THREADS=1
fails=0
ok() { echo "ok    $1"; }
ko() { echo "FAIL  $1"; fails=$((fails + 1)); }
cat > "$tmp/batch.case" <<'CASE'
shape = 4 70 130 2 1 16 16
seqlens_q = 5,0,70,3
seqlens_k = 7,3,130,100
seqused_k = 7,2,100,65
softcap = 20
seed = 5
CASE
# dq_nondeterministic_order: dQ of a row that sees more than 64 keys changes from call to call
env FLASHCHECK_CPU_MUTANT=dq_nondeterministic_order "$fc" shrink "$tmp/batch.case" --backend cpu --quiet \
  --max-runs 200 > "$tmp/out.txt" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "wrote .*batch.case.min" "$tmp/out.txt" && ok "shrink of a v3 batch writes FILE.min" ||
  { ko "shrink of a v3 batch (exit $rc)"; tail -20 "$tmp/out.txt"; }
min="$tmp/batch.case.min"
if [ -f "$min" ]; then
  n=$(grep '^seqlens_q' "$min" | sed 's/.*= *//' | tr ',' '\n' | wc -l)
  [ "$n" -lt 4 ] && ok "sequences were dropped (4 -> $n)" || ko "no sequence dropped: $(grep '^seqlens_q' "$min")"
  sk=$(grep '^seqused_k' "$min" | sed 's/.*= *//' | tr ',' '\n' | sort -n | tail -1)
  [ "${sk:-0}" -gt 64 ] && ok "the kept sequence still sees more than one key tile ($sk keys)" || ko "used keys $sk"
  env FLASHCHECK_CPU_MUTANT=dq_nondeterministic_order "$fc" repro "$min" --backend cpu > "$tmp/r1.txt" 2>&1
  [ $? -eq 1 ] && ok "the minimized case still fails on the mutant" || { ko "minimized case does not fail"; cat "$tmp/r1.txt"; }
  "$fc" repro "$min" --backend cpu > "$tmp/r2.txt" 2>&1
  [ $? -eq 0 ] && ok "the minimized case does not fail on the correct backend" || { ko "correct backend fails"; cat "$tmp/r2.txt"; }
fi
[ $fails -eq 0 ] && echo "v3 shrink: all checks ok" || { echo "v3 shrink: $fails check(s) failed"; exit 1; }
