"""A run's data rows and each input's prompt tokens, as the compiler saw them (for the report's row view)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from functools import lru_cache
from typing import Any

from causalab_core.errors import OutputError, echo, shorten
from causalab_core.results.table import LoadedRun


def _digest(rows: list[dict[str, Any]]) -> str:
    from causalab_core.document.causal import rows_digest

    return rows_digest(rows)


def _jsonl(data: bytes, where: str) -> list[dict[str, Any]]:
    try:
        rows = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    except (UnicodeDecodeError, ValueError) as exc:
        raise OutputError(f"{echo(where)}: not a JSONL file of rows ({type(exc).__name__})") from None
    if not all(isinstance(r, dict) for r in rows):
        raise OutputError(f"{echo(where)}: not a JSONL file of rows (a line is not a JSON object)")
    return rows


def data_rows(run: LoadedRun, data_file: Path | None = None) -> tuple[list[dict[str, Any]] | None, str | None]:
    """The rows the run scored, and a note where they cannot be shown.

    From the run's own ``data.jsonl`` (a causal model's rows), the document's inline rows, or a data file:
    ``data_file`` where given, else the document's ``data.path`` read from the current folder. A file is
    used only where its rows' sha256 is the one ``run.json`` records (``--data`` naming another is refused)."""
    recorded = (run.run.get("data") or {}) if isinstance(run.run, dict) else {}
    expected = recorded.get("sha256") if isinstance(recorded, dict) else None
    data = run.document.get("data") if isinstance(run.document.get("data"), dict) else {}
    if data_file is None:
        if "data.jsonl" in run.files:
            return _jsonl(run.files["data.jsonl"], str((run.folder or Path("(in memory)")) / "data.jsonl")), None
        if isinstance(data.get("rows"), list):
            return list(data["rows"]), None
    path = data_file if data_file is not None else (Path(data["path"]) if isinstance(data.get("path"), str) else None)
    if path is None:
        return None, "the run holds no data rows"
    try:
        rows = _jsonl(path.read_bytes(), str(path))
    except OSError as exc:
        if data_file is not None:
            raise OutputError(f"{echo(str(path))}: cannot read it: {exc.strerror or exc}") from None
        return None, (f"the rows are in the document's data file {shorten(str(path))}, not in the run; "
                      "`causalab report --data FILE` shows them")
    if expected and _digest(rows) != expected:
        if data_file is not None:
            raise OutputError(f"{echo(str(path))}: not the rows this run scored (their sha256 differs from the "
                              f"one run.json records, {expected[:12]}…)")
        return None, (f"{shorten(str(path))} holds other rows than the run scored; "
                      "`causalab report --data FILE` names the right file")
    return rows, None


def _tokenizer(document: dict[str, Any]) -> Any:
    model = document.get("model") or {}
    return _tokenizer_of(model.get("key"), model.get("revision"))


@lru_cache(maxsize=4)
def _tokenizer_of(key: Any, revision: Any) -> Any:
    """The model's tokenizer, from this machine only (a models plugin, a local folder or the HF cache).

    Only the plugins' ``causalab_model_source`` hook is asked: building the whole registry would import
    every engine (nnsight among them) for nothing."""
    from causalab_core.compiler.shell import resolve_source
    from causalab_core.plugins.registry import PROJECT, new_plugin_manager

    manager = new_plugin_manager()
    manager.load_setuptools_entrypoints(PROJECT)
    hook = manager.hook.causalab_model_source
    models = SimpleNamespace(model_source=lambda key, revision: hook(key=key, revision=revision))
    source = resolve_source(key, revision, models)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(source, local_files_only=True)


def prompt_tokens(run: LoadedRun, rows: list[dict[str, Any]] | None) -> tuple[dict[str, list[list[str]]] | None, str | None]:
    """Each input's prompt, per row, as the decoded tokens the compiler indexed (so a position record's
    window indexes them), and a note where they cannot be shown (``mismatch`` checks them against the run).
    """
    document = run.document
    if rows is None:
        return None, None
    try:
        tokenizer = _tokenizer(document)
        from causalab_core.compiler.prompts import tokenize_inputs

        texts = tokenize_inputs(list(document.get("inputs") or []), tuple(rows), tokenizer,
                                document.get("variables") or {}, document.get("columns") or {})
    except Exception as exc:  # noqa: BLE001 - the page still shows each window's own tokens
        line = exc.one_line() if hasattr(exc, "one_line") else f"{type(exc).__name__}: {exc}"
        return None, f"the prompts' tokens are not shown (the model's tokenizer is not on this machine: {shorten(line, 160)})"
    decoded: dict[int, str] = {}

    def token(i: int) -> str:
        if i not in decoded:
            decoded[i] = tokenizer.decode([i])
        return decoded[i]

    return {name: [[token(i) for i in row.ids] for row in texts[name]] for name in texts}, None


def mismatch(prompts: dict[str, list[list[str]]], records: list[dict[str, Any]]) -> str | None:
    """Where a positions record's window token is not the prompt's token at that index (the tokenizer on
    this machine is not the run's): a note naming the first such record and row; None where all agree."""
    for record in records:
        shown = prompts.get(record["input"])
        if shown is None:
            continue
        for r, (window, tokens) in enumerate(zip(record["windows"], record["tokens"])):
            if r >= len(shown) or any(p >= len(shown[r]) or shown[r][p] != t for p, t in zip(window, tokens)):
                return (f"the prompts' tokens are not shown: this machine's tokenizer does not give the tokens "
                        f"the run's positions record has ({record['name']!r}, row {r})")
    return None


def decode_predicted(run: LoadedRun, predicted: dict[str, list]) -> tuple[dict[str, list] | None, str | None]:
    """The metric files' predicted token ids (``{metric: [{run: [id per row]} or None per point]}``) as the tokens
    they are, and a note where they cannot be shown (no tokenizer here; a run whose engine recorded none)."""
    if not any(entry for entries in predicted.values() for entry in entries):
        return None, None
    try:
        tokenizer = _tokenizer(run.document)
    except Exception as exc:  # noqa: BLE001 - the page still shows the values
        line = exc.one_line() if hasattr(exc, "one_line") else f"{type(exc).__name__}: {exc}"
        return None, f"the predicted tokens are not shown (the model's tokenizer is not on this machine: {shorten(line, 160)})"
    decoded: dict[int, str] = {}

    def token(i: Any) -> Any:
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(tokenizer):
            return None  # not an id of this tokenizer: shown as null, never guessed
        if i not in decoded:
            decoded[i] = tokenizer.decode([i])
        return decoded[i]

    return {metric: [{role: [token(i) for i in ids] for role, ids in entry.items() if isinstance(ids, list)}
                     if entry else None for entry in entries] for metric, entries in predicted.items()}, None
