"""Answer columns: each row's answer as the one token id a metric scores, refused where it is not one known token."""

from __future__ import annotations

from typing import Any

from causalab_core.compiler.prompts import unknown_id
from causalab_core.document.load import row_name
from causalab_core.errors import PlanError, echo


def answer_token(tokenizer: Any, rows: tuple[dict, ...], column: str, where: str) -> tuple[int, ...]:
    """The single token id of an answer column on each row: one token, never the unknown token."""
    unknown = unknown_id(tokenizer)
    ids = []
    for i, row in enumerate(rows):
        if column not in row:
            raise PlanError(f"{where}: {row_name(rows, i)} has no column {echo(column)}")
        value = row[column]
        if not isinstance(value, str):
            raise PlanError(f"{where}: {row_name(rows, i)}, column {echo(column)}: an answer must be a string, "
                            f"got {echo(value)}")
        tokens = tokenizer(value, add_special_tokens=False)["input_ids"]
        here = f"{where}: {row_name(rows, i)}, column {column!r}: answer {echo(value)}"
        if len(tokens) != 1:
            # A metric reads one next-token logit: scoring the first of several would score another answer.
            empty = " (empty text)" if not value else ""
            raise PlanError(f"{here} is {len(tokens)} tokens{empty}, not one (answers are scored as the next "
                            "token; mind the leading space)")
        if tokens[0] == unknown:
            raise PlanError(f"{here} is not in the model's vocabulary: the tokenizer reads it as the unknown token "
                            f"{echo(tokenizer.unk_token)}, whose logit says nothing about the answer")
        ids.append(tokens[0])
    return tuple(ids)
