#!/usr/bin/env bash
# benchmarks/.venv-tl: TransformerLens 4.x in its own environment, for benchmarks/sweep.py --heatmap.
# TransformerLens 4 pulls a newer transformers than causalab pins (constraints.txt), so it never
# goes into .venv; the benchmark runs this environment's python in a subprocess on the same local
# checkpoint folder. Idempotent. Only the package registry is reached; no model weights are fetched.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv-tl/bin/python ] || "$PYTHON" -m venv .venv-tl
PIP=(.venv-tl/bin/python -m pip --disable-pip-version-check -q)
# torch first and pinned as in .venv (a CPU build; an open range pulls a multi-GB CUDA build).
"${PIP[@]}" install torch==2.13.0
"${PIP[@]}" install "transformer-lens>=4,<5"
.venv-tl/bin/python -c "import transformer_lens, transformers, torch; print('TransformerLens', transformer_lens.__version__ if hasattr(transformer_lens, '__version__') else '?', 'transformers', transformers.__version__, 'torch', torch.__version__)"
