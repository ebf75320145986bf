"""The circuit models: their recorded facts hold on the shipped weights, and the recipe runs (a few steps)."""

from __future__ import annotations

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from causalab_toy import circuits, facts, models, train


def shipped(name: str):
    path = models.CHECKPOINTS / name
    return (AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path),
            json.loads((path / "training.json").read_text()))


def test_the_induction_model_has_a_previous_token_head_and_induction_heads():
    """Olsson et al.'s circuit, by attention and by ablation: a layer-0 head attends to the token before,
    layer-1 heads attend to the token after the earlier occurrence of the current one; zeroing the
    previous-token heads or the induction heads breaks the task, zeroing the other layer-0 heads does not."""
    model, tokenizer, training = shipped("induction")
    found = facts.induction_facts(model, tokenizer)
    recorded = training["facts"]
    assert found["previous_token_heads"] == recorded["previous_token_heads"] != []
    assert found["induction_heads"] == recorded["induction_heads"] != []
    assert max(abs(a - b) for a, b in zip(found["previous_token_attention"], recorded["previous_token_attention"])) < 0.01
    assert found["accuracy"] >= 0.95
    assert found["accuracy_previous_token_heads_zeroed"] < 0.5
    assert found["accuracy_induction_heads_zeroed"] < 0.1
    assert found["accuracy_other_layer0_heads_zeroed"] >= 0.95
    assert model.config.intermediate_size == 0  # attention-only: no MLP units


def test_the_ioi_model_is_gpt2_style_wider_than_64_and_answers_held_out_pairs():
    model, tokenizer, training = shipped("ioi")
    assert model.config.model_type == "gpt2" and model.config.n_layer >= 4 and model.config.n_embd >= 256
    found = facts.ioi_facts(model, tokenizer)
    for key in ("accuracy", "accuracy_ABBA", "accuracy_BABA"):
        assert abs(found[key] - training["facts"][key]) < 0.02
    assert found["accuracy"] >= 0.9


@pytest.mark.parametrize("name", ["induction", "ioi"])
def test_the_recipe_runs_a_few_steps(name, tmp_path):
    result = train.train(name, tmp_path / name, steps=3, log=lambda *a, **k: None)
    assert (tmp_path / name / "model.safetensors").is_file() and "facts" in result
    assert json.loads((tmp_path / name / "training.json").read_text())["steps"] == 3


def test_rows_have_one_length_per_row_and_held_out_splits():
    for task in ("induction", "ioi"):
        rows = circuits.rows(task, 50, "test")
        assert all(len(r["base"].split()) == len(r["counterfactual"].split()) for r in rows)
        train_rows = circuits.rows(task, 200, "train")
        assert not {r["base"] for r in rows} & {r["base"] for r in train_rows}
    pairs = {(r["io"], r["s"]) for r in circuits.rows("ioi", 300, "test")}
    assert not pairs & {(r["io"], r["s"]) for r in circuits.rows("ioi", 1000, "train")}
