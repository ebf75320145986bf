#!/usr/bin/env bash
# The engine and site tests and the toy weekdays sweep on CUDA, with a short table (engine x dtype, wall
# time, largest delta to CPU float32). Where there is no CUDA device: one line saying why, exit 0.
# Not part of CI's test command. Usage: bash scripts/gpu-check.sh  (GPU_CHECK_OUT=DIR keeps the runs there)
set -euo pipefail
cd "$(dirname "$0")/.."
export CAUSALAB_HOME="${CAUSALAB_HOME:-$PWD/.cache/causalab}"
if [ ! -x .venv/bin/python ]; then
  bash scripts/setup.sh >&2  # a fresh clone: the same .venv CI builds
fi
PY=.venv/bin/python

reason=$("$PY" - <<'EOF'
import torch
if torch.version.cuda is None:
    print(f"torch {torch.__version__} is a CPU build (install a CUDA build of torch into .venv)")
elif not torch.cuda.is_available():
    print(f"torch {torch.__version__} sees no CUDA device")
EOF
)
if [ -n "$reason" ]; then
  echo "gpu-check: skipped: $reason"
  exit 0
fi

out="${GPU_CHECK_OUT:-$(mktemp -d -t gpu-check.XXXXXX)}"
mkdir -p "$out"
tests=(tests/test_engine_parity.py tests/test_half_precision.py
       plugins/causalab-hooks/tests plugins/causalab-nnterp/tests plugins/causalab-featurizers/tests/test_das.py)
[ -f tests/test_families.py ] && tests+=(tests/test_families.py)  # the per-family site matrix
status=0
start=$SECONDS
CAUSALAB_TEST_DEVICE_MAP=cuda "$PY" -m pytest -q -p causalab_testing.device "${tests[@]}" \
  >"$out/pytest.log" 2>&1 || status=$?
summary=$(tail -n 1 "$out/pytest.log")
echo "engine and site tests on cuda: ${summary:-no output} ($((SECONDS - start)) s; log: $out/pytest.log)"
"$PY" scripts/gpu_check.py "$out" || status=$?
exit "$status"
