"""Chat segments on the template shapes real checkpoints ship, on every tokenizer style; the BOS rule."""

from __future__ import annotations

import json

import pytest

from causalab_core.compiler.prompts import folded, tokenize_inputs
from causalab_core.errors import PlanError
from causalab_positions.anchors import AMBIGUOUS, FOLDED, NO_SEGMENT, ScopedIndexResolver, VariableResolver
from causalab_testing.tokenizers import STYLES, SYSTEM_FOLDS_INTO, TEMPLATE_BOS, TEMPLATES, shell_checkpoint, tokenizer

SYSTEM = {"role": "system", "content": "you are a helpful assistant"}
CONVERSATION = [
    {"role": "user", "content": "hello"},
    {"role": "assistant", "content": "hi . what day is it ?"},
    {"role": "user", "content": "tell me what day is two days after Monday"},
]
# Where each template writes the system text when it folds it: Gemma's first user turn, Mistral's last.
INTO = {"first": "user[0]", "last": "user[1]"}
CASES = [(t, s, b) for t in sorted(TEMPLATES) for s in STYLES for b in (True, False)]


def chat_row(tok, messages, **variables):
    return tokenize_inputs(["chat"], ({"chat": messages, **variables},), tok)["chat"][0]


def at(spec, row):
    return ScopedIndexResolver().resolve(spec, row)


def words(tok, ids) -> list[str]:
    return tok.decode(list(ids)).split()


@pytest.mark.parametrize("template,style,bos", CASES)
def test_each_turn_is_its_own_text_on_every_template_and_style(template, style, bos):
    tok = tokenizer(style, bos, template)
    row = chat_row(tok, [SYSTEM, *CONVERSATION])
    turns = {"user[0]": CONVERSATION[0], "assistant[0]": CONVERSATION[1], "user[1]": CONVERSATION[2]}
    for name, message in turns.items():
        start, end = row.segments[name]
        assert row.text[start:end] == message["content"]
        first = at({"index": 0, "scope": {"segment": name}}, row).positions[0]
        last = at({"index": -1, "scope": {"segment": name}}, row).positions[0]
        assert words(tok, row.ids[first:last + 1]) == message["content"].split(), name
    # The generation prompt ends the prompt; Mistral's template has none of its own ([/INST] ends the user turn).
    if template == "mistral":
        assert at({"index": -1, "scope": {"segment": "generation"}}, row).reason == NO_SEGMENT
    else:
        assert at({"index": -1, "scope": {"segment": "generation"}}, row).positions == (len(row.ids) - 1,)
    folds = SYSTEM_FOLDS_INTO[template]
    system = at({"index": -1, "scope": {"segment": "system"}}, row)
    if folds:
        assert system.reason == FOLDED and "system" not in row.segments
        start, end = row.segments[folded("system", INTO[folds])]
        assert row.text[start:end] == SYSTEM["content"]
        # The folded text sits inside the turn it joined: after that turn's markup, before its own text.
        assert start < row.segments[INTO[folds]][0] and (folds == "last") == (start > row.segments["assistant[0]"][1])
    else:
        first = at({"index": 0, "scope": {"segment": "system"}}, row).positions[0]
        assert words(tok, row.ids[first:system.positions[0] + 1]) == SYSTEM["content"].split()
        start, end = row.segments["system"]
        assert row.text[start:end] == SYSTEM["content"]


@pytest.mark.parametrize("template,style,bos", CASES)
def test_the_template_decides_the_bos(template, style, bos):
    """One BOS where the template writes it (none added by the tokenizer on top), none where it writes none."""
    tok = tokenizer(style, bos, template)
    row = chat_row(tok, CONVERSATION)
    assert row.ids.count(tok.bos_token_id) == TEMPLATE_BOS[template]
    assert (row.ids[0] == tok.bos_token_id) == TEMPLATE_BOS[template]
    # A plain prompt on the same tokenizer: its post-processor decides.
    plain = tokenize_inputs(["p"], ({"p": "hello"},), tok)["p"][0]
    assert plain.ids.count(tok.bos_token_id) == bos


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("style", ["byte_bpe", "sp_bpe", "word"])
def test_a_turn_whose_text_is_also_markup_is_found_at_the_turn(template, style):
    """A turn saying "user" or "assistant" is that turn's text, not the template's role marker."""
    tok = tokenizer(style, True, template)
    messages = [SYSTEM, {"role": "user", "content": "user"}, {"role": "assistant", "content": "assistant"},
                {"role": "user", "content": "system"}]
    row = chat_row(tok, messages)
    spans = []
    for i, name in ((1, "user[0]"), (2, "assistant[0]"), (3, "user[1]")):
        message = messages[i]
        start, end = row.segments[name]
        assert row.text[start:end] == message["content"]
        # Independently: rewriting only this turn's text changes the prompt exactly there.
        other = chat_row(tok, [*messages[:i], {**message, "content": "Q" * len(message["content"])}, *messages[i + 1:]])
        changed = [k for k, (a, b) in enumerate(zip(row.text, other.text)) if a != b]
        assert (changed[0], changed[-1] + 1) == (start, end), name
        spans.append((start, end))
        spec = {"variable": "w", "segment": name}
        window = VariableResolver().resolve(spec, chat_row(tok, messages, w=message["content"]))
        assert words(tok, [row.ids[p] for p in window.positions]) == [message["content"]]
    assert spans == sorted(spans) and all(a[1] < b[0] for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_a_variable_is_searched_inside_a_turn(template):
    tok = tokenizer("byte_bpe", True, template)
    messages = [{"role": "user", "content": "Alice has the key"}, {"role": "assistant", "content": "Alice"},
                {"role": "user", "content": "who has the key ?"}]
    row = chat_row(tok, messages, who="Alice")
    assert at({"index": 0, "scope": {"variable": "who"}}, row).reason == AMBIGUOUS
    scoped = at({"index": 0, "scope": {"variable": "who", "segment": "assistant[0]"}}, row)
    assert tok.decode([row.ids[scoped.positions[0]]]).strip() == "Alice"
    start, end = row.segments["assistant[0]"]
    s, e = row.offsets[scoped.positions[0]]
    assert start < e and s < end  # Mistral's " Alice" token carries the space its template puts before a reply


@pytest.mark.parametrize("template", ["llama3", "gemma"])
def test_a_template_that_trims_a_turn_gives_the_trimmed_text(template):
    tok = tokenizer("sp_unigram", True, template)
    row = chat_row(tok, [{"role": "user", "content": "  hello there \n"}])
    start, end = row.segments["user[0]"]
    assert row.text[start:end] == "hello there"


@pytest.mark.parametrize("template", ["gemma", "mistral"])
def test_without_a_system_turn_nothing_is_folded(template):
    row = chat_row(tokenizer("sp_bpe", True, template), CONVERSATION)
    generation = {"generation"} if template == "gemma" else set()
    assert set(row.segments) == {"user[0]", "assistant[0]", "user[1]"} | generation


# Gemma 2's template refuses a system turn; another drops it; another rewrites each turn.
REFUSES = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}"
           "{{ raise_exception('System role not supported') }}{% endif %}"
           "<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}")
DROPS = ("{% for m in messages %}{% if m['role'] != 'system' %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n"
         "{% endif %}{% endfor %}")
SHOUTS = "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] | upper }}<|end|>\n{% endfor %}"


@pytest.mark.parametrize("template,messages,message", [
    (REFUSES, [SYSTEM, *CONVERSATION], "the chat template refused this conversation: System role not supported"),
    (DROPS, [SYSTEM, *CONVERSATION], "the chat template does not render the text of turn system"),
    (SHOUTS, CONVERSATION, "changes a turn's text beyond trimming it"),
    (TEMPLATES["chatml"], [SYSTEM, SYSTEM, *CONVERSATION], "turn 1 is a second system turn"),
])
def test_a_conversation_the_template_cannot_place_is_a_one_line_plan_error(template, messages, message, monkeypatch):
    tok = tokenizer("word", True)
    monkeypatch.setattr(tok, "chat_template", template)
    with pytest.raises(PlanError, match=r"^row \$\.data\.rows\[0\], column 'chat': .*" + message) as info:
        chat_row(tok, messages)
    assert "\n" not in str(info.value)


def document(model, position, write=True):
    rows = [{"chat": [SYSTEM, *CONVERSATION], "cf": [{"role": "system", "content": "you are a user"}, *CONVERSATION],
             "a": "Monday", "b": "two"}]
    doc = {
        "version": "2", "model": {"key": str(model)}, "data": {"rows": rows}, "inputs": ["chat", "cf"],
        "reads": {"r": {"input": "cf", "layer": 0, "site": "block_output", "position": position}},
        "metrics": {"ld": {"kind": "logit_diff", "target": "a", "other": "b", "input": "cf"}},
    }
    if write:
        doc["writes"] = {"w": {"input": "chat", "source": "r", "layer": 0, "site": "block_output",
                               "position": position}}
        del doc["metrics"]["ld"]["input"]
    return doc


def plan_of(tmp_path, template, position, write=True):
    import causalab_core

    model = shell_checkpoint(tmp_path / template, "sp_bpe", bos=True, template=template)
    path = tmp_path / f"{template}.json"
    path.write_text(json.dumps(document(model, position, write)))
    return causalab_core.plan(str(path)), path


def test_asking_for_the_system_turn_where_the_template_folds_it_is_refused_in_the_plan(tmp_path):
    system = {"index": -1, "scope": {"segment": "system"}}
    plan, _ = plan_of(tmp_path, "llama3", system)
    (record,) = [r for r in plan.points[0].positions if r.name == "w"]
    last = record.tokens[0][0].strip()  # the system text's last token: all or the end of "assistant"
    assert record.reasons == (None,) and last and "assistant".endswith(last)
    with pytest.raises(PlanError, match=r"gemma\.json: write 'w' has nothing to write on row\(s\) .*segment_folded"):
        plan_of(tmp_path, "gemma", system)
    read_only, _ = plan_of(tmp_path, "gemma", system, write=False)
    assert read_only.points[0].positions[0].reasons == ("segment_folded",)
    # The plan's segments say it too: the system text's tokens, named for the turn they joined.
    spans = read_only.segments["chat"][0]
    assert "system" not in spans and folded("system", "user[0]") in spans
    start, stop = spans[folded("system", "user[0]")]
    assert stop <= spans["user[0]"][0]
    tok = tokenizer("sp_bpe", True, "gemma")
    assert " ".join(tok.decode(list(read_only.prompts["chat"][0][start:stop])).split()) == SYSTEM["content"]


def test_a_plan_carries_the_one_bos_the_template_wrote(tmp_path):
    last = {"index": -1, "scope": {"segment": "user[1]"}}
    tok = tokenizer("sp_bpe", True)
    for template in ("llama3", "chatml"):
        plan, _ = plan_of(tmp_path, template, last)
        ids = plan.prompts["chat"][0]
        assert ids.count(tok.bos_token_id) == TEMPLATE_BOS[template]
        assert (ids[0] == tok.bos_token_id) == TEMPLATE_BOS[template]
        (record,) = [r for r in plan.points[0].positions if r.name == "w"]
        assert record.tokens[0][0].strip() == "Monday"
