"""The hooks engine's interchange equals pyvene's, bit for bit at float32 (unpadded batch) on the plain path,
within 1e-5 with the position reuse the planner picks."""

from __future__ import annotations

import pytest
import torch

from causalab_core import api
from causalab_core.plugins.registry import registry
from causalab_testing.data import sweep_document, weekday_rows

PYVENE_COMPONENT = {
    "block_output": "block_output",
    "block_input": "block_input",
    "attn_output": "attention_output",
    "mlp_output": "mlp_output",
}


def pyvene_last_logits(model_dir, rows, layer, component, position):
    pv = pytest.importorskip("pyvene")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # Frozen weights and last-position logits, as every causalab engine runs a
    # model: with frozen weights torch picks a linear kernel whose last bits
    # depend on how many positions the LM head projects.
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval().requires_grad_(False)
    tok = AutoTokenizer.from_pretrained(model_dir)
    config = pv.IntervenableConfig(
        [{"layer": layer, "component": PYVENE_COMPONENT[component], "intervention_type": pv.VanillaIntervention}]
    )
    intervenable = pv.IntervenableModel(config, model)
    base = {**tok([r["base"] for r in rows], return_tensors="pt"), "logits_to_keep": 1}
    source = tok([r["counterfactual"] for r in rows], return_tensors="pt")
    n = base["input_ids"].shape[1]
    where = [[[position % n]] * len(rows)]
    with torch.no_grad():
        _, out = intervenable(base, [source], {"sources->base": (where, where)})
    return out.logits[:, -1, :].float()


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
@pytest.mark.parametrize("component,layer,position", [
    ("block_output", 1, -4), ("block_output", 3, -1), ("block_input", 2, -4),
    ("attn_output", 0, -1), ("mlp_output", 2, -4),
])
def test_hooks_interchange_matches_pyvene_bit_for_bit(arch, component, layer, position, request, write_doc):
    model_dir = request.getfixturevalue(arch)
    rows = weekday_rows(12, seed=3)
    doc = sweep_document(str(model_dir), layers=[layer], positions=[position])
    for spec in (*doc["reads"].values(), *doc["writes"].values()):
        spec["site"] = component
    plan = api.plan(write_doc(doc, rows))
    hooks = registry().get("engine", "hooks")
    # Bitwise is the plain path's promise; the position reuse the planner picks here is held within 1e-5.
    plain = hooks(options=hooks.Options(positions=False)).execute(plan)[plan.points[0].steps[-1].path]
    picked = hooks().execute(plan)[plan.points[0].steps[-1].path]

    reference = pyvene_last_logits(model_dir, rows, layer, component, position)
    token_ids = torch.tensor(plan.points[0].steps[-1].scoring.token_ids)
    assert torch.equal(plain["answer_logits"], reference.gather(1, token_ids))
    assert torch.equal(plain["logsumexp"], reference.logsumexp(-1))
    assert plan.position_reuse
    torch.testing.assert_close(picked["answer_logits"], reference.gather(1, token_ids), atol=1e-5, rtol=0)


def test_the_intervention_changes_the_answer_logits(write_doc, tiny_llama):
    """Guards the test above: an interchange that did nothing would also 'match'."""
    rows = weekday_rows(12, seed=3)
    plan = api.plan(write_doc(sweep_document(str(tiny_llama), layers=[1], positions=[-4]), rows))
    engine = registry().get("engine", "hooks")()
    patched = engine.execute(plan)[plan.points[0].steps[-1].path]["answer_logits"]
    clean = pyvene_last_logits(tiny_llama, [{**r, "counterfactual": r["base"]} for r in rows], 1, "block_output", -4)
    token_ids = torch.tensor(plan.points[0].steps[-1].scoring.token_ids)
    assert not torch.allclose(patched, clean.gather(1, token_ids))


def _clean_last_logits(model_dir, prompts):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval().requires_grad_(False)
    tok = AutoTokenizer.from_pretrained(model_dir)
    with torch.no_grad():
        return model(**tok(prompts, return_tensors="pt"), logits_to_keep=1).logits[:, -1, :].float()


@pytest.mark.parametrize("engine", ["hooks", "nnterp"])
def test_kl_rank_and_normalized_logit_diff_match_an_independent_computation(engine, tiny_llama, write_doc, tmp_path):
    """The metrics that read the whole vocabulary or the clean runs, against pyvene's patched logits and
    plain forwards of both prompts, computed here by their textbook formulas."""
    import json

    rows = weekday_rows(12, seed=3)
    doc = sweep_document(str(tiny_llama), layers=[2], positions=[-4])
    doc["metrics"] = {
        "kl": {"kind": "kl"},
        "kl_base": {"kind": "kl", "reference": "base"},
        "rank": {"kind": "answer_rank", "answer": "cf_answer"},
        "nld": {"kind": "normalized_logit_diff", "target": "cf_answer", "other": "base_answer"},
    }
    api.run(write_doc(doc, rows), out=tmp_path / "o", engine=engine)
    got = {m: json.loads((tmp_path / "o" / "layers=2,pos=-4" / f"{m}.json").read_text())["values"] for m in doc["metrics"]}

    patched = pyvene_last_logits(tiny_llama, rows, 2, "block_output", -4)
    base = _clean_last_logits(tiny_llama, [r["base"] for r in rows])
    cf = _clean_last_logits(tiny_llama, [r["counterfactual"] for r in rows])
    tok = __import__("transformers").AutoTokenizer.from_pretrained(tiny_llama)
    target = torch.tensor([tok(r["cf_answer"], add_special_tokens=False)["input_ids"][0] for r in rows])
    other = torch.tensor([tok(r["base_answer"], add_special_tokens=False)["input_ids"][0] for r in rows])

    def kl(p, q):
        p, q = p.log_softmax(-1), q.log_softmax(-1)
        return (p.exp() * (p - q)).sum(-1)

    def diff(logits):
        return logits.gather(1, target[:, None])[:, 0] - logits.gather(1, other[:, None])[:, 0]

    rank = (patched > patched.gather(1, target[:, None])).sum(-1)
    nld = (diff(patched) - diff(base)) / (diff(cf) - diff(base))
    assert got["kl"] == pytest.approx(kl(patched, cf).tolist(), abs=1e-5)
    assert got["kl_base"] == pytest.approx(kl(patched, base).tolist(), abs=1e-5)
    assert got["rank"] == rank.tolist()
    # A ratio: the logits' 1e-6 relative rounding (position reuse, which the planner picks here) stays relative.
    assert got["nld"] == pytest.approx(nld.tolist(), abs=1e-5, rel=1e-5)
    assert max(got["kl"]) > 0.01 and max(got["kl_base"]) > 0.01  # the patch moved the distribution
