"""Compile-time work for featurizers: training rows, and the identity of a loaded featurizer file."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from causalab_core.document.causal import rows_digest
from causalab_core.plugins.contracts import RowText
from causalab_core.document.load import Rows, load_rows, safetensors_metadata
from causalab_core.document.schema import DataSpec
from causalab_core.errors import DocumentError, PlanError, echo
from causalab_core.results.manifest import vouched_file


def data_digest(rows: tuple[dict, ...]) -> str:
    """sha256 of the rows as canonical JSON: names the training data in a featurizer's identity."""
    return rows_digest(rows)


@dataclass(frozen=True)
class TrainingRows:
    """A featurizer's training rows, their tokenized prompts, and the key that names the dataset."""

    rows: Rows
    prompts: dict[str, list[RowText]]
    dataset: str
    """``train:<sha256 of the rows>``: keys position caches, and names the data in a trained file's identity."""


def train_rows(data: dict, folder: Path, source: str, where: str,
               tokenize: Callable[[Rows], dict[str, list[RowText]]], registry: Any) -> TrainingRows:
    """Load (or generate) the training rows a ``train.data`` spec names and tokenize their inputs."""
    rows = load_rows(DataSpec.model_validate(data), folder, source, f"{where}.data", registry)
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


def with_loaded_state(featurizer: Any, model: Any, site: Any, position: Any, where: str) -> Any:
    """A featurizer that loads a trained file: its bytes read once, checked against this model, site and
    position, and carried in the plan (``state``, ``state_digest``) instead of the path."""
    path = featurizer.params.get("load")
    if not path:
        return featurizer
    # load_document checked the file already (with the document's name); this is the file as it is now.
    named = f"{where}.load: featurizer file {echo(str(path))}"
    try:
        data = vouched_file(Path(path))  # a file of a causalab run: as its manifest lists it, or refused
    except OSError as exc:
        raise DocumentError(f"{named} cannot be read: {exc.strerror or exc}") from None
    found = safetensors_metadata(data, named)
    for key, expected in identity(model, site, position, featurizer).items():
        if found.get(key) != expected:
            raise PlanError(
                f"{named} was trained with {key} = {echo(found.get(key))}, this document has {echo(expected)}"
            )
    refuse_not_finite(data, named)
    params = {k: v for k, v in featurizer.params.items() if k != "load"}
    return dataclasses.replace(featurizer, params=params, state=data, state_digest=hashlib.sha256(data).hexdigest())


def refuse_not_finite(data: bytes, named: str) -> None:
    """A tensor file a document loads holds finite numbers, as the document's own numbers must."""
    from safetensors.torch import load

    for key, tensor in sorted(load(data).items()):
        bad = (~tensor.float().isfinite()).nonzero()
        if len(bad):
            at = tuple(bad[0].tolist())
            raise DocumentError(f"{named} holds {tensor[at].item()} in its tensor {key!r} at {list(at)}; a document's "
                                "numbers are finite")


def trained_labels(labels: tuple[int, ...], order: str, seed: int, where: str) -> tuple[int, ...]:
    """The training labels, or (``shuffled``, the control) the same labels permuted among the rows from
    ``seed``: what is left to learn is what any subspace of that rank could fit. A shuffle that leaves every
    row's label as given (one row, one label, or a seed whose permutation keeps each label in place) is
    refused: the control would train exactly as the run it controls, and its file would still say shuffled."""
    if order != "shuffled":
        return labels
    permuted = list(labels)
    random.Random(f"shuffled-labels-{seed}").shuffle(permuted)
    if tuple(permuted) == labels:
        why = (f"{len(labels)} training row" if len(labels) == 1 else
               f"all {len(labels)} training rows have one label" if len(set(labels)) == 1 else
               f"seed {seed} permutes the {len(labels)} rows' labels onto themselves")
        raise PlanError(f"{where}.labels: \"shuffled\" leaves every label as given ({why}), so the control "
                        "would train exactly as the unshuffled run; give rows with other labels, or another seed")
    return tuple(permuted)
