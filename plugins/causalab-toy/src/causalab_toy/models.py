"""The shipped checkpoints: their keys, revisions, and their place in the Hugging Face cache."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

CHECKPOINTS = Path(__file__).parent / "checkpoints"
PREFIX = "causalab-toy/"
FILES = (
    "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
    "chat_template.jinja", "training.json",
)


def names() -> list[str]:
    return sorted(p.name for p in CHECKPOINTS.iterdir() if (p / "config.json").is_file())


@functools.cache
def revision(name: str) -> str:
    """A 40-hex digest of the checkpoint's files: its pinned revision (and cache commit)."""
    h = hashlib.sha256()
    for fname in FILES:
        path = CHECKPOINTS / name / fname
        if path.is_file():
            h.update(fname.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:40]


def hub_cache() -> Path:
    if "HF_HUB_CACHE" in os.environ:
        return Path(os.environ["HF_HUB_CACHE"])
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    return home / "hub"


def install(name: str) -> Path:
    """Place a checkpoint in the Hugging Face cache as ``causalab-toy/<name>`` at its revision.

    Afterwards transformers, nnsight and an NDIF server on this machine load it
    offline by that key. Idempotent; returns the snapshot folder.
    """
    rev = revision(name)
    repo = hub_cache() / f"models--causalab-toy--{name}"
    snapshot = repo / "snapshots" / rev
    if not snapshot.is_dir():
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{rev}.", dir=snapshot.parent))
        for fname in FILES:
            if (CHECKPOINTS / name / fname).is_file():
                shutil.copy2(CHECKPOINTS / name / fname, tmp / fname)
        try:
            tmp.rename(snapshot)
        except OSError:  # installed concurrently
            shutil.rmtree(tmp, ignore_errors=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(rev)
    return snapshot
