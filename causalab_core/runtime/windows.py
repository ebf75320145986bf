"""Reading and writing a plan's token windows in a site's tensor, and the featurized swap a write makes."""

from __future__ import annotations

import torch


def window_index(windows, offsets) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Index tensors (rows, positions) for windows of one width; None when ragged."""
    widths = {len(w) for w in windows}
    if len(widths) != 1:
        return None
    rows = torch.arange(len(windows)).unsqueeze(1).expand(-1, widths.pop())
    cols = torch.tensor([[p + o for p in w] for w, o in zip(windows, offsets)])
    return rows, cols


# Order of sites inside one block's forward, for engines that must visit them in order.
SITE_ORDER = {"block_input": 0, "head": 1, "attn_output": 2, "mlp_output": 3, "block_output": 4}


def as_heads(hidden: torch.Tensor, site) -> torch.Tensor:
    """A view of a head site's tensor as ``[batch, seq, head_dim]`` of the one head."""
    if site.head is None:
        return hidden
    return hidden.unflatten(-1, (site.heads, site.width))[..., site.head, :]


def gather(hidden: torch.Tensor, windows, offsets) -> list[torch.Tensor]:
    """Per row, a copy of the window's vectors ``[width, d]``."""
    index = window_index(windows, offsets)
    if index is not None:
        return list(hidden[index[0], index[1]].clone().unbind(0))
    return [hidden[b, [p + o for p in w]].clone() for b, (w, o) in enumerate(zip(windows, offsets))]


def scatter(target: torch.Tensor, windows, offsets, sources, featurizer) -> None:
    """Write each row's source into its window, in place, through the featurizer's swap."""
    index = window_index(windows, offsets)
    if index is not None:
        rows, cols = index
        target[rows, cols] = swap(featurizer, target[rows, cols], torch.stack(sources).to(target.device))
        return
    for b, (w, o) in enumerate(zip(windows, offsets)):
        cols = [p + o for p in w]
        target[b, cols] = swap(featurizer, target[b, cols], sources[b].to(target.device))


def swap(featurizer, base: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """The value a write puts in: the source's features with the base's error term.

    Featurizer math runs in float32 outside any autocast; the result is cast
    back to the base's dtype.
    """
    if featurizer is None:
        return source.to(base.dtype)
    with torch.autocast(device_type=base.device.type, enabled=False):
        features, _ = featurizer.featurize(source.float())
        _, error = featurizer.featurize(base.float())
        return featurizer.inverse(features, error).to(base.dtype)
