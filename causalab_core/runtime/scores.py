"""What a scored run brings home: the answer columns' logits and the log-sum-exp, in float32."""

from __future__ import annotations

import torch


def answer_scores(last_logits: torch.Tensor, token_ids) -> dict[str, torch.Tensor]:
    """The answer columns' logits and the log-sum-exp, in float32, from ``[batch, vocab]`` logits."""
    last = last_logits.float()
    ids = torch.tensor(token_ids, device=last.device)
    return {"answer_logits": last.gather(1, ids).detach().cpu(), "logsumexp": last.logsumexp(-1).detach().cpu()}
