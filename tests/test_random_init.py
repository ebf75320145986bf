"""`model.init: random`: the checkpoint's architecture with weights drawn from a seed, the baseline a finding on
trained weights must beat; the same weights on both local engines, refused on ndif in one line."""

from __future__ import annotations

import json

import torch
from typer.testing import CliRunner
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from causalab_core import api
from causalab_core.cli import app
from causalab_testing.data import weekday_rows

ROWS = weekday_rows(10, seed=4)


def clean_doc(model, init: dict) -> dict:
    return {"version": "2", "model": {"key": str(model), **init}, "data": {"path": "rows.jsonl"},
            "inputs": ["base"], "metrics": {"p": {"kind": "p_answer", "answer": "base_answer", "input": "base"}}}


def p_values(out):
    return json.loads((out / "p.json").read_text())["values"]


def test_random_weights_are_the_seeds_on_every_local_engine(write_doc, tiny_llama, tmp_path):
    path = write_doc(clean_doc(tiny_llama, {"init": "random", "init_seed": 5}), ROWS)
    for engine in ("hooks", "nnterp"):
        api.run(path, out=tmp_path / engine, engine=engine)
    assert p_values(tmp_path / "hooks") == p_values(tmp_path / "nnterp")
    # The same weights built here, outside causalab, give the same probabilities.
    torch.manual_seed(5)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tiny_llama)).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    expected = []
    for row in ROWS:
        with torch.no_grad():
            logits = model(torch.tensor([tokenizer(row["base"])["input_ids"]])).logits[0, -1]
        expected.append(torch.softmax(logits, -1)[tokenizer(row["base_answer"])["input_ids"][-1]].item())
    assert max(abs(a - b) for a, b in zip(p_values(tmp_path / "hooks"), expected)) < 1e-6
    api.run(write_doc(clean_doc(tiny_llama, {"init": "random", "init_seed": 6}), name="other.json"),
            out=tmp_path / "other")
    api.run(write_doc(clean_doc(tiny_llama, {}), name="trained.json"), out=tmp_path / "trained")
    assert len({json.dumps(p_values(tmp_path / name)) for name in ("hooks", "other", "trained")}) == 3


def test_random_weights_on_ndif_are_refused_before_any_request(write_doc, tiny_llama, tmp_path):
    path = write_doc(clean_doc(tiny_llama, {"init": "random"}), ROWS)
    result = CliRunner().invoke(app, ["run", str(path), "--engine", "ndif", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and not (tmp_path / "o").exists()
    assert result.stderr.strip().count("\n") == 0 and "$.model.init: random weights are built locally" in result.stderr


def test_a_trained_document_plans_as_before(write_doc, tiny_llama):
    plan = api.plan(write_doc(clean_doc(tiny_llama, {}), ROWS))
    assert "init_seed" not in plan.to_dict()["model"] and "init" not in plan.document["model"]
    assert api.plan(write_doc(clean_doc(tiny_llama, {"init": "random"}), name="r.json")).model.init_seed == 0
