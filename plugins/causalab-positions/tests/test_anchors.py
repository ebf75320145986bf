"""Anchored positions against real tokenizers (word-level and byte-level BPE), and chat turns."""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from causalab_core.compiler.prompts import tokenize_inputs
from causalab_core.errors import PlanError
from causalab_testing import models
from causalab_positions.anchors import AMBIGUOUS, MISSING, NO_SEGMENT, ScopedIndexResolver, VariableResolver

FILLER = ("what", "day", "is", "the", "box", "key", "after", "Monday", "?", ".", "has", "a", "two")
VALUES = ("Alice", "Bob", "Carol", "Heidi")


@functools.cache
def tokenizer(kind: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(models.ensure({"word": "tiny-llama", "bpe": "tiny-gpt2"}[kind]))


def row_text(kind: str, text: str, variables: dict):
    return tokenize_inputs(["prompt"], ({"prompt": text, **variables},), tokenizer(kind))["prompt"][0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["word", "bpe"]),
    words=st.lists(st.sampled_from(FILLER), min_size=1, max_size=12),
    value=st.sampled_from(VALUES),
    copies=st.integers(0, 2),
    data=st.data(),
)
def test_a_variable_window_spells_its_value_or_says_why_not(kind, words, value, copies, data):
    words = list(words)
    for _ in range(copies):
        words.insert(data.draw(st.integers(0, len(words))), value)
    row = row_text(kind, " ".join(words), {"entity": value})
    got = VariableResolver().resolve({"variable": "entity"}, row)
    if copies == 0:
        assert got.reason == MISSING and got.positions == ()
    elif copies == 2:
        assert got.reason == AMBIGUOUS
    else:
        decoded = tokenizer(kind).decode([row.ids[p] for p in got.positions])
        assert value in decoded
        last = ScopedIndexResolver().resolve({"index": -1, "scope": {"variable": "entity"}}, row)
        assert last.positions == (got.positions[-1],)
        first = ScopedIndexResolver().resolve({"index": 0, "scope": {"variable": "entity"}}, row)
        assert first.positions == (got.positions[0],)


@pytest.mark.parametrize("kind", ["word", "bpe"])
def test_a_value_inside_a_longer_word_is_not_a_match(kind):
    row = row_text(kind, "Carolina has the key", {"entity": "Carol"})
    assert VariableResolver().resolve({"variable": "entity"}, row).reason == MISSING


def test_a_multi_token_value_gives_every_token():
    row = row_text("bpe", "the box has Mallory Heidi .", {"entity": "Mallory Heidi"})
    got = VariableResolver().resolve({"variable": "entity"}, row)
    assert len(got.positions) > 1
    assert tokenizer("bpe").decode([row.ids[p] for p in got.positions]).strip() == "Mallory Heidi"


TEMPLATES = {
    "plain": models.CHAT_TEMPLATE,
    "bos": "{{ bos_token }}" + models.CHAT_TEMPLATE,
    "bracketed": "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}[assistant]{% endif %}",
}
CONVERSATION = [
    {"role": "user", "content": "hello"},
    {"role": "assistant", "content": "hi . what day is it ?"},
    {"role": "user", "content": "tell me what day is two days after Monday"},
]


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("system", [False, True])
@pytest.mark.parametrize("kind", ["word", "bpe"])
def test_a_chat_turn_position_is_the_last_token_of_that_turns_text(template, system, kind, monkeypatch):
    tok = tokenizer(kind)
    monkeypatch.setattr(tok, "chat_template", TEMPLATES[template])
    messages = ([{"role": "system", "content": "you are a helpful assistant"}] if system else []) + CONVERSATION
    row = tokenize_inputs(["chat"], ({"chat": messages},), tok)["chat"][0]
    got = ScopedIndexResolver().resolve({"index": -1, "scope": {"segment": "user[1]"}}, row)
    assert tok.decode([row.ids[got.positions[0]]]).strip() == "Monday"
    first = ScopedIndexResolver().resolve({"index": 0, "scope": {"segment": "user[0]"}}, row)
    first_token = tok.decode([row.ids[first.positions[0]]]).strip()
    assert first_token and "hello".startswith(first_token)
    assert ("system" in row.segments) == system and "generation" in row.segments
    missing = ScopedIndexResolver().resolve({"index": 0, "scope": {"segment": "user[5]"}}, row)
    assert missing.reason == NO_SEGMENT
    # The template decides the BOS: rendered once where it writes one, never added behind it.
    assert row.ids.count(tok.bos_token_id) == (template == "bos")
    assert (row.ids[0] == tok.bos_token_id) == (template == "bos")


def test_a_variable_is_found_inside_a_turn_only():
    messages = [{"role": "user", "content": "Alice has the key"}, {"role": "assistant", "content": "Alice"},
                {"role": "user", "content": "who has the key ?"}]
    row = tokenize_inputs(["chat"], ({"chat": messages, "who": "Alice"},), tokenizer("word"))["chat"][0]
    assert ScopedIndexResolver().resolve({"index": 0, "scope": {"variable": "who"}}, row).reason == AMBIGUOUS
    scoped = ScopedIndexResolver().resolve({"index": 0, "scope": {"variable": "who", "segment": "assistant[0]"}}, row)
    assert tokenizer("word").decode([row.ids[scoped.positions[0]]]) == "Alice"
    assert row.offsets[scoped.positions[0]][0] >= row.segments["assistant[0]"][0]


def test_a_malformed_chat_prompt_is_a_plan_error():
    with pytest.raises(PlanError, match=r"row \$\.data\.rows\[0\], column 'chat': a chat prompt is a list"):
        tokenize_inputs(["chat"], ({"chat": [{"role": "robot", "content": "x"}]},), tokenizer("word"))


@pytest.mark.parametrize("spec,message", [
    ({"index": -1, "scope": {"segment": "user1"}}, "scope.segment"),
    ({"index": -1, "scope": {"colour": "red"}}, "`scope` must be an object"),
    ({"index": "last", "scope": {"variable": "x"}}, "`index` must be an integer"),
])
def test_malformed_scopes_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        ScopedIndexResolver().check(spec)
