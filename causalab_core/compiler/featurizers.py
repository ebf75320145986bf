"""Compile-time work for featurizers: training rows, and the identity of a loaded featurizer file."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from causalab_core.contracts import RowText
from causalab_core.document.load import Rows, load_rows
from causalab_core.document.schema import DataSpec
from causalab_core.errors import DocumentError, PlanError


def data_digest(rows: tuple[dict, ...]) -> str:
    """sha256 of the rows as canonical JSON: names the training data in a featurizer's identity."""
    return hashlib.sha256("\n".join(json.dumps(r, sort_keys=True) for r in rows).encode()).hexdigest()


@dataclass(frozen=True)
class TrainingRows:
    """A featurizer's training rows, their tokenized prompts, and the key that names the dataset."""

    rows: Rows
    prompts: dict[str, list[RowText]]
    dataset: str
    """``train:<sha256 of the rows>``: keys position caches, and names the data in a trained file's identity."""


def train_rows(data: dict, folder: Path, source: str, where: str,
               tokenize: Callable[[Rows], dict[str, list[RowText]]]) -> TrainingRows:
    """Load the training rows a ``train.data`` spec names and tokenize their inputs."""
    rows = load_rows(DataSpec.model_validate(data), folder, source, f"{where}.data")
    return TrainingRows(rows, tokenize(rows), f"train:{data_digest(rows)}")


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
