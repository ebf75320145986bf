"""Tensor helpers every in-process or remote engine shares.

Left-padded batches with mask-derived position ids (so a padded row gives the
numbers it gives alone), and reading and writing a plan's windows in a
site's tensor. Imported inside traced blocks, so it must be installed
wherever an engine runs (it is part of causalab-core).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Batch:
    """Rows ``start:stop`` of one input, left-padded to a common length."""

    start: int
    stop: int
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    offsets: tuple[int, ...]
    """Per row: how many pad tokens precede it (add to a plan position)."""


def batches(prompts: tuple[tuple[int, ...], ...], batch_size: int | None, device, pad_id: int = 0):
    """Split rows into batches; position ids count real tokens only (0 on padding)."""
    size = batch_size or len(prompts)
    for start in range(0, len(prompts), size):
        rows = prompts[start:start + size]
        width = max(len(r) for r in rows)
        offsets = tuple(width - len(r) for r in rows)
        ids = torch.tensor([[pad_id] * o + list(r) for o, r in zip(offsets, rows)], device=device)
        mask = torch.tensor([[0] * o + [1] * len(r) for o, r in zip(offsets, rows)], device=device)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        yield Batch(start, start + len(rows), ids, mask, position_ids, offsets)


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
    from causalab_core.contracts import swap

    index = window_index(windows, offsets)
    if index is not None:
        rows, cols = index
        target[rows, cols] = swap(featurizer, target[rows, cols], torch.stack(sources).to(target.device))
        return
    for b, (w, o) in enumerate(zip(windows, offsets)):
        cols = [p + o for p in w]
        target[b, cols] = swap(featurizer, target[b, cols], sources[b].to(target.device))


def featurizer_for(write):
    """The featurizer instance a write goes through (None for a plain swap)."""
    if write.featurizer is None:
        return None
    from causalab_core.plugins import registry

    cls = registry().get("featurizer", write.featurizer.kind)
    return cls(cls.Params.model_validate(write.featurizer.params), write.site.width)


def featurizers_for(step, fitted: dict) -> dict:
    """Each write's featurizer: the one trained earlier in the point, else a fresh one (None for a plain swap)."""
    return {w.name: (fitted.get(w.featurizer.name) if w.featurizer else None) or featurizer_for(w)
            for w in step.writes}


def score(last_logits: torch.Tensor, token_ids) -> dict[str, torch.Tensor]:
    """The answer columns' logits and the log-sum-exp, in float32, from ``[batch, vocab]`` logits."""
    last = last_logits.float()
    ids = torch.tensor(token_ids, device=last.device)
    return {"answer_logits": last.gather(1, ids).detach().cpu(), "logsumexp": last.logsumexp(-1).detach().cpu()}
