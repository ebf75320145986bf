"""Compile-time work for featurizers: training rows, and the identity of a loaded featurizer file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from causalab_core.compiler.prompts import tokenize_inputs
from causalab_core.document.load import load_rows
from causalab_core.document.schema import DataSpec
from causalab_core.errors import DocumentError, PlanError


def data_digest(rows: tuple[dict, ...]) -> str:
    """sha256 of the rows as canonical JSON: names the training data in a featurizer's identity."""
    return hashlib.sha256("\n".join(json.dumps(r, sort_keys=True) for r in rows).encode()).hexdigest()


def train_rows(compiler: Any, train: dict, where: str):
    """Training rows, their tokenized inputs, and a key naming the dataset (cached on the compiler)."""
    spec = DataSpec.model_validate(train["data"])
    key = json.dumps(train["data"], sort_keys=True)
    cache = compiler.train_cache
    if key not in cache:
        rows = load_rows(spec, compiler.loaded.data_folder, compiler.loaded.source, f"{where}.data")
        prompts = tokenize_inputs(compiler.doc.inputs, rows, compiler.shell.tokenizer, compiler.doc.variables)
        cache[key] = (rows, prompts, f"train:{data_digest(rows)}")
    return cache[key]


def identity(model: Any, site: Any, position: Any, featurizer: Any) -> dict[str, str]:
    """What a featurizer file must match to be used here (all strings, as safetensors metadata)."""
    out = {
        "kind": featurizer.kind,
        "model_key": model.key,
        "revision": str(model.revision),
        "site": site.component,
        "layer": str(site.layer),
        "position": json.dumps(position, sort_keys=True),
    }
    if site.head is not None:
        out["head"] = str(site.head)
    for key, value in featurizer.params.items():
        if key != "load" and isinstance(value, (int, str, float)):
            out[key] = str(value)
    return out


def check_loaded(featurizer: Any, model: Any, site: Any, position: Any, where: str) -> None:
    """A featurizer loaded from a file must have been trained for this model, site and position."""
    path = featurizer.params.get("load")
    if not path:
        return
    from safetensors import safe_open

    if not Path(path).is_file():
        raise DocumentError(f"{where}.load: featurizer file {path!r} does not exist")
    with safe_open(path, framework="pt") as f:
        found = f.metadata() or {}
    for key, expected in identity(model, site, position, featurizer).items():
        if found.get(key) != expected:
            raise PlanError(
                f"{where}.load: {path} was trained with {key} = {found.get(key)!r}, this document has {expected!r}"
            )
