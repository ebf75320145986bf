#!/usr/bin/env bash
# Create .venv and install core, every plugin (editable) and the test tools.
# Idempotent: a second run only checks what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
# torch first, pinned: 2.13.0 is a CPU build (an open range pulls a multi-GB CUDA build).
"${PIP[@]}" install torch==2.13.0
editable=(-e ".[test]")
for plugin in plugins/causalab-*/; do editable+=(-e "$plugin"); done
"${PIP[@]}" install -c constraints.txt "${editable[@]}"
echo "causalab installed in .venv ($(.venv/bin/causalab --help >/dev/null && echo ok))"
