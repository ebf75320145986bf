"""Each row's prompts, tokenized once with character offsets; chat prompts rendered by the model's template."""

from __future__ import annotations

from typing import Any

from causalab_core.plugins.contracts import RowText
from causalab_core.document.load import row_name
from causalab_core.errors import PlanError, echo, shorten

ROLES = ("system", "user", "assistant")
# Private-use characters stand in for each turn's text: a template writes them through untouched.
MARK = "\ue000{}\ue001"


def folded(name: str, into: str) -> str:
    """The segment name of a turn the template writes inside another turn (Gemma's system prompt)."""
    return f"{name} (folded into {into})"


def render_chat(tokenizer: Any, messages: Any, where: str) -> tuple[str, dict[str, tuple[int, int]]]:
    """The prompt text of a conversation (generation prompt added) and each turn's character span.

    The template is rendered once more with a marker in place of each turn's text, so a turn is
    located where the template put it, never by searching for its words (which may also be in
    the template's own markup, or in another turn). A system turn the template writes inside a
    user turn is named ``system (folded into user[i])``.
    """
    if not isinstance(messages, list) or not messages or not all(
        isinstance(m, dict) and set(m) == {"role", "content"} and m["role"] in ROLES and isinstance(m["content"], str)
        for m in messages
    ):
        raise PlanError(f"{where}: a chat prompt is a list of {{\"role\": system|user|assistant, \"content\": text}}")
    if not getattr(tokenizer, "chat_template", None):
        raise PlanError(f"{where}: the model's tokenizer has no chat template to render this conversation")
    names = _turn_names(messages, where)
    if any("\ue000" in m["content"] or "\ue001" in m["content"] for m in messages):
        raise PlanError(f"{where}: a turn holds U+E000 or U+E001, the private-use characters causalab marks turns with")
    text = _render(tokenizer, messages, True, where)
    bare = _render(tokenizer, messages, False, where)
    marked = [{"role": m["role"], "content": MARK.format(i)} for i, m in enumerate(messages)]
    skeleton = _render(tokenizer, marked, True, where)
    spans = _align(text, skeleton, messages, names, where)
    segments = {names[i]: spans[i] for i in range(len(messages))}
    if "system" in segments:
        into = _folded_into(tokenizer, skeleton, marked, names, where)
        if into:
            segments[folded("system", into)] = segments.pop("system")
    if text.startswith(bare) and len(text) > len(bare):
        segments["generation"] = (len(bare), len(text))
    return text, segments


def _turn_names(messages: list[dict], where: str) -> list[str]:
    names, seen = [], {}
    for i, message in enumerate(messages):
        role = message["role"]
        if role == "system" and "system" in seen:
            raise PlanError(f"{where}: turn {i} is a second system turn; a conversation has one at most")
        names.append("system" if role == "system" else f"{role}[{seen.get(role, 0)}]")
        seen[role] = seen.get(role, 0) + 1
    return names


def _render(tokenizer: Any, messages: list[dict], generation: bool, where: str) -> str:
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)
    except Exception as exc:  # a template raises what it likes (raise_exception, a TypeError) on a turn it refuses
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise PlanError(f"{where}: the chat template refused this conversation: {shorten(reason)}") from None


def _align(text: str, skeleton: str, messages: list[dict], names: list[str], where: str) -> list[tuple[int, int]]:
    """Each turn's character span in ``text``, matching it to the marked rendering piece by piece."""
    found = []
    for i, name in enumerate(names):
        mark = MARK.format(i)
        count = skeleton.count(mark)
        if count != 1:
            did = "does not render" if count == 0 else f"renders {count} times"
            raise PlanError(f"{where}: the chat template {did} the text of turn {name}")
        found.append((skeleton.index(mark), i))
    found.sort()
    marks = [i for _, i in found]
    cuts = [0] + [c for at, i in found for c in (at, at + len(MARK.format(i)))] + [len(skeleton)]
    literals = [skeleton[cuts[2 * k]:cuts[2 * k + 1]] for k in range(len(marks) + 1)]

    def place(k: int, pos: int) -> list[tuple[int, int]] | None:
        if k == len(marks):
            return [] if pos == len(text) else None
        content = messages[marks[k]]["content"]
        for candidate in dict.fromkeys((content, content.strip())):  # templates may trim a turn (`| trim`)
            end = pos + len(candidate)
            if text.startswith(candidate, pos) and text.startswith(literals[k + 1], end):
                rest = place(k + 1, end + len(literals[k + 1]))
                if rest is not None:
                    return [(pos, end), *rest]
        return None

    placed = place(0, len(literals[0])) if text.startswith(literals[0]) else None
    if placed is None:
        raise PlanError(f"{where}: the chat template changes a turn's text beyond trimming it, or renders it "
                        "differently by its content, so causalab cannot tell where each turn is")
    spans: list[tuple[int, int]] = [(0, 0)] * len(messages)
    for k, i in enumerate(marks):
        spans[i] = placed[k]
    return spans


def _folded_into(tokenizer: Any, skeleton: str, marked: list[dict], names: list[str], where: str) -> str | None:
    """The user turn the template writes the system text into, or None where it is a turn of its own.

    Folded means: removing the system text, and the glue between it and a neighbouring user turn,
    leaves exactly the rendering of the conversation without a system turn.
    """
    i = names.index("system")
    try:
        without = _render(tokenizer, [m for j, m in enumerate(marked) if j != i], True, where)
    except PlanError:  # the template needs the system turn: it is no part of another
        return None
    order = sorted(range(len(marked)), key=lambda j: skeleton.index(marked[j]["content"]))
    k = order.index(i)
    start = skeleton.index(marked[i]["content"])
    stop = start + len(marked[i]["content"])
    if k + 1 < len(order) and names[order[k + 1]].startswith("user"):
        after = order[k + 1]
        if skeleton[:start] + skeleton[skeleton.index(marked[after]["content"]):] == without:
            return names[after]
    if k > 0 and names[order[k - 1]].startswith("user"):
        before = order[k - 1]
        ends = skeleton.index(marked[before]["content"]) + len(marked[before]["content"])
        if skeleton[:ends] + skeleton[stop:] == without:
            return names[before]
    return None


def tokenize_inputs(
    inputs: list[str], rows: tuple[dict, ...], tokenizer: Any, variables: dict[str, dict[str, str]] | None = None,
    columns: dict[str, str] | None = None,
) -> dict[str, list[RowText]]:
    """Each input of each row as a RowText (text, ids, offsets, variables, chat segments).

    ``variables`` maps an input to {variable: column}: that input's value of the variable. ``columns`` maps an
    input to the column its prompt is in, where that is not its name; such an input takes its variables from
    the input of that column's name unless it has its own.
    """
    out: dict[str, list[RowText]] = {}
    variables, columns = variables or {}, columns or {}
    for name in inputs:
        column = columns.get(name, name)
        renamed = variables.get(name, variables.get(column, {}))
        texts, segments, chat = [], [], None
        for i, row in enumerate(rows):
            where = f"{row_name(rows, i)}, column {echo(column)}"
            if column not in row:
                at = "$.inputs" if column == name else f"$.columns.{name}"
                raise PlanError(f"{at}: {row_name(rows, i)} has no column {echo(column)}")
            value = row[column]
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


CONTEXT_NAMES = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length", "seq_length")
"""Where configs keep the longest input the model takes (BLOOM's ALiBi has none: no limit is checked)."""


def context_length(config: Any) -> tuple[int, str] | None:
    """The most positions the model takes, and the config field that says so; None where none does."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for name in CONTEXT_NAMES:
        value = getattr(text, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, name
    return None


def unknown_id(tokenizer: Any) -> int | None:
    """The id text outside the vocabulary becomes, or None. GPT-2 names its end-of-text token as its
    unknown one; a byte-level vocabulary never needs one, so a token that is also BOS/EOS/pad is no unknown."""
    unk = getattr(tokenizer, "unk_token_id", None)
    others = {getattr(tokenizer, f"{name}_token_id", None) for name in ("bos", "eos", "pad")}
    return None if unk is None or unk in others else unk


def check_prompts(prompts: dict[str, list[RowText]], rows: Any, tokenizer: Any, config: Any, where: str = "") -> None:
    """Refuse a prompt no number can be read from: empty, or longer than the model's context (past it a
    model with learned positions fails, and a rotary one reads positions it never saw: a number, but
    no meaningful one). A word the vocabulary lacks is left to the model as its unknown token."""
    at = f"{where}: " if where else ""
    limit = context_length(config)
    special = set(getattr(tokenizer, "all_special_ids", ()))
    for name, texts in prompts.items():
        for i, row in enumerate(texts):
            here = f"{at}{row_name(rows, i)}, column {echo(name)}"
            if not row.text or all(t in special for t in row.ids):  # "" or "   ": nothing, or a BOS alone
                raise PlanError(f"{here}: the prompt is empty{'' if not row.text else ' once tokenized'}; "
                                "there is nothing to score a next token after")
            if limit and len(row.ids) > limit[0]:
                raise PlanError(f"{here}: the prompt is {len(row.ids)} tokens, longer than the model's context of "
                                f"{limit[0]} positions (config {limit[1]}); shorten it or drop the row")
