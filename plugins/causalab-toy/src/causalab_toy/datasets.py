"""The tasks' datasets as JSONL: ``<folder>/<task>/{train,test}.jsonl``, deterministic from fixed seeds."""

from __future__ import annotations

import json
from pathlib import Path

from causalab_toy import tasks

SIZES = {"train": 400, "test": 60}


def chat_rows(n: int) -> list[dict]:
    """Weekday questions asked as the second user turn of a conversation (with and without a system turn)."""
    out = []
    for i, row in enumerate(tasks.rows("weekdays", n, "test", seed=2)):
        def conversation(prompt: str) -> list[dict]:
            question = prompt.removeprefix("Q: ").removesuffix("? A:")
            turns = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
                     {"role": "user", "content": question}]
            return ([{"role": "system", "content": "you are a helpful assistant"}] if i % 2 else []) + turns
        out.append({**row, "base": conversation(row["base"]), "counterfactual": conversation(row["counterfactual"])})
    return out


def write(folder: Path) -> list[Path]:
    written = []
    path = folder / "chat" / "test.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in chat_rows(SIZES["test"])))
    written.append(path)
    for task in tasks.TASKS:
        for split, n in SIZES.items():
            path = folder / task / f"{split}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps(r) + "\n" for r in tasks.rows(task, n, split)))
            written.append(path)
    return written
