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
from causalab_core.ir import FeaturizerRef
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


def identity(model: Any, site: Any, position: Any, featurizer: Any, defaults: dict | None = None) -> dict[str, str]:
    """What a featurizer file must match to be used here (all strings, as safetensors metadata). ``defaults``:
    the kind's parameters at their defaults, so a parameter a document states at its default reads as one
    it leaves out."""
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
    for key, value in {**(defaults or {}), **featurizer.params}.items():
        if key != "load" and isinstance(value, (int, str, float)):
            out[key] = str(value)
    if featurizer.over is not None:  # what its features are: each featurizer under it, its bytes or parameters
        out["over"] = json.dumps(chain(featurizer.over), sort_keys=True)
    return out


def chain(ref: Any) -> list[list]:
    """A featurizer and those under it, each as its kind and its state's digest (or its parameters)."""
    made = [ref.kind, ref.state_digest or {k: v for k, v in ref.params.items() if k != "load"}]
    return [made, *(chain(ref.over) if ref.over is not None else ())]


def defaults_of(cls: type) -> dict:
    """A featurizer kind's parameters that have a default, at it (plain JSON values)."""
    return {name: field.get_default() for name, field in cls.Params.model_fields.items() if not field.is_required()}


def read_files(featurizer: Any, cls: type, width: int, where: str) -> Any:
    """A featurizer whose parameters name files it reads itself (``cls.paths``, an SAE's folder): the tensors
    ``read_files`` gives, carried in the plan as safetensors bytes with their digest, the paths dropped."""
    keys = [key for key in getattr(cls, "paths", ()) if featurizer.params.get(key)]
    if not keys:
        if getattr(cls, "paths", ()):
            raise DocumentError(f"{where}: featurizer kind {echo(featurizer.kind)} reads its state from files: give "
                                f"`{cls.paths[0]}`")
        return featurizer
    named = f"{where}.{keys[0]}"
    try:
        tensors = cls.read_files(cls.Params.model_validate(featurizer.params), width)
    except OSError as exc:
        raise DocumentError(f"{named}: {echo(featurizer.params[keys[0]])} cannot be read: "
                            f"{exc.strerror or exc}") from None
    except ValueError as exc:
        raise DocumentError(f"{named}: {exc}") from None
    if tensors is None:
        return featurizer
    from safetensors.torch import save

    data = save({k: v.contiguous() for k, v in sorted(tensors.items())})
    refuse_not_finite(data, named)
    params = {k: v for k, v in featurizer.params.items() if k not in keys}
    return dataclasses.replace(featurizer, params=params, state=data, state_digest=hashlib.sha256(data).hexdigest())


def features_width(featurizer: Any, width: int, registry: Any) -> int:
    """How many features a featurizer gives on a site ``width`` wide: the instance an engine builds, on a
    row of zeros."""
    import torch

    from causalab_core.runtime.featurizers import built

    classes, ref = {}, featurizer
    while ref is not None:
        classes[ref.kind], ref = registry.get("featurizer", ref.kind), ref.over
    with torch.no_grad():
        return built(featurizer, width, featurizer.name, classes).featurize(torch.zeros(1, width))[0].shape[-1]


def with_loaded_state(featurizer: Any, model: Any, site: Any, position: Any, where: str,
                      defaults: dict | None = None) -> Any:
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
    expected = identity(model, site, position, featurizer, defaults)
    for key in (*expected, *(["over"] if "over" in found else [])):  # trained over one: only over the same
        if found.get(key) != expected.get(key):
            raise PlanError(f"{named} was trained with {key} = {echo(found.get(key))}, this document has "
                            f"{echo(expected.get(key))}")
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


class Featurizing:
    """The compiler's featurizer work (a mixin of ``compile.Compiler``, which has ``registry``, ``loaded``
    and ``ref``): a write's featurizer resolved, composed and checked; a fit's rows checked."""

    def _featurizer(self, name: str, specs: dict, site, position, point: str, seen: tuple = ()) -> FeaturizerRef:
        """The featurizer a write goes through: files it reads resolved like data paths and carried in the plan,
        the featurizer it works over (``over``) first, checked against the site (or that one's features)."""
        where, fspec = f"$.featurizers.{name}", specs[name]
        cls = self.registry.get("featurizer", fspec["kind"])
        params = {k: v for k, v in fspec.items() if k not in ("kind", "train", "over")}
        for key in ("load", *getattr(cls, "paths", ())):
            if isinstance(params.get(key), str) and params[key] and not Path(params[key]).is_absolute():
                params[key] = str(self.loaded.data_folder / params[key])
        over, width = None, site.width
        if fspec.get("over") is not None:
            over, width = self._over(name, fspec["over"], specs, site, position, point, (*seen, name))
        featurizer = read_files(FeaturizerRef(name, fspec["kind"], params, over=over), cls, width, where)
        self._check_featurizer(featurizer, width, where, point)
        return with_loaded_state(featurizer, self.ref, site, position, where, defaults_of(cls))

    def _over(self, name: str, inner: str, specs: dict, site, position, point: str,
              seen: tuple) -> tuple[FeaturizerRef, int]:
        """The featurizer ``name`` works over, and how many features it gives (the width ``name`` sees)."""
        where = f"$.featurizers.{name}.over"
        if inner not in specs:
            raise DocumentError(f"{where}: no featurizer named {echo(inner)} (defined: {', '.join(sorted(specs))})")
        if inner in seen:
            raise DocumentError(f"{where}: {echo(inner)} is over {echo(name)} in turn; a featurizer cannot work "
                                "over its own features")
        if specs[inner].get("train"):
            raise PlanError(f"{where}: {echo(inner)} is trained in this document; a featurizer another one works "
                            "over is used as it is: give it `load` (a file a run trained) instead of `train`")
        ref = self._featurizer(inner, specs, site, position, point, seen)
        cls = self.registry.get("featurizer", ref.kind)
        if not (hasattr(cls, "has_units") and cls.has_units(cls.Params.model_validate(ref.params))):
            raise PlanError(f"{where}: featurizer {echo(inner)} (kind {echo(ref.kind)}) has no fixed set of "
                            "features to work over")
        return ref, features_width(ref, site.width, self.registry)

    def _check_training(self, featurizer: FeaturizerRef, site, rows: int, activations: int, where: str) -> None:
        """Enough training rows for the featurizer's kind (its ``check_training``), and two at least."""
        if rows < 2:
            raise PlanError(f"{where}.data: {rows} training row; a featurizer trained on one row learns that "
                            "row's prompt, not a variable: give more")
        cls = self.registry.get("featurizer", featurizer.kind)
        width = features_width(featurizer.over, site.width, self.registry) if featurizer.over else site.width
        try:
            if hasattr(cls, "check_training"):
                cls.check_training(cls.Params.model_validate(featurizer.params), width, rows, activations)
        except ValueError as exc:
            raise PlanError(f"{where}.data: {exc}") from None

    def _check_featurizer(self, featurizer: FeaturizerRef, width: int, where: str, point: str) -> None:
        """What the featurizer's plugin can check against the width it sees, before weights load."""
        cls = self.registry.get("featurizer", featurizer.kind)
        try:
            cls.check_site(cls.Params.model_validate(featurizer.params), width)
        except ValueError as exc:
            at = f" (sweep point {point})" if point else ""
            raise PlanError(f"{where}: {exc}{at}") from None
