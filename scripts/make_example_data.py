"""Write documents/examples/data/weekdays.jsonl: base/counterfactual pairs of weekday arithmetic.

Deterministic (seeded). Each row: a base prompt and a counterfactual prompt that
differ only in the start day, the answers to both, and the variables.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
COUNTS = ("one", "two", "three", "four", "five", "six")


def rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        k = rng.randrange(len(COUNTS))
        day, cf_day = rng.sample(range(7), 2)
        prompt = "Q: what day is {} days after {}? A:"
        out.append({
            "base": prompt.format(COUNTS[k], DAYS[day]),
            "counterfactual": prompt.format(COUNTS[k], DAYS[cf_day]),
            "base_answer": " " + DAYS[(day + k + 1) % 7],
            "cf_answer": " " + DAYS[(cf_day + k + 1) % 7],
            "day": DAYS[day],
            "cf_day": DAYS[cf_day],
            "count": COUNTS[k],
        })
    return out


if __name__ == "__main__":
    path = Path(__file__).parent.parent / "documents" / "examples" / "data" / "weekdays.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows(48)))
    print(path)
