"""What a scored run brings home: the answer columns' logits and the log-sum-exp, in float32."""

from __future__ import annotations

import torch


def joined(parts) -> dict[str, torch.Tensor]:
    """Batches' scores (``answer_scores`` dicts, empty for an unscored run) as one, rows in batch order."""
    found = [part for part in parts if part]
    return {name: torch.cat([p[name] for p in found]) for name in found[0]} if found else {}


def answer_scores(last_logits: torch.Tensor, token_ids, views=("answers",)) -> dict[str, torch.Tensor]:
    """What a step's scoring asks for, in float32, from ``[batch, vocab]`` logits: the answer columns'
    logits, the log-sum-exp and the top token's id (``top``: what the run predicts, for the rows it shows); with ``ranks`` each column's rank (how many tokens score higher); with
    ``logprobs`` the whole log-softmax."""
    last = last_logits.float()
    ids = torch.tensor(token_ids, dtype=torch.long, device=last.device)
    chosen = last.gather(1, ids)
    found = {"answer_logits": chosen.detach().cpu(), "logsumexp": last.logsumexp(-1).detach().cpu(),
             "top": last.argmax(-1).to(torch.int32).detach().cpu()}
    if "ranks" in views:  # a reduction: [batch, columns] integers travel, not the vocabulary
        found["answer_ranks"] = (last.unsqueeze(1) > chosen.unsqueeze(2)).sum(-1).to(torch.int32).detach().cpu()
    if "logprobs" in views:
        found["logprobs"] = torch.log_softmax(last, -1).detach().cpu()
    return found
