"""The JSONL files documents read (``documents/data``), deterministic: chat, entity, induction and IOI rows.

``chat/test.jsonl``, ``entity/test.jsonl``; ``induction/test.jsonl`` and ``ioi/test.jsonl``: the circuit studies' rows.

Everything else takes its rows from the tasks' causal models (``causalab_toy.causal``), which generate
distinct rows of either split on demand; there are no other files to keep in step.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from causalab_toy import circuits, tasks

ENTITY_ROWS = 60
CIRCUIT_ROWS = {"induction": 40, "ioi": 40}


def day_changes() -> list[tuple[int, int, int]]:
    """Every held-out (count, day, cf_day): both settings in the test split, the day changed, the count kept."""
    return [(k, day, cf_day) for k in range(len(tasks.COUNTS)) for day in range(7) for cf_day in range(7)
            if day != cf_day and tasks._weekday_test(k, day) and tasks._weekday_test(k, cf_day)]


def chat_rows() -> list[dict]:
    """Each held-out day change asked as the second user turn of a conversation, once without and once with
    a system turn: every row distinct (two per setting), in a fixed shuffled order."""
    def conversation(count: str, day: str, system: bool) -> list[dict]:
        turns = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
                 {"role": "user", "content": f"what day is {count} days after {day}"}]
        return ([{"role": "system", "content": "you are a helpful assistant"}] if system else []) + turns

    out = []
    for k, day, cf_day in day_changes():
        count, n = tasks.COUNTS[k], int(tasks.COUNTS[k])
        for system in (False, True):
            out.append({
                "base": conversation(count, tasks.DAYS[day], system),
                "counterfactual": conversation(count, tasks.DAYS[cf_day], system),
                "base_answer": " " + tasks.DAYS[(day + n) % 7], "cf_answer": " " + tasks.DAYS[(cf_day + n) % 7],
                "day": tasks.DAYS[day], "cf_day": tasks.DAYS[cf_day], "count": count,
            })
    random.Random("chat-2").shuffle(out)
    return out


def write(folder: Path) -> list[Path]:
    files = {"chat/test.jsonl": chat_rows(), "entity/test.jsonl": tasks.rows("entity", ENTITY_ROWS, "test"),
             **{f"{task}/test.jsonl": circuits.rows(task, n, "test") for task, n in CIRCUIT_ROWS.items()}}
    written = []
    for name, rows in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        written.append(path)
    return written
