"""A write's value at its site: the swap, or what its intervention computes (``ir.InterventionRef``).

``put`` is the one place every engine computes a written value and puts it in: the hooks engine's hook and
the nnterp block (locally, or shipped to a server) call it for each write. The value ``v`` an intervention
needs and how it combines with the site's value ``x`` are documented on ``contracts.NEEDS`` and
``contracts.COMBINES``; through a featurizer both are featurized and ``x``'s error term is kept.

Imported inside engines' blocks: module-level functions only; inside functions, imports of torch,
safetensors and the standard library alone.
"""

from __future__ import annotations

import torch

from causalab_core.errors import EngineError, PluginError
from causalab_core.runtime.windows import scatter, window_index

# Seeds noise per row from the document's seed and the row's index, never torch's global state: row r of seed s
# draws from a CPU generator seeded (s * SEED_MIX + r) mod 2**32. torch's CPU generator keeps a seed's low 32
# bits only, so the seed is mixed in below them (an odd multiplier: seeds far apart in its bits); seed 0 is the
# row's index.
SEED_MIX = 0x9E3779B1


def put(target: torch.Tensor, write, span: slice, offsets, store, featurizer, custom=None) -> None:
    """Write ``write``'s value for rows ``span`` (a batch of the plan's rows) into ``target`` in place, at each
    row's window (``offsets``: the batch's left padding). ``store``: the point's reads, each a list over every
    row of the plan (a mean or a resample reads rows outside the batch). ``custom``: the kind's instance,
    for a ``custom`` combination (``featurizers.featurizers_for`` hands it over)."""
    iv = write.intervention
    windows = write.windows[span]
    if iv is None or (iv.needs == "source" and iv.rows is None and iv.combine == "replace"):
        scatter(target, windows, offsets, store[write.source][span], featurizer)  # the swap, byte for byte
        return
    rows = list(range(span.start, span.stop))
    values = needed(iv, write, store, rows, windows)
    how = Combination(iv, custom, iv.alpha * (std_of(store, iv.std_of, write.name) if iv.std_of else 1.0))
    index = window_index(windows, offsets)
    if index is not None:
        r, c = index
        stacked = None if values is None else torch.stack(values).to(target.device)
        target[r, c] = intervened(featurizer, how, target[r, c], stacked, rows)
        return
    for b, (window, offset) in enumerate(zip(windows, offsets)):
        cols = [p + offset for p in window]
        value = None if values is None else values[b].to(target.device).unsqueeze(0)
        target[b, cols] = intervened(featurizer, how, target[b, cols].unsqueeze(0), value, rows[b:b + 1])[0]


class Combination:
    """How a write's value is made from ``x`` and ``v``: the intervention's plan data, its ``custom`` instance
    and its ``alpha`` (times the ``std_of`` read's spread, where it names one)."""

    def __init__(self, iv, custom, alpha: float):
        self.iv, self.custom, self.alpha = iv, custom, alpha
        if iv.combine == "custom" and custom is None:
            raise EngineError(f"intervention {iv.kind!r} combines by its own `apply`, and the engine was not "
                              "given its class")


def needed(iv, write, store, rows: list[int], windows) -> list[torch.Tensor] | None:
    """Per row, the value ``v`` ``[window width, site width]`` (None for noise, drawn where its shape is known,
    and for a kind that needs nothing)."""
    if iv.needs == "source":
        return [store[write.source][row] for row in rows]
    if iv.needs == "resample":
        return [store[write.source][iv.rows[row]] for row in rows]
    if iv.needs == "mean":
        vector = mean_of(store, write.source, write.name)
        if iv.minus is not None:
            vector = vector - mean_of(store, iv.minus, write.name)
    elif iv.needs == "tensor":
        vector = loaded_vector(iv, write.name)
    else:
        return None
    return [vector.expand(len(window), -1) for window in windows]


def resolved_values(store, read: str, write: str, what: str) -> torch.Tensor:
    """``[positions, width]``: the read at every position of every row it resolved on, in float32."""
    if any(v is None for v in store[read]):  # position reuse keeps one batch's reads: the planner avoids it
        raise EngineError(f"write {write!r}: read {read!r} is not recorded on every row; a {what} needs them all")
    values = [v for v in store[read] if len(v)]
    if not values:
        raise EngineError(f"write {write!r}: a {what} over no eligible rows of read {read!r}")
    return torch.cat([v.float() for v in values])


def mean_of(store, read: str, write: str) -> torch.Tensor:
    """The read's mean over every position of every row it resolved on, in float32."""
    return resolved_values(store, read, write, "mean").mean(0)


def std_of(store, read: str, write: str) -> float:
    """The sample standard deviation (divided by n - 1) of every value the read holds (every position of every
    row it resolved on, every dimension), in float64 on the CPU: one number, the same on every engine and device."""
    spread = resolved_values(store, read, write, "standard deviation").double().cpu().std().item()
    if not spread > 0 or spread == float("inf"):
        raise EngineError(f"write {write!r}: read {read!r} has standard deviation {spread}; noise cannot be "
                          "scaled by it")
    return spread


def loaded_vector(iv, write: str) -> torch.Tensor:
    """The vector file that travelled in the plan, after checking its digest (float32)."""
    import hashlib

    from safetensors.torch import load

    if hashlib.sha256(iv.tensor).hexdigest() != iv.tensor_digest:
        raise EngineError(f"write {write!r}: its vector does not match the digest the client recorded")
    return next(iter(load(iv.tensor).values())).float()


def noise(seed: int, rows: list[int], shape) -> torch.Tensor:
    """Standard normal noise ``[rows, *shape]``, drawn on the CPU from a generator per row seeded by ``seed``
    and the row's index: the same numbers on every engine and device, whatever the batching."""
    drawn = []
    for row in rows:
        generator = torch.Generator().manual_seed((seed * SEED_MIX + row) % 2**32)
        drawn.append(torch.randn(tuple(shape), generator=generator, dtype=torch.float32))
    return torch.stack(drawn)


def intervened(featurizer, how: Combination, base: torch.Tensor, value: torch.Tensor | None,
               rows: list[int]) -> torch.Tensor:
    """The written value for ``base`` ``[rows, window, width]``: the combination in float32 outside any
    autocast (as ``windows.swap``), through the featurizer where there is one, cast back to base's dtype."""
    iv = how.iv
    with torch.autocast(device_type=base.device.type, enabled=False):
        x, error = featurizer.featurize(base.float()) if featurizer is not None else (base.float(), None)
        if iv.needs == "noise":
            v = noise(iv.seed or 0, rows, x.shape[1:]).to(x.device)
        elif value is not None:
            v = featurizer.featurize(value.float())[0] if featurizer is not None else value.float()
        else:
            v = None
        if iv.combine == "custom":
            out = applied(how.custom, x, v, iv)
        else:
            out = combined(iv.combine, how.alpha, x, v)
        return (featurizer.inverse(out, error) if featurizer is not None else out).to(base.dtype)


def applied(custom, x: torch.Tensor, v: torch.Tensor | None, iv) -> torch.Tensor:
    """A third party's ``apply``, held to its contract: a tensor of ``x``'s shape."""
    out = custom.apply(x, v, type(custom).Params.model_validate(iv.params))
    if not isinstance(out, torch.Tensor) or out.shape != x.shape or not out.is_floating_point():
        shape = f"{list(out.shape)} {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise PluginError(f"intervention {iv.kind!r} of {distribution_of(type(custom))}: apply returned {shape}, "
                          f"not a float tensor of the site's shape {list(x.shape)}")
    return out.float()


def distribution_of(cls: type) -> str:
    """The distribution a plugin's class comes from (where this process has it installed), else its package:
    standard library only, as this runs on a server too."""
    import importlib.metadata

    package = cls.__module__.partition(".")[0]
    found = importlib.metadata.packages_distributions().get(package)
    if found:
        return found[0]
    try:  # an editable install maps no package: a distribution named like it (causalab_x -> causalab-x)
        return importlib.metadata.distribution(package).metadata["Name"]
    except importlib.metadata.PackageNotFoundError:
        return package


def combined(how: str, alpha: float, x: torch.Tensor, v: torch.Tensor | None) -> torch.Tensor:
    """``contracts.COMBINES``: replace, add, scale, interpolate."""
    if how == "replace":
        return v.to(x.dtype)
    if how == "add":
        return x + alpha * v
    if how == "scale":
        return alpha * x
    if how == "interpolate":
        return (1 - alpha) * x + alpha * v
    raise EngineError(f"unknown combination {how!r}")
