"""Compile-time work for a write's intervention: its recipe lowered to plan data, checked before weights load.

Checked against the site and the rows: a resample's rows drawn, a vector file read, a mean's rows counted.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

from causalab_core.document.interventions import recipe_for
from causalab_core.errors import DocumentError, PlanError, clip, echo
from causalab_core.ir import InterventionRef


def lowered(registry: Any, spec: dict, where: str, site: Any, windows: tuple, source: str | None, reads: dict,
            folder: Path, row_name) -> InterventionRef:
    """The write's ``InterventionRef``: ``spec`` is the write's ``intervention`` at this point (sweep values
    in), ``windows`` the write's per row, ``source`` its source read's name, ``reads`` the point's plan reads
    by name, ``row_name(i)`` names row i."""
    cls = registry.get("intervention", spec["kind"], f"{where}.kind")
    params = cls.Params.model_validate({k: v for k, v in spec.items() if k != "kind"})
    recipe = recipe_for(cls, params, where, registry.who("intervention", spec["kind"]))
    ref = dict(kind=spec["kind"], params=params.model_dump(mode="json"), needs=recipe.needs,
               combine=recipe.combine, alpha=float(recipe.alpha), seed=recipe.seed)
    if recipe.std_of is not None:
        ref["std_of"] = recipe.std_of
        read = reads[recipe.std_of]
        if not any(read.windows):
            raise PlanError(f"{where}.std_of: read {echo(recipe.std_of)} resolved on no row; no standard deviation "
                            "to scale by")
        if read.site.width != site.width:
            raise PlanError(f"{where}.std_of: read {echo(recipe.std_of)} is {read.site.width} wide, the site "
                            f"{site.width}: its spread is not in the site's units")
    if recipe.needs == "mean":
        for key, name in (("source", source), ("minus", recipe.minus)):
            if name is not None and not any(reads[name].windows):
                raise PlanError(f"{where}: a mean over no eligible rows: read {echo(name)} ({key}) resolved on "
                                "no row")
        if reads[source].site.width != site.width:
            raise PlanError(f"{where}: read {echo(source)} is {reads[source].site.width} wide, the site {site.width}")
        if recipe.minus is not None and reads[recipe.minus].site.width != site.width:
            raise PlanError(f"{where}.minus: read {echo(recipe.minus)} is {reads[recipe.minus].site.width} wide, "
                            f"the site {site.width}")
        ref["minus"] = recipe.minus
    if recipe.needs == "resample":
        ref["rows"] = drawn_rows(reads[source].windows, windows, recipe.seed or 0, where, row_name)
    vector = None
    if recipe.needs == "tensor":
        ref["tensor"], ref["tensor_digest"], vector = vector_file(folder, recipe.tensor, site.width, f"{where}.vector")
    try:
        cls.check_write(params, site.width, vector)
    except ValueError as exc:
        raise PlanError(f"{where}: {clip(str(exc))}") from None
    return InterventionRef(**ref)


def drawn_rows(source: tuple, windows: tuple, seed: int, where: str, row_name) -> tuple[int, ...]:
    """Per row, another row whose source value it takes: drawn uniformly, from ``seed`` alone, among the rows
    the source read resolved on with a window as wide as this row's write (on the client, so every engine
    gets the same rows)."""
    rng = random.Random(seed)
    drawn = []
    for i, window in enumerate(windows):
        others = [j for j, w in enumerate(source) if j != i and w and len(w) == len(window)]
        if not others:
            raise PlanError(f"{where}: {row_name(i)}: no other row has a source value {len(window)} positions "
                            "wide to resample")
        drawn.append(rng.choice(others))
    return tuple(drawn)


def vector_file(folder: Path, name: str, width: int, where: str) -> tuple[bytes, str, Any]:
    """A steering vector's safetensors file, read once: its bytes and sha256 travel in the plan (and the
    vector, as float32, for the kind's ``check_write``). Checked as the document's own numbers are."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    path = Path(name) if Path(name).is_absolute() else folder / name
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DocumentError(f"{where}: vector file {echo(str(path))} cannot be read: {exc.strerror or exc}") from None
    try:
        tensors = load(data)
    except (SafetensorError, ValueError, OSError) as exc:
        raise DocumentError(f"{where}: {echo(str(path))} is not a safetensors file ({exc})") from None
    if len(tensors) != 1:
        raise DocumentError(f"{where}: {echo(str(path))} holds {len(tensors)} tensors, not one vector")
    vector = next(iter(tensors.values()))
    if vector.dim() != 1 or vector.shape[0] != width or not vector.is_floating_point():
        raise PlanError(f"{where}: the vector in {echo(str(path))} has shape {list(vector.shape)} "
                        f"({vector.dtype}); the site is {width} wide, so it must be [{width}] of floats")
    bad = (~vector.float().isfinite()).nonzero()
    if len(bad):
        raise DocumentError(f"{where}: the vector in {echo(str(path))} holds {vector[bad[0, 0]].item()} at "
                            f"index {bad[0, 0].item()}; a document's numbers are finite")
    return data, hashlib.sha256(data).hexdigest(), vector.float()
