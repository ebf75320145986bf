#!/usr/bin/env bash
# benchmarks/.venv-ac: auto-circuit 1.0.1 in its own environment, for benchmarks/circuits.py --peers.
# auto-circuit runs only on TransformerLens 3.x (its HookedTransformer): TransformerLens 3.9, with `attrs`
# (auto_circuit.data imports it undeclared) and one import mended: auto-circuit imports
# transformer_lens.past_key_value_caching.HookedTransformerKeyValueCache, which TransformerLens 3 renamed
# TransformerLensKeyValueCache and moved to transformer_lens.cache (it also imports the old name from the
# package itself); a module at the old path re-exports it, and the package gets the old name as an alias. auto-circuit's declared extras for tracr models, and
# plots (jax, kaleido, word2word) are left out: the benchmark imports none of them.
# Idempotent. Only the package registry is reached; no model weights are fetched.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv-ac/bin/python ] || "$PYTHON" -m venv .venv-ac
PIP=(.venv-ac/bin/python -m pip --disable-pip-version-check -q)
# torch first and pinned as in .venv (a CPU build; an open range pulls a multi-GB CUDA build).
"${PIP[@]}" install torch==2.13.0
"${PIP[@]}" install "transformer-lens==3.9.0" attrs blobfile einops ordered-set plotly vscode-tqdm
"${PIP[@]}" install --no-deps "auto-circuit==1.0.1"
SITE=$(.venv-ac/bin/python -c "import pathlib, transformer_lens; print(pathlib.Path(transformer_lens.__file__).parent)")
printf '%s\n' \
    "# Written by benchmarks/setup-autocircuit.sh: auto-circuit 1.0.1 imports this TransformerLens 2 path." \
    "from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache as HookedTransformerKeyValueCache" \
    > "$SITE/past_key_value_caching.py"
grep -q "^HookedTransformerKeyValueCache = " "$SITE/__init__.py" || printf '%s\n' \
    "# Added by benchmarks/setup-autocircuit.sh: the TransformerLens 2 name auto-circuit 1.0.1 imports." \
    "from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache as HookedTransformerKeyValueCache" \
    >> "$SITE/__init__.py"
.venv-ac/bin/python -c "import auto_circuit.data, auto_circuit.prune_algos.mask_gradient, torch; from importlib.metadata import version; print('auto-circuit', version('auto-circuit'), 'TransformerLens', version('transformer-lens'), 'torch', torch.__version__)"
