"""pytest fixtures for causalab and plugin tests: ``pytest_plugins = ["causalab_testing.fixtures"]``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from causalab_testing import models
from causalab_testing.data import sweep_document, weekday_rows


@pytest.fixture(scope="session")
def tiny_llama() -> Path:
    """A tiny random Llama checkpoint with a word-level tokenizer."""
    return models.ensure("tiny-llama")


@pytest.fixture(scope="session")
def tiny_gpt2() -> Path:
    """A tiny random GPT-2 checkpoint (absolute positions) with a byte-level BPE tokenizer."""
    return models.ensure("tiny-gpt2")


@pytest.fixture
def write_doc(tmp_path):
    """Write a document (and optionally its JSONL rows) into a fresh folder; return its path."""

    def write(document: dict, rows: list[dict] | None = None, name: str = "doc.json") -> Path:
        if rows is not None:
            (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        path = tmp_path / name
        path.write_text(json.dumps(document, indent=1))
        return path

    return write


@pytest.fixture
def sweep_doc(write_doc, tiny_llama):
    """A 4-layer x 2-position sweep over 42 weekday rows on the tiny Llama."""
    return write_doc(sweep_document(str(tiny_llama)), weekday_rows(42))
