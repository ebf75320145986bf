"""The hooks engine's interchange equals pyvene's, bit for bit at float32 (unpadded batch)."""

from __future__ import annotations

import pytest
import torch

from causalab_core import api
from causalab_core.plugins import registry
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
    engine = registry().get("engine", "hooks")()
    got = engine.execute(plan)[plan.points[0].steps[-1].path]

    reference = pyvene_last_logits(model_dir, rows, layer, component, position)
    token_ids = torch.tensor(plan.points[0].steps[-1].scoring.token_ids)
    assert torch.equal(got["answer_logits"], reference.gather(1, token_ids))
    assert torch.equal(got["logsumexp"], reference.logsumexp(-1))


def test_the_intervention_changes_the_answer_logits(write_doc, tiny_llama):
    """Guards the test above: an interchange that did nothing would also 'match'."""
    rows = weekday_rows(12, seed=3)
    plan = api.plan(write_doc(sweep_document(str(tiny_llama), layers=[1], positions=[-4]), rows))
    engine = registry().get("engine", "hooks")()
    patched = engine.execute(plan)[plan.points[0].steps[-1].path]["answer_logits"]
    clean = pyvene_last_logits(tiny_llama, [{**r, "counterfactual": r["base"]} for r in rows], 1, "block_output", -4)
    token_ids = torch.tensor(plan.points[0].steps[-1].scoring.token_ids)
    assert not torch.allclose(patched, clean.gather(1, token_ids))
