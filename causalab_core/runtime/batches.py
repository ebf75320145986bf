"""Left-padded batches with position ids counted from the mask, so a padded row gives the numbers it gives alone."""

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
