"""A row whose number could not mean anything is refused before weights load, or scored as not eligible
with a reason the metric file records; never scored as if it meant something."""

from __future__ import annotations

import copy
import json

import pytest
from typer.testing import CliRunner

import causalab_core
from causalab_core import api
from causalab_core.cli import app
from causalab_core.compiler.prompts import context_length
from causalab_testing import families, models
from causalab_testing.data import sweep_document, weekday_rows


def run_cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_point(model) -> dict:
    """The weekday document at one point (layer 1, last token): a run takes about a second."""
    doc = sweep_document(str(model), layers=[1], positions=[-1])
    doc.pop("sweep")
    for spec in (*doc["reads"].values(), *doc["writes"].values()):
        spec["layer"], spec["position"] = 1, -1
    return doc


def refused(path, tmp_path, code=1):
    """Run the document; it must stop before any work with one line, naming the document, and write nothing."""
    result = run_cli("run", path, "--out", tmp_path / "o")
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{'PlanError' if code == 1 else 'DocumentError'}: {path}: ")
    assert not (tmp_path / "o").exists()
    return lines[0]


def long_prompt(words: int) -> str:
    return "Q: what day is " + "one " * words + "days after Monday? A:"


# -- prompts the model cannot take --------------------------------------------


@pytest.mark.parametrize("model, column", [("tiny_llama", "base"), ("tiny_gpt2", "counterfactual")])
def test_a_prompt_longer_than_the_context_is_refused_naming_row_column_and_limit(model, column, request,
                                                                                 write_doc, tmp_path):
    rows = weekday_rows(4)
    rows[2][column] = long_prompt(3200)  # the case: about 3,200 tokens on a model of 128 positions
    line = refused(write_doc(one_point(request.getfixturevalue(model)), rows), tmp_path)
    assert f"row rows.jsonl:3, column '{column}': the prompt is " in line
    assert "longer than the model's context of 128 positions" in line


def test_a_prompt_of_exactly_the_context_runs_and_one_token_more_does_not(tiny_llama, write_doc, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    base = weekday_rows(2)[0]["base"]
    # The word-level tokenizer: each "one " is a token, and the BOS is one more.
    fill = 128 - len(tokenizer(long_prompt(0))["input_ids"])
    rows = weekday_rows(2)
    rows[0]["base"] = long_prompt(fill)
    assert len(tokenizer(rows[0]["base"])["input_ids"]) == 128 and base != rows[0]["base"]
    plan = api.plan(write_doc(one_point(tiny_llama), rows))
    assert len(plan.prompts["base"][0]) == 128
    rows[0]["base"] = long_prompt(fill + 1)
    line = refused(write_doc(one_point(tiny_llama), rows), tmp_path)
    assert "the prompt is 129 tokens" in line and "(config max_position_embeddings)" in line


def test_training_rows_longer_than_the_context_are_refused(tiny_llama, write_doc, tmp_path):
    doc = one_point(tiny_llama)
    train = weekday_rows(6, seed=1)
    train[4]["counterfactual"] = long_prompt(300)
    doc["featurizers"] = {"das": {"kind": "das", "rank": 2, "train": {
        "data": {"rows": train}, "label": "cf_answer", "epochs": 1, "batch_size": 4, "lr": 0.05, "seed": 0}}}
    doc["writes"]["patch"]["featurizer"] = "das"
    line = refused(write_doc(doc, weekday_rows(4)), tmp_path)
    assert "$.featurizers.das.train: row $.featurizers.das.train.data.rows[4], column 'counterfactual'" in line
    assert "longer than the model's context" in line


def test_every_family_says_how_long_a_prompt_it_takes():
    """Configs name it differently (GPT-J n_positions, the others max_position_embeddings); BLOOM's ALiBi
    has no limit, and none is made up for it."""
    tokenizer = models.word_level_tokenizer()
    found = {family: context_length(families.config(family, tokenizer)) for family in families.FAMILIES}
    assert found.pop("bloom") is None
    assert {limit for limit, _ in found.values()} == {128}, found


@pytest.mark.parametrize("model, prompt", [("tiny_llama", ""), ("tiny_gpt2", ""), ("tiny_llama", "  \n ")])
def test_an_empty_prompt_is_refused(model, prompt, request, write_doc, tmp_path):
    """GPT-2 tokenizes "" to nothing; the word-level Llama "" and blanks to its BOS alone: no prompt either way."""
    rows = weekday_rows(3)
    rows[1]["base"] = prompt
    line = refused(write_doc(one_point(request.getfixturevalue(model)), rows), tmp_path)
    assert "row rows.jsonl:2, column 'base': the prompt is empty" in line


# -- answers that are not one real token -------------------------------------


@pytest.mark.parametrize("column", ["cf_answer", "base_answer"])
def test_an_answer_outside_the_vocabulary_is_refused_not_scored_as_unk(column, tiny_llama, write_doc, tmp_path):
    rows = weekday_rows(4)
    rows[3][column] = " ☃☃☃"  # the word-level tokenizer reads it as <unk>, one token
    line = refused(write_doc(one_point(tiny_llama), rows), tmp_path)
    assert f"row rows.jsonl:4, column '{column}': answer ' ☃☃☃' is not in the model's vocabulary" in line
    assert "'<unk>'" in line


def test_a_training_label_outside_the_vocabulary_is_refused(tiny_llama, write_doc, tmp_path):
    doc = one_point(tiny_llama)
    train = weekday_rows(6, seed=1)
    train[2]["cf_answer"] = " Caturday"
    doc["featurizers"] = {"das": {"kind": "das", "rank": 2, "train": {
        "data": {"rows": train}, "label": "cf_answer", "epochs": 1, "batch_size": 4, "lr": 0.05, "seed": 0}}}
    doc["writes"]["patch"]["featurizer"] = "das"
    line = refused(write_doc(doc, weekday_rows(4)), tmp_path)
    assert "$.featurizers.das.train.label: row $.featurizers.das.train.data.rows[2]" in line
    assert "not in the model's vocabulary" in line


@pytest.mark.parametrize("model", ["tiny_llama", "tiny_gpt2"])
def test_an_empty_answer_is_refused_saying_it_is_empty(model, request, write_doc, tmp_path):
    rows = weekday_rows(4)
    rows[0]["cf_answer"] = ""
    line = refused(write_doc(one_point(request.getfixturevalue(model)), rows), tmp_path)
    assert "row rows.jsonl:1, column 'cf_answer': answer '' is 0 tokens (empty text), not one" in line


# -- a metric comparing an answer with itself ---------------------------------


@pytest.mark.parametrize("metric", [
    {"kind": "logit_diff", "target": "cf_answer", "other": "cf_answer"},
    {"kind": "iia", "choices": ["base_answer", "cf_answer", "base_answer"], "label": "cf_answer"},
])
def test_a_metric_that_names_one_column_twice_is_refused(metric, tiny_llama, write_doc, tmp_path):
    doc = one_point(tiny_llama)
    doc["metrics"] = {"m": metric}
    line = refused(write_doc(doc, weekday_rows(3)), tmp_path, code=2)
    assert "$.metrics.m: column " in line and "named twice" in line


def test_rows_whose_compared_answers_are_one_token_are_not_eligible_with_a_reason(tiny_llama, write_doc, tmp_path):
    rows = weekday_rows(5)
    rows[1]["cf_answer"] = rows[1]["base_answer"]                # the same text
    rows[3]["cf_answer"] = rows[3]["base_answer"].strip()        # other text, the same word-level token
    doc = one_point(tiny_llama)
    doc["metrics"]["nld"] = {"kind": "normalized_logit_diff", "target": "cf_answer", "other": "base_answer"}
    api.run(write_doc(doc, rows), out=tmp_path / "o")
    for name in ("iia", "logit_diff", "nld"):
        content = json.loads((tmp_path / "o" / f"{name}.json").read_text())
        assert content["eligible"] == [True, False, True, False, True], name
        assert content["reasons"] == [None, "answers_coincide", None, "answers_coincide", None], name
        assert content["values"][1] is None and content["values"][3] is None, name
        assert content["summary"]["eligible"] == 3, name
    # p_answer reads one column: nothing to coincide with, every row scored.
    p = json.loads((tmp_path / "o" / "p_answer.json").read_text())
    assert p["eligible"] == [True] * 5 and p["reasons"] == [None] * 5 and None not in p["values"]
    # The reason reaches the tables a user reads the run with.
    table = causalab_core.load(tmp_path / "o").records["rows"]
    assert [r["reason"] for r in table if r["metric"] == "iia"] == [None, "answers_coincide", None, "answers_coincide", None]
    assert {r["reason"] for r in table if r["metric"] == "p_answer"} == {None}


def test_a_row_whose_read_missed_gives_its_position_reason(tiny_llama, write_doc, tmp_path):
    rows = weekday_rows(3)
    doc = one_point(tiny_llama)
    doc["reads"]["day"] = {"input": "counterfactual", "layer": 0, "site": "block_output",
                           "position": {"variable": "cf_day"}}
    rows[2]["cf_day"] = "Caturday"
    api.run(write_doc(doc, rows), out=tmp_path / "o")
    content = json.loads((tmp_path / "o" / "iia.json").read_text())
    assert content["eligible"] == [True, True, False]
    assert content["reasons"] == [None, None, "alignment_missing"]


def test_the_same_rows_are_scored_the_same_with_or_without_a_coinciding_row(tiny_llama, write_doc, tmp_path):
    """Leaving a row out of eligibility changes no other row's value."""
    rows = weekday_rows(4)
    api.run(write_doc(one_point(tiny_llama), rows), out=tmp_path / "a")
    changed = copy.deepcopy(rows)
    changed[2]["cf_answer"] = changed[2]["base_answer"]
    api.run(write_doc(one_point(tiny_llama), changed), out=tmp_path / "b")
    a = json.loads((tmp_path / "a" / "logit_diff.json").read_text())["values"]
    b = json.loads((tmp_path / "b" / "logit_diff.json").read_text())["values"]
    assert b[2] is None and [v for i, v in enumerate(a) if i != 2] == [v for i, v in enumerate(b) if i != 2]


# -- every tokenizer style (shell checkpoints: a config and a tokenizer, enough to compile) ------------


def _one_token(tok, candidates=(" the", " a", "the", "a", " Alice", "Alice", " key", "key")):
    unk = tok.unk_token_id
    return next(c for c in candidates if len(ids := tok(c, add_special_tokens=False)["input_ids"]) == 1 and ids[0] != unk)


@pytest.mark.parametrize("style", ["byte_bpe", "sp_bpe", "sp_unigram", "sp_normalizer", "word"])
def test_every_tokenizer_style_refuses_what_cannot_be_scored(style, write_doc, tmp_path):
    from causalab_testing.tokenizers import shell_checkpoint, tokenizer

    model = shell_checkpoint(tmp_path / "model", style)
    tok = tokenizer(style)
    answer = _one_token(tok)
    rows = [{"base": "Alice has the key .", "counterfactual": "Bob has the key .", "base_answer": answer,
             "cf_answer": answer} for _ in range(3)]
    plan = api.plan(write_doc(one_point(model), rows))  # coinciding answers: a reason at scoring, not a refusal
    assert plan.rows == 3
    rows[1]["cf_answer"] = " ☃"  # outside every vocabulary: the unknown token, or several byte tokens
    line = refused(write_doc(one_point(model), rows), tmp_path)
    assert "row rows.jsonl:2, column 'cf_answer': answer ' ☃'" in line
    unknown = len(tok(" ☃", add_special_tokens=False)["input_ids"]) == 1
    assert ("not in the model's vocabulary" in line) if unknown else ("tokens" in line and "not one" in line)
    rows[1]["cf_answer"] = answer
    rows[2]["counterfactual"] = "Bob has the key . " * 80  # the shell's context is 256 positions
    line = refused(write_doc(one_point(model), rows), tmp_path)
    assert "row rows.jsonl:3, column 'counterfactual'" in line and "context of 256 positions" in line


def test_an_end_of_text_answer_is_no_unknown_token_where_the_tokenizer_names_it_so(write_doc, tmp_path):
    """GPT-2 calls <|endoftext|> its unknown token too: predicting the end of the text is still an answer."""
    from transformers import PreTrainedTokenizerFast

    from causalab_testing.tokenizers import shell_checkpoint, tokenizer

    model = shell_checkpoint(tmp_path / "model", "byte_bpe", bos=False)
    base = tokenizer("byte_bpe", bos=False)
    eos = base.eos_token
    PreTrainedTokenizerFast(tokenizer_object=base.backend_tokenizer, bos_token=eos, eos_token=eos, unk_token=eos,
                            pad_token=base.pad_token).save_pretrained(model)
    rows = [{"base": "Alice has the key .", "counterfactual": "Bob has the box .", "base_answer": eos,
             "cf_answer": _one_token(base)} for _ in range(2)]
    assert api.plan(write_doc(one_point(model), rows)).rows == 2


# -- logits no number can be read from ------------------------------------------------------------------


def noised(model, scale: float, dtype: str) -> dict:
    """The one-point document whose write adds noise of ``scale`` (no source) in ``dtype``."""
    doc = one_point(model)
    doc["model"]["dtype"] = dtype
    doc["writes"]["patch"].pop("source")
    doc["writes"]["patch"]["intervention"] = {"kind": "noise", "scale": scale}
    return doc


def test_rows_whose_scored_logits_are_not_finite_are_not_eligible_with_a_reason(tiny_llama, write_doc, tmp_path):
    """The issue's case: noise of scale 1e6 overflows float16 and every logit is NaN. IIA scored 1.0 or 0.0
    by the choices' order and answer_rank 0 ("the top token"), every row eligible."""
    doc = noised(tiny_llama, 1e6, "float16")
    doc["metrics"]["rank"] = {"kind": "answer_rank", "answer": "cf_answer"}
    api.run(write_doc(doc, weekday_rows(3)), out=tmp_path / "o")
    for name in ("iia", "logit_diff", "p_answer", "rank"):
        content = json.loads((tmp_path / "o" / f"{name}.json").read_text())
        assert content["eligible"] == [False] * 3, name
        assert content["reasons"] == ["logits_not_finite"] * 3, name
        assert content["values"] == [None] * 3, name
        assert content["summary"]["eligible"] == 0 and content["summary"]["mean"] is None, name
    table = causalab_core.load(tmp_path / "o").records["rows"]
    assert {r["reason"] for r in table} == {"logits_not_finite"}


def test_choices_tied_for_the_top_leave_iia_undefined_not_won_by_the_first(tiny_llama, write_doc, tmp_path):
    """Noise of scale 1e38 in float32: every logit is the same number, so no choice is the argmax. IIA is
    NaN there (whichever choice comes first), not 1.0 or 0.0, and the summary counts it as undefined."""
    got = {}
    for order in (["base_answer", "cf_answer"], ["cf_answer", "base_answer"]):
        doc = noised(tiny_llama, 1e38, "float32")
        doc["metrics"]["iia"]["choices"] = order
        out = tmp_path / order[0]
        api.run(write_doc(doc, weekday_rows(3)), out=out)
        got[order[0]] = json.loads((out / "iia.json").read_text())
    for content in got.values():
        assert content["eligible"] == [True] * 3 and content["reasons"] == [None] * 3
        assert content["values"] == ["NaN"] * 3
        assert content["summary"] == {"mean": None, "eligible": 3, "rows": 3, "undefined": 3}


def test_iia_is_nan_only_on_the_rows_whose_choices_tie():
    import torch

    from causalab_core.plugins.contracts import MetricInputs
    from causalab_metrics.answers import IIA, IIAParams

    logits = torch.tensor([[1.0, 2.0], [3.0, 3.0], [5.0, 4.0]])
    inputs = MetricInputs(logits=logits, logsumexp=torch.zeros(3), columns=("a", "b"),
                          token_ids={"a": [1, 1, 1], "b": [2, 2, 2]}, eligible=[True, True, True])
    values = IIA().compute(IIAParams(choices=["a", "b"], label="b"), inputs)
    assert values.rows[0] == 1.0 and values.rows[1] != values.rows[1] and values.rows[2] == 0.0
    assert values.summary == {"mean": 0.5, "eligible": 3, "rows": 3, "undefined": 1}
