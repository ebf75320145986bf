"""The hooks engine: conformance, padding, sites, dtype."""

from __future__ import annotations

import pytest
import torch

from causalab_core import api
from causalab_testing.conformance import EngineConformance, ragged_rows
from causalab_testing.data import sweep_document, weekday_rows
from causalab_hooks.engine import HooksEngine


class TestConformance(EngineConformance):
    @pytest.fixture
    def engine(self):
        return HooksEngine()


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
def test_a_padded_row_scores_as_it_does_alone(arch, request, write_doc):
    """Left padding with mask-derived position ids leaves every row's result as if unpadded."""
    rows = ragged_rows(6)
    plan = api.plan(write_doc(sweep_document(str(request.getfixturevalue(arch)), layers=[1], positions=[-4]), rows))
    padded = HooksEngine().execute(plan)
    alone = HooksEngine().execute(plan, batch_size=1)
    assert len({len(p) for p in plan.prompts["base"]}) > 1, "the rows must differ in length"
    path = plan.points[0].steps[-1].path
    torch.testing.assert_close(padded[path]["answer_logits"], alone[path]["answer_logits"], rtol=0, atol=1e-5)


def _head_doc(model_key: str, heads: int, layer: int = 1) -> dict:
    doc = sweep_document(model_key, layers=[layer], positions=[-4])
    doc.pop("sweep")
    doc["reads"] = {f"h{h}": {"input": "counterfactual", "layer": layer, "site": "head", "head": h, "position": -4}
                    for h in range(heads)}
    doc["writes"] = {f"w{h}": {"input": "base", "source": f"h{h}", "layer": layer, "site": "head", "head": h,
                               "position": -4} for h in range(heads)}
    return doc


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
def test_swapping_every_head_equals_swapping_the_attention_output(arch, request, write_doc, tmp_path):
    """The output projection is linear, so all heads swapped is the attention output swapped."""
    key = str(request.getfixturevalue(arch))
    rows = weekday_rows(8)
    heads = api.plan(write_doc(_head_doc(key, 4), rows, name="heads.json"))
    assert heads.requires == ("heads",)
    whole_doc = sweep_document(key, layers=[1], positions=[-4])
    for spec in (*whole_doc["reads"].values(), *whole_doc["writes"].values()):
        spec["site"] = "attn_output"
    whole = api.plan(write_doc(whole_doc, rows, name="whole.json"))
    got = HooksEngine().execute(heads)[heads.points[0].steps[-1].path]["answer_logits"]
    expected = HooksEngine().execute(whole)[whole.points[0].steps[-1].path]["answer_logits"]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-4)
    one_head = _head_doc(key, 1)
    partial = api.plan(write_doc(one_head, rows, name="one.json"))
    assert not torch.allclose(HooksEngine().execute(partial)[partial.points[0].steps[-1].path]["answer_logits"], expected)


def test_the_document_dtype_is_the_loaded_dtype(write_doc, tiny_llama):
    doc = sweep_document(str(tiny_llama), layers=[0], positions=[-1])
    doc["model"]["dtype"] = "bfloat16"
    plan = api.plan(write_doc(doc, weekday_rows(4)))
    engine = HooksEngine(device_map="cpu")
    assert engine.load(plan).dtype == torch.bfloat16
    scores = engine.execute(plan)[plan.points[0].steps[-1].path]["answer_logits"]
    assert scores.dtype == torch.float32 and torch.isfinite(scores).all()
