#!/usr/bin/env bash
# v3_verify_test.sh FLASHCHECK V3_NPY_RUN MAKE_V3_NPY: `flashcheck verify` on contract-v3 .npy arrays
# (issue 16 item 4): packed q/k (cu_seqlens), seqused_k, a paged K/V cache (block table), softcap,
# sinks and dsinks. The outputs that must PASS are the CPU backend's (V3_NPY_RUN runs it on the
# inputs) and, for the packed layout, a float64 numpy reference that reads the layout itself;
# corrupted outputs (two rows of a sequence swapped, a wrong page) must FAIL; each bad input must
# be exit 2 with a message naming the file and what is wrong, and leave no --json file.
set -uo pipefail
fc=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
run=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
mk=$3
tmp=${TEST_TMPDIR:-$(mktemp -d)}/v3verify
rm -rf "$tmp"; mkdir -p "$tmp"
export OMP_NUM_THREADS=1
pass=0; fail=0
out="$tmp/out.txt"
f=$tmp/f

# expect RC PATTERN DESCRIPTION -- COMMAND..., check CONDITION DESCRIPTION
. ./cli/tests/expect.sh || { echo "FAIL  cannot read cli/tests/expect.sh (run from the repository or runfiles root)"; exit 1; }

/usr/bin/python3 "$mk" inputs "$f" || { echo "FAIL  make_v3_npy.py inputs"; exit 1; }
"$run" "$f/packed" --causal bottom_right || { echo "FAIL  CPU backend on packed/"; exit 1; }
"$run" "$f/paged" --causal bottom_right || { echo "FAIL  CPU backend on paged/"; exit 1; }
"$run" "$f/softsink" --softcap 20 || { echo "FAIL  CPU backend on softsink/"; exit 1; }
/usr/bin/python3 "$mk" corrupt "$f" || { echo "FAIL  make_v3_npy.py corrupt"; exit 1; }
V() { "$fc" verify --quiet "$@"; }

# --- correct outputs pass -------------------------------------------------------------------
expect 0 "packed q \(26 rows\), packed k \(63 rows\), seqused_k" "packed q/k + seqused_k: the CPU backend's forward and backward pass" \
  -- V --dir "$f/packed" --causal bottom_right
grep -Eq "^  dk +4032 +0 " "$out"; check '[ $? -eq 0 ]' "packed: every dk element of the 63 packed key rows judged"
expect 0 "PASS" "packed: a float64 numpy reference's forward (its own reading of the layout) passes" \
  -- V --dir "$f/packed_ref" --causal bottom_right
expect 0 "paged k/v \(9 pages of 8, 4 per sequence\)" "packed q over a paged cache (bf16, Dqk != Dv): the CPU backend's outputs pass" \
  -- V --dir "$f/paged" --causal bottom_right
expect 0 "softcap 20, sinks" "softcap + sinks (dense): forward, backward and dsinks pass" -- V --dir "$f/softsink" --softcap 20
grep -Eq "^  dsinks +4 +0 " "$out"; check '[ $? -eq 0 ]' "softsink: dsinks compared (4 heads)"
expect 0 "PASS" "single options instead of --dir" -- V --q "$f/packed/q.npy" --k "$f/packed/k.npy" --v "$f/packed/v.npy" \
  --o "$f/packed/o.npy" --lse "$f/packed/lse.npy" --cu-seqlens-q "$f/packed/cu_seqlens_q.npy" \
  --cu-seqlens-k "$f/packed/cu_seqlens_k.npy" --seqused-k "$f/packed/seqused_k.npy" --causal bottom_right

# --- wrong outputs or options fail ----------------------------------------------------------
expect 1 "first failure at \(b=2, s=12, h=0" "packed: two rows of sequence 2 of o swapped fail, at sequence 2 row 12" \
  -- V --dir "$f/packed_swap" --causal bottom_right
expect 1 "non-finite failure at \(b=2, s=14, h=2, d=3\): got inf" "packed: an Inf in o is reported at its (sequence, position)" \
  -- V --dir "$f/packed_nonfinite" --causal bottom_right
grep -Eq "non-finite failure at \(b=2, s=13, h=1, d=0\): got nan" "$out"; check '[ $? -eq 0 ]' "packed: a NaN in lse [Hq, total_q] is reported at its (sequence, position)"
expect 1 "o .* FAIL" "paged: a used block-table entry naming another page fails" -- V --dir "$f/paged_wrong_page" --causal bottom_right
expect 1 "FAIL" "softcap + sinks outputs judged without --softcap fail" -- V --dir "$f/softsink"
mkdir -p "$f/nosinks"; cp "$f"/softsink/{q,k,v,o,lse}.npy "$f/nosinks/"
expect 1 "FAIL" "softcap + sinks outputs judged without sinks.npy fail" -- V --dir "$f/nosinks" --softcap 20
expect 1 "FAIL" "packed outputs judged without seqused_k fail" -- V --q "$f/packed/q.npy" --k "$f/packed/k.npy" \
  --v "$f/packed/v.npy" --o "$f/packed/o.npy" --cu-seqlens-q "$f/packed/cu_seqlens_q.npy" \
  --cu-seqlens-k "$f/packed/cu_seqlens_k.npy" --causal bottom_right

# --- bad inputs: exit 2, the file and what is wrong, nothing written --------------------------
bad() { # DIR PATTERN DESCRIPTION [extra options]
  local d=$1 pat=$2 what=$3; shift 3
  rm -f "$tmp/res.json"; echo stale > "$tmp/res.json"
  expect 2 "$pat" "$what" -- V --dir "$f/$d" --causal bottom_right --json "$tmp/res.json" "$@"
  check "[ ! -e '$tmp/res.json' ]" "$d: no --json file left"
}
bad bad_cu_int64 "bad_cu_int64/cu_seqlens_q.npy: dtype '<i8' is not supported.*int32" "int64 cu_seqlens_q: dtype named, int32 asked"
bad bad_cu_float "bad_cu_float/cu_seqlens_k.npy must be int32 \[B\+1\].*it is float32" "float32 cu_seqlens_k"
bad bad_cu_len "bad_cu_len/cu_seqlens_k.npy has 5 entries; expected 4 \(B = 3 from .*cu_seqlens_q.npy\)" "cu_seqlens_k of the wrong length"
bad bad_cu_decreasing "bad_cu_decreasing/cu_seqlens_q.npy: varlen.cu_seqlens_q decreases at sequence 1 \(9 then 7\)" "non-monotone cu_seqlens_q (the contract's validation)"
bad bad_cu_first "bad_cu_first/cu_seqlens_k.npy: varlen.cu_seqlens_k\[0\] is 1" "cu_seqlens_k not starting at 0"
bad bad_total_rows "bad_total_rows/q.npy has 27 packed rows but .*cu_seqlens_q.npy ends at 26" "packed q rows != cu_seqlens_q[B]"
bad bad_seqused "bad_seqused/seqused_k.npy: varlen.seqused_k\[1\] is 10; it must be in \[0, 9\]" "seqused_k above the sequence's keys"
bad bad_table_range "bad_table_range/block_table.npy: paged.block_table\[0\]\[1\] is 9; page numbers must be in \[0, num_pages = 9\)" "block-table entry out of range"
bad bad_table_rows "bad_table_rows/block_table.npy has 1 rows; expected 2" "block table with the wrong number of rows"
bad bad_paged_and_cu_k "bad_paged_and_cu_k/cu_seqlens_k.npy: varlen.cu_seqlens_k is given with a paged K/V cache" "cu_seqlens_k with a block table"
bad bad_pool_rank "bad_pool_rank/k.npy has 3 dimensions; with block_table it is the page pool" "k not a 4-d page pool"
bad bad_lse_packed "bad_lse_packed/lse.npy must be float32 \[Hq, total_q\] = \[4, 26\] \(packed\)" "lse of a packed q not [Hq, total_q]"
bad bad_mask_packed "bad_mask_packed/mask.npy: an additive mask is not allowed with packed sequences" "mask with cu_seqlens (the contract's validation)"
bad bad_sinks "bad_sinks/sinks.npy must be float32 \[Hq\] = \[4\].*float32 \[5\]" "sinks of the wrong length"
bad bad_sinks_dtype "bad_sinks_dtype/sinks.npy must be float32 \[Hq\] = \[4\].*float16 \[4\]" "sinks not float32"
bad packed "--softcap: softcap is -1" "negative --softcap (the contract's validation)" --softcap -1
expect 2 "dsinks given but no sinks" "dsinks without sinks" -- V --dir "$f/nosinks" --dsinks "$f/softsink/dsinks.npy" --do "$f/softsink/do.npy"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
