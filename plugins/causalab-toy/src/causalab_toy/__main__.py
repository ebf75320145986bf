"""``python -m causalab_toy install|list|datasets``: place the checkpoints in the HF cache, list them, write datasets."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from causalab_toy import datasets, models


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m causalab_toy", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="Put every checkpoint in the Hugging Face cache as causalab-toy/<name>.")
    sub.add_parser("list", help="Print each checkpoint's key, revision and training facts (JSON).")
    data = sub.add_parser("datasets", help="Write the JSONL files documents read (chat/test.jsonl, entity/test.jsonl).")
    data.add_argument("folder", type=Path)
    args = parser.parse_args()
    if args.command == "install":
        for name in models.names():
            print(f"{models.PREFIX}{name} {models.revision(name)} {models.install(name)}")
    elif args.command == "list":
        print(json.dumps([
            {"key": models.PREFIX + n, "revision": models.revision(n),
             **json.loads((models.CHECKPOINTS / n / "training.json").read_text())}
            for n in models.names()
        ], indent=1))
    else:
        for path in datasets.write(args.folder):
            print(path)


if __name__ == "__main__":
    main()
