#!/usr/bin/env bash
# false_alarm_test.sh FLASHCHECK FA_NPY_RUN FA_SUITE_PY: the false-alarm suite as a GPU test.
# FA_CASES (default 1000) cases per backend. Exit 77 when python3 with PyTorch+CUDA is absent
# (SKIPPED: the suite did not run), else the suite's exit (0: no false alarm).
set -uo pipefail
fc=$(realpath "$1"); runner=$(realpath "$2"); suite=$(realpath "$3")
py=${PYTHON:-python3}
if ! command -v "$py" >/dev/null || ! "$py" -c 'import torch, numpy; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "false_alarm_test: SKIPPED: $py with PyTorch (CUDA) and numpy is not available; the suite did not run"
  exit 77
fi
work="${TEST_TMPDIR:-$(mktemp -d)}/fa_suite"
exec "$py" "$suite" --flashcheck "$fc" --cuda-runner "$runner" --out "$work" --cases "${FA_CASES:-1000}" \
  --jobs "$(nproc)" --seed "${FA_SEED:-1}"
