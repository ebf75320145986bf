#!/usr/bin/env bash
# benchmarks/.venv-saelens: SAELens 6.54 in its own environment, to write the SAE files causalab's `sae`
# featurizer is checked against (benchmarks/saelens_fixtures.py). SAELens requires transformer-lens<4, which
# pulls a newer transformers than causalab pins (constraints.txt), so it never goes into .venv. Idempotent.
# Only the package registry is reached; no model weights are fetched.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv-saelens/bin/python ] || "$PYTHON" -m venv .venv-saelens
PIP=(.venv-saelens/bin/python -m pip --disable-pip-version-check -q)
# torch first and pinned as in .venv (a CPU build; an open range pulls a multi-GB CUDA build).
"${PIP[@]}" install torch==2.13.0
"${PIP[@]}" install "sae-lens>=6.54,<6.55" "transformer-lens<4"
.venv-saelens/bin/python -c "import sae_lens, torch; print('SAELens', sae_lens.__version__, 'torch', torch.__version__)"
