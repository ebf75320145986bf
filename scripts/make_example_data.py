"""Write documents/examples/data/weekdays.jsonl (deterministic: seeded)."""

from __future__ import annotations

import json
from pathlib import Path

from causalab_testing.data import weekday_rows

if __name__ == "__main__":
    path = Path(__file__).parent.parent / "documents" / "examples" / "data" / "weekdays.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in weekday_rows(48)))
    print(path)
