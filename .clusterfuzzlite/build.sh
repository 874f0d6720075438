#!/bin/bash -eu
# ClusterFuzzLite build: the same sources as fuzz/build_fuzzers.sh, with the
# compiler and sanitizer flags OSS-Fuzz provides ($CC, $CFLAGS, $LIB_FUZZING_ENGINE).
# CPU backend only (no GPU on ClusterFuzzLite runners). Findings abort
# (FLASHCHECK_ABORT=1 in the targets' options) so ClusterFuzzLite reports them.
cd "$SRC/flashcheck"
mkdir -p /tmp/fzobj
objs=()
for f in fuzz/fz_gen.c fuzz/fz_feat.c fuzz/fz_store.c fuzz/fz_harness.c fuzz/fz_misuse.c fuzz/fz_run.c \
         case/case.c case/case_clock.c case/case_text.c kernels/api/fa_api.c kernels/api/fa_validate.c \
         kernels/cpu/cpu_backend.c kernels/cpu/cpu_fwd.c kernels/cpu/cpu_bwd.c kernels/cpu/cpu_mutants.c \
         properties/check/check.c properties/check/masked_nf.c properties/check/run.c properties/check/verdict.c properties/properties.c \
         oracle/orc_*.c; do
  extra=""
  case "$f" in oracle/*) extra="-mavx2 -mfma -ffp-contract=off";; esac
  o=/tmp/fzobj/$(echo "$f" | tr / _).o
  $CC $CFLAGS -std=c11 -D_GNU_SOURCE -I. $extra -c "$f" -o "$o"
  objs+=("$o")
done
$CC $CFLAGS -std=c11 -D_GNU_SOURCE -I. -DFA_REGISTRY_CPU_ONLY -DFA_REGISTRY_NO_PY -c kernels/registry/fa_registry.c -o /tmp/fzobj/reg.o
objs+=(/tmp/fzobj/reg.o)
libs="-Wl,-Bstatic -lmpfr -lgmp -Wl,-Bdynamic -lm -ldl -lpthread"
for t in fwd bwd; do
  def=$([ $t = bwd ] && echo 1 || echo 0)
  $CC $CFLAGS -std=c11 -D_GNU_SOURCE -I. -DFZ_TARGET_BACKWARD=$def fuzz/fz_target_case.c "${objs[@]}" \
    $LIB_FUZZING_ENGINE $libs -o "$OUT/fz_$t"
  zip -qj "$OUT/fz_${t}_seed_corpus.zip" fuzz/regressions/fwd/*.case fuzz/regressions/bwd/*.case   # the case seeds (fuzz/seeds/BUILD)
  cp fuzz/flashcheck.dict "$OUT/fz_$t.dict"
  printf '[libfuzzer]\nmax_len = 8192\ntimeout = 120\n[env]\nFLASHCHECK_ABORT = 1\nFLASHCHECK_MAX_SEQ = 128\nFLASHCHECK_MAX_DIM = 64\nOMP_NUM_THREADS = 1\n' > "$OUT/fz_$t.options"
done
$CC $CFLAGS -std=c11 -D_GNU_SOURCE -I. fuzz/fz_target_misuse.c "${objs[@]}" $LIB_FUZZING_ENGINE $libs -o "$OUT/fz_misuse"
(cd fuzz/seeds/misuse && zip -q "$OUT/fz_misuse_seed_corpus.zip" *.case)
cp fuzz/flashcheck.dict "$OUT/fz_misuse.dict"
printf '[libfuzzer]\nmax_len = 8192\n[env]\nFLASHCHECK_ABORT = 1\n' > "$OUT/fz_misuse.options"
