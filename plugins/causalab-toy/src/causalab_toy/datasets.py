"""The tasks' datasets as JSONL: ``<folder>/<task>/{train,test}.jsonl``, deterministic from fixed seeds."""

from __future__ import annotations

import json
from pathlib import Path

from causalab_toy import tasks

SIZES = {"train": 400, "test": 60}


def write(folder: Path) -> list[Path]:
    written = []
    for task in tasks.TASKS:
        for split, n in SIZES.items():
            path = folder / task / f"{split}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps(r) + "\n" for r in tasks.rows(task, n, split)))
            written.append(path)
    return written
