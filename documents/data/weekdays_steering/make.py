"""Rows and vectors of the weekdays steering study (documents/real/weekdays_steering*.json).

    .venv/bin/python documents/data/weekdays_steering/make.py

rows.jsonl: every (count, day) setting of the weekdays task, 27 counts x 7 days = 189 rows, train and test
split alike (`split` says which; the model answers all 189 right), count-major (the first seven rows
are count 1 on each day, so any first seven or more hold every day). Columns: `base` (the prompt),
`base_answer`, `plus_1` ... `plus_6` (the answer the base prompt would have with the start day k days later:
`plus_1` is "shifted by exactly one day"), `day`, `count`, `split`. Every day has all 27 counts, so a
difference of two days' means over these rows has no count in it.

The vectors (safetensors, one float32 tensor `vector` of the model's width 64) need activations, taken
here by a plain transformers forward of the shipped checkpoint (no causalab), at the two sites the study
steers: the day's token (-4) entering block 0 (the token embedding) and the last token (-1) entering
block 1 (block 0's output):
- `random_{site}_seed{s}.safetensors` (site `embed` or `last`, s = 0, 1, 2): a direction drawn from
  `torch.Generator().manual_seed(s)`, scaled to the norm of that site's Monday - Sunday difference of means
  (the steering vector of weekdays_steering.json): the random-direction control.
- `last_{day}_to_{next}.safetensors`: the difference of means next day - day at the last token entering
  block 1, for each of the 7 pairs of consecutive days (weekdays_steering_pairs.json).
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
SITES = {"embed": (0, -4), "last": (1, -1)}
"""name -> (layer of `block_input`, position): the hidden state entering that block, at that token."""
SEEDS = (0, 1, 2)


def rows() -> list[dict]:
    from causalab_toy import tasks

    days = tasks.DAYS
    out = []
    for count in tasks.COUNTS:
        for day in days:
            answer = (days.index(day) + int(count)) % 7
            row = {"base": tasks.WEEKDAY_PROMPT.format(count=count, day=day), "base_answer": " " + days[answer]}
            row |= {f"plus_{k}": " " + days[(answer + k) % 7] for k in range(1, 7)}
            out.append(row | {"day": day, "count": count, "split": tasks.weekday_split(count, day)})
    return out


def activations(prompts: list[str], sites: dict[str, tuple[int, int]] = SITES) -> dict[str, "torch.Tensor"]:
    """site name -> [rows, 64]: the hidden state entering the site's block at its token (float32)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from causalab_toy import models

    path = models.CHECKPOINTS / "weekdays"
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    batch = tokenizer(prompts, return_tensors="pt")
    assert batch.attention_mask.all(), "the prompts are one length: no padding"
    with torch.no_grad():
        hidden = model(**batch, output_hidden_states=True).hidden_states  # [0]: embeddings, [i]: block i-1's output
    return {name: hidden[layer][:, position].clone() for name, (layer, position) in sites.items()}


def difference(acts, table: list[dict], day: str, minus: str):
    """The mean of the rows whose start day is ``day`` less the mean of those whose start day is ``minus``."""
    def mean(d):
        return acts[[i for i, r in enumerate(table) if r["day"] == d]].mean(0)

    return mean(day) - mean(minus)


def vectors(table: list[dict]) -> dict[str, "torch.Tensor"]:
    """file name -> vector."""
    import torch

    from causalab_toy import tasks

    acts = activations([r["base"] for r in table])
    out = {}
    for site in SITES:
        norm = difference(acts[site], table, "Monday", "Sunday").norm()
        for seed in SEEDS:
            direction = torch.randn(acts[site].shape[1], generator=torch.Generator().manual_seed(seed))
            out[f"random_{site}_seed{seed}.safetensors"] = direction / direction.norm() * norm
    days = tasks.DAYS
    for i, day in enumerate(days):
        following = days[(i + 1) % 7]
        out[f"last_{day}_to_{following}.safetensors"] = difference(acts["last"], table, following, day)
    return out


def main() -> None:
    from safetensors.torch import save_file

    table = rows()
    (HERE / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in table))
    for name, vector in vectors(table).items():
        save_file({"vector": vector.contiguous()}, str(HERE / name))


if __name__ == "__main__":
    main()
