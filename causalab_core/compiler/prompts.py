"""Each row's prompts, tokenized once with character offsets; chat prompts rendered by the model's template."""

from __future__ import annotations

from typing import Any

from causalab_core.contracts import RowText
from causalab_core.document.load import row_name
from causalab_core.errors import PlanError, echo

ROLES = ("system", "user", "assistant")


def render_chat(tokenizer: Any, messages: Any, where: str) -> tuple[str, dict[str, tuple[int, int]]]:
    """The prompt text of a conversation (generation prompt added) and each turn's character span."""
    if not isinstance(messages, list) or not messages or not all(
        isinstance(m, dict) and set(m) == {"role", "content"} and m["role"] in ROLES and isinstance(m["content"], str)
        for m in messages
    ):
        raise PlanError(f"{where}: a chat prompt is a list of {{\"role\": system|user|assistant, \"content\": text}}")
    if not getattr(tokenizer, "chat_template", None):
        raise PlanError(f"{where}: the model's tokenizer has no chat template to render this conversation")
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    bare = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    segments: dict[str, tuple[int, int]] = {}
    seen: dict[str, int] = {}
    cursor = 0
    for message in messages:
        role = message["role"]
        name = "system" if role == "system" else f"{role}[{seen.get(role, 0)}]"
        seen[role] = seen.get(role, 0) + 1
        at = text.find(message["content"], cursor)
        if at < 0:
            raise PlanError(f"{where}: the chat template did not render the text of turn {name}")
        segments[name] = (at, at + len(message["content"]))
        cursor = at + len(message["content"])
    if text.startswith(bare) and len(text) > len(bare):
        segments["generation"] = (len(bare), len(text))
    return text, segments


def tokenize_inputs(
    inputs: list[str], rows: tuple[dict, ...], tokenizer: Any, variables: dict[str, dict[str, str]] | None = None
) -> dict[str, list[RowText]]:
    """Each input column of each row as a RowText (text, ids, offsets, variables, chat segments).

    ``variables`` maps an input to {variable: column}: that input's value of the variable.
    """
    out: dict[str, list[RowText]] = {}
    for name in inputs:
        renamed = (variables or {}).get(name, {})
        texts, segments, chat = [], [], None
        for i, row in enumerate(rows):
            where = f"{row_name(rows, i)}, column {echo(name)}"
            if name not in row:
                raise PlanError(f"$.inputs: {row_name(rows, i)} has no column {echo(name)}")
            value = row[name]
            if not isinstance(value, (str, list)):
                raise PlanError(f"{where}: a prompt is a string or a list of chat messages "
                                f"({{\"role\": ..., \"content\": ...}}), got {echo(value)}")
            is_chat = isinstance(value, list)
            if chat is not None and is_chat != chat:
                raise PlanError(f"{where}: mixes chat and plain prompts in one input")
            chat = is_chat
            if is_chat:
                text, spans = render_chat(tokenizer, value, where)
            else:
                text, spans = value, {}
            texts.append(text)
            segments.append(spans)
        # A rendered conversation already carries the template's special tokens.
        enc = tokenizer(texts, add_special_tokens=not chat, return_offsets_mapping=True)
        out[name] = [
            RowText(text, tuple(ids), tuple(map(tuple, offsets)), _variables(row, renamed), spans)
            for text, ids, offsets, row, spans in zip(texts, enc["input_ids"], enc["offset_mapping"], rows, segments)
        ]
    return out


def _variables(row: dict, renamed: dict[str, str]) -> dict:
    values = dict(row)
    for variable, column in renamed.items():
        if column in row:
            values[variable] = row[column]
        else:
            values.pop(variable, None)
    return values
