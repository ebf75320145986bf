"""Positions on the tokenizer styles checkpoints ship: byte-level BPE, SentencePiece-style, word-level, BOS or not."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from causalab_core.compiler.prompts import tokenize_inputs
from causalab_positions.anchors import AMBIGUOUS, MISSING, PARTIAL, ScopedIndexResolver, VariableResolver
from causalab_positions.index import IndexResolver
from causalab_testing.tokenizers import STYLES, tokenizer

STYLE_BOS = [(style, bos) for style in STYLES for bos in (True, False)]


def row_text(style: str, bos: bool, text: str, **variables):
    return tokenize_inputs(["prompt"], ({"prompt": text, **variables},), tokenizer(style, bos))["prompt"][0]


def spelled(style: str, bos: bool, row, positions) -> str:
    """The window decoded in one piece, spaces normalized (word-level decodes with a space between tokens)."""
    return " ".join(tokenizer(style, bos).decode([row.ids[p] for p in positions]).split())


def straddles(row, start: int, end: int) -> bool:
    """Independently of the resolver: some token spells a non-space character on both sides of an edge."""
    for s, e in row.offsets:
        for edge in (start, end):
            if s < edge < e and row.text[s:edge].strip() and row.text[edge:e].strip():
                return True
    return False


@pytest.mark.parametrize("style,bos", STYLE_BOS)
def test_the_bos_is_the_tokenizers_own_and_index_counts_it(style, bos):
    tok = tokenizer(style, bos)
    row = row_text(style, bos, "Alice has the key")
    assert row.ids.count(tok.bos_token_id) == bos
    first = IndexResolver().resolve(0, row).positions[0]
    assert (row.ids[first] == tok.bos_token_id) == bos
    assert spelled(style, bos, row, [IndexResolver().resolve({"index": -1}, row).positions[0]]) == "key"
    assert IndexResolver().resolve(len(row.ids), row).reason == "position_out_of_range"


# (prompt, value): each is found, and its window decodes to exactly the value.
FOUND = [
    ("Alice has the key", "Alice"),                   # the start of the prompt: no leading space or ▁ before it
    ("the box has the key, Alice has the ball", "Alice"),  # after punctuation and a space
    ("who has the key ? Carol", "Carol"),             # the end of the prompt
    ("Zoë und Jürgen trafen Åsa in Malmö.", "Jürgen"),  # non-ASCII letters (in the vocabulary)
    ("Zoë und Jürgen trafen Åsa in Malmö now", "Malmö"),  # non-ASCII, ending the word
    ("Zoë und Jürgen trafen Åsa in Malmö.", "Zoë"),     # non-ASCII at the start
    ("the key is in São Paulo now", "São Paulo"),      # several tokens
    ("the key ( Carol ) has", "Carol"),               # between brackets set apart by spaces
]


@pytest.mark.parametrize("style,bos", STYLE_BOS)
@pytest.mark.parametrize("text,value", FOUND)
def test_a_value_window_spells_the_value(style, bos, text, value):
    row = row_text(style, bos, text, v=value)
    got = VariableResolver().resolve({"variable": "v"}, row)
    assert got.reason is None, got
    assert spelled(style, bos, row, got.positions) == value
    assert tokenizer(style, bos).bos_token_id not in [row.ids[p] for p in got.positions]
    # The first and last token of the window, by scoped index.
    for index, at in ((0, 0), (-1, -1)):
        scoped = ScopedIndexResolver().resolve({"index": index, "scope": {"variable": "v"}}, row)
        assert scoped.positions == (got.positions[at],)


@pytest.mark.parametrize("style,bos", STYLE_BOS)
def test_characters_no_vocabulary_has_fall_back_to_bytes_and_still_spell_the_value(style, bos):
    row = row_text(style, bos, "what day is 日本 in ?", v="日本")
    got = VariableResolver().resolve({"variable": "v"}, row)
    assert got.reason is None
    if style == "word":  # a word-level vocabulary has no bytes to fall back to: one unknown token, at the value
        assert [tokenizer(style, bos).convert_ids_to_tokens(row.ids[p]) for p in got.positions] == ["<unk>"]
    else:
        assert len(got.positions) == 6  # three UTF-8 bytes per character, one token each
        assert spelled(style, bos, row, got.positions) == "日本"


@pytest.mark.parametrize("style,bos", STYLE_BOS)
def test_a_value_inside_a_longer_word_is_not_a_match(style, bos):
    for text, value in (("Carolina has the key", "Carol"), ("Malmöbor has it", "Malmö")):
        assert VariableResolver().resolve({"variable": "v"}, row_text(style, bos, text, v=value)).reason == MISSING


@pytest.mark.parametrize("style,bos", STYLE_BOS)
def test_a_repeated_value_is_ambiguous(style, bos):
    row = row_text(style, bos, "Alice gave Alice the key", v="Alice")
    assert VariableResolver().resolve({"variable": "v"}, row).reason == AMBIGUOUS
    assert ScopedIndexResolver().resolve({"index": 0, "scope": {"variable": "v"}}, row).reason == AMBIGUOUS


# "Q:Alice": Llama 3's split lets a punctuation mark lead a word (":Alice"), and SentencePiece never
# splits inside ▁-free text ("▁Q:Alice"); the Unigram model and the word-level split happen to cut at ":".
GLUED = {"byte_bpe": True, "sp_bpe": True, "sp_normalizer": True, "sp_unigram": False, "word": False}


@pytest.mark.parametrize("style,bos", STYLE_BOS)
def test_a_value_sharing_a_token_with_its_neighbour_is_refused_not_widened(style, bos):
    row = row_text(style, bos, "Q:Alice has the key", v="Alice")
    assert straddles(row, 2, 7) == GLUED[style]
    got = VariableResolver().resolve({"variable": "v"}, row)
    if GLUED[style]:
        assert got.reason == PARTIAL and got.positions == ()
        assert ScopedIndexResolver().resolve({"index": -1, "scope": {"variable": "v"}}, row).reason == PARTIAL
    else:
        assert got.reason is None and spelled(style, bos, row, got.positions) == "Alice"


@pytest.mark.parametrize("text,value", [("(Carol) has the key", "Carol"), ("Åsa in Malmö.", "Malmö"),
                                        ("Erin's key", "Erin"), ("Q:Bob has it", "Bob")])
def test_glued_punctuation_is_refused_exactly_where_a_token_spans_it(text, value):
    start = text.index(value)
    glued = {}
    for style, bos in STYLE_BOS:
        row = row_text(style, bos, text, v=value)
        got = VariableResolver().resolve({"variable": "v"}, row)
        glued[style] = straddles(row, start, start + len(value))
        assert got.reason == (PARTIAL if glued[style] else None), (style, bos)
        if not glued[style]:
            assert spelled(style, bos, row, got.positions) == value
    assert not glued["word"]  # a word-level split always cuts at punctuation


def test_the_positions_record_decodes_each_token_of_the_window(tmp_path):
    """Through a compiled plan: the record's tokens are the window's tokens, one by one."""
    import causalab_core
    from causalab_testing.tokenizers import shell_checkpoint

    model = shell_checkpoint(tmp_path / "model", "sp_bpe", bos=True)
    rows = [{"base": "Alice has the key", "counterfactual": "the key is in São Paulo now", "who": "Alice",
             "cf_who": "São Paulo", "a": " key", "b": " box"}]
    last = {"index": -1, "scope": {"variable": "who"}}
    doc = {
        "version": "2", "model": {"key": str(model)}, "data": {"rows": rows},
        "variables": {"counterfactual": {"who": "cf_who"}},
        "reads": {"r": {"input": "counterfactual", "layer": 0, "site": "block_output", "position": last},
                  "all": {"input": "counterfactual", "layer": 1, "site": "block_output",
                          "position": {"variable": "who"}}},
        "writes": {"w": {"input": "base", "source": "r", "layer": 0, "site": "block_output", "position": last}},
        "metrics": {"ld": {"kind": "logit_diff", "target": "a", "other": "b"}},
    }
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    plan = causalab_core.plan(str(path))
    records = {r.name: r for r in plan.points[0].positions}
    tok = tokenizer("sp_bpe", True)
    cf_ids = plan.prompts["counterfactual"][0]
    assert records["r"].tokens[0] == (tok.decode([cf_ids[records["r"].windows[0][0]]]),)
    assert records["r"].tokens[0][0].strip() == "Paulo"
    assert [t.strip() for t in records["all"].tokens[0]] == ["São", "Paulo"]
    assert records["w"].tokens == (("Alice",),) and records["w"].windows == ((1,),)  # after the BOS
    assert plan.prompts["base"][0][0] == tok.bos_token_id


VALUES = ("Alice", "Carol", "Heidi", "Jürgen", "Åsa", "Malmö", "São Paulo", "2024", "日本")
FILLER = ("what", "day", "is", "the", "box", "key", "after", "Monday", "has", "a", "two", "Zoë", "café")
BEFORE = ("", " ", ", ", ": ", ":", "(", " (", "\n", " - ")
AFTER = ("", " ", ",", ".", "!", ")", "?", "'s", ";")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    style_bos=st.sampled_from(STYLE_BOS),
    words=st.lists(st.sampled_from(FILLER), min_size=0, max_size=8),
    value=st.sampled_from(VALUES),
    before=st.sampled_from(BEFORE),
    after=st.sampled_from(AFTER),
    data=st.data(),
)
def test_a_window_spells_its_value_or_says_why_not(style_bos, words, value, before, after, data):
    style, bos = style_bos
    if style == "word" and value in ("2024", "日本"):  # not in a word vocabulary: an <unk> cannot spell them
        value = "Heidi"
    at = data.draw(st.integers(0, len(words)))
    head = " ".join(words[:at])
    head = head + (before or " ") if head else before.lstrip()
    tail = " ".join(words[at:])
    text = f"{head}{value}{after}{' ' + tail if tail else ''}"
    start = len(head)
    row = row_text(style, bos, text, v=value)
    got = VariableResolver().resolve({"variable": "v"}, row)
    if got.reason == PARTIAL:  # refused only where a token really joins the value to its neighbour
        assert straddles(row, start, start + len(value))
        return
    assert got.reason is None, (text, got)
    assert not straddles(row, start, start + len(value))
    assert spelled(style, bos, row, got.positions) == value
    # Every token of the window lies on the value's characters (spaces aside), and none is left out.
    for p in got.positions:
        s, e = row.offsets[p]
        assert s < start + len(value) and e > start
    inside = [i for i, (s, e) in enumerate(row.offsets) if start <= s and e <= start + len(value) and e > s]
    assert set(inside) <= set(got.positions)
    first = ScopedIndexResolver().resolve({"index": 0, "scope": {"variable": "v"}}, row)
    last = ScopedIndexResolver().resolve({"index": -1, "scope": {"variable": "v"}}, row)
    assert (first.positions[0], last.positions[0]) == (got.positions[0], got.positions[-1])
