"""A bad intervention is one line naming where it is wrong, before any weights load (``causalab plan`` loads
none), with the exit code of its kind: 2 for the document, 1 for what the model or the rows make wrong."""

from __future__ import annotations

import copy

import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from causalab_core import api
from causalab_core.cli import app
from causalab_core.errors import EngineError
from causalab_core.plugins.registry import registry
from causalab_testing.data import sweep_document, weekday_rows


@pytest.fixture
def base_doc(tiny_llama):
    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    doc["reads"]["cf_first"] = {"input": "counterfactual", "layer": 1, "position": 0}
    return doc


def intervened(intervention, source=True, **read):
    def edit(doc):
        doc["writes"]["patch"]["intervention"] = intervention
        if not source:
            del doc["writes"]["patch"]["source"]
        doc["reads"]["cf_first"].update(read)
    return edit


CASES = [
    ("unknown kind", intervened({"kind": "ablate"}), 2, ["$.writes.patch.intervention.kind", "'ablate'", "zero"]),
    ("bad parameter", intervened({"kind": "noise", "scale": -1}, source=False), 2,
     ["$.writes.patch.intervention.scale", "greater than 0"]),
    ("unknown parameter", intervened({"kind": "zero", "alpha": 2}, source=False), 2,
     ["$.writes.patch.intervention.alpha: unknown key"]),
    ("swept bad parameter", lambda d: (intervened({"kind": "add", "alpha": {"sweep": "a"}, "minus": "cf_first"})(d),
                                       d["sweep"].__setitem__("a", [1.0, "x"])), 2,
     ["$.sweep.a[1]", "$.writes.patch.intervention.alpha"]),
    ("a source zero does not read", intervened({"kind": "zero"}), 2, ["$.writes.patch.source", "reads no source"]),
    ("a mean without a source", intervened({"kind": "mean"}, source=False), 2,
     ["$.writes.patch.source", "takes its value from a read"]),
    ("a swap without a source", lambda d: d["writes"]["patch"].pop("source"), 2,
     ["$.writes.patch.source", "a write without an intervention"]),
    ("both vector and minus", intervened({"kind": "add", "vector": "v.safetensors", "minus": "cf_first"}), 2,
     ["$.writes.patch.intervention: give exactly one"]),
    ("an unknown minus read", intervened({"kind": "add", "minus": "nothing"}), 2,
     ["$.writes.patch.intervention.minus: no read named 'nothing'"]),
    ("a minus read of the written input", intervened({"kind": "add", "minus": "cf_first"}, input="base"), 2,
     ["$.writes.patch.intervention.minus: read 'cf_first' is taken from 'base', the input this write changes"]),
    ("a vector file that is not there", intervened({"kind": "add", "vector": "absent.safetensors"}, source=False),
     2, ["doc.json: $.writes.patch.intervention.vector", "absent.safetensors", "cannot be read"]),
    ("a vector file that is not safetensors", intervened({"kind": "add", "vector": "rows.jsonl"}, source=False),
     2, ["doc.json: $.writes.patch.intervention.vector", "rows.jsonl", "is not a safetensors file"]),
    ("a vector file of two tensors", intervened({"kind": "add", "vector": "two.safetensors"}, source=False),
     2, ["doc.json: $.writes.patch.intervention.vector", "two.safetensors", "holds 2 tensors"]),
    ("a vector holding a NaN", intervened({"kind": "add", "vector": "nan.safetensors"}, source=False),
     2, ["doc.json: $.writes.patch.intervention.vector", "nan.safetensors", "holds nan at index 3", "finite"]),
    ("a vector holding an infinity", intervened({"kind": "add", "vector": "inf.safetensors"}, source=False),
     2, ["doc.json: $.writes.patch.intervention.vector", "inf.safetensors", "holds -inf at index 31"]),
    ("a zero steering vector", intervened({"kind": "add", "vector": "zero.safetensors", "alpha": 4}, source=False),
     1, ["doc.json: $.writes.patch.intervention", "zero.safetensors is zero: adding it changes nothing"]),
    ("an alpha given as a string", intervened({"kind": "add", "vector": "v.safetensors", "alpha": "0.5"},
                                              source=False),
     2, ["doc.json: $.writes.patch.intervention.alpha", "Input should be a valid number"]),
    ("a vector of the wrong width", intervened({"kind": "add", "vector": "wide.safetensors"}, source=False), 1,
     ["$.writes.patch.intervention.vector", "shape [33]", "must be [32]"]),
    ("a mean over no eligible rows", lambda d: (d["reads"]["cf_resid"].update(position=40),  # past every prompt
                                                intervened({"kind": "mean"})(d)), 1,
     ["$.writes.patch.intervention", "a mean over no eligible rows", "'cf_resid'"]),
]


@pytest.mark.parametrize("edit,code,needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_intervention_is_one_line_before_weights_load(edit, code, needles, base_doc, write_doc, tmp_path):
    doc = copy.deepcopy(base_doc)
    edit(doc)
    save_file({"v": torch.zeros(33)}, tmp_path / "wide.safetensors")
    save_file({"v": torch.ones(32)}, tmp_path / "v.safetensors")
    save_file({"v": torch.zeros(32)}, tmp_path / "zero.safetensors")
    save_file({"v": torch.ones(32), "w": torch.ones(32)}, tmp_path / "two.safetensors")
    save_file({"v": torch.ones(32).index_fill(0, torch.tensor([3, 9]), float("nan"))}, tmp_path / "nan.safetensors")
    save_file({"v": torch.ones(32).index_fill(0, torch.tensor([31]), float("-inf"))}, tmp_path / "inf.safetensors")
    result = CliRunner().invoke(app, ["plan", str(write_doc(doc, weekday_rows(6)))])
    assert result.exit_code == code, result.output
    message = result.stderr.strip()
    assert "\n" not in message and "Traceback" not in message
    for needle in needles:
        assert needle in message, message


def test_position_reuse_is_refused_for_a_kind_that_reads_other_rows(base_doc, write_doc):
    """A mean needs every row's reads at once: the planner keeps the plain path, and asking for the mode is
    refused before any work."""
    doc = copy.deepcopy(base_doc)
    intervened({"kind": "mean"})(doc)
    plan = api.plan(write_doc(doc, weekday_rows(6)))
    assert not plan.position_reuse and "reads other rows" in plan.position_reuse_why
    hooks = registry().get("engine", "hooks")
    with pytest.raises(EngineError, match="positions=true: write 'patch' \\(mean\\) reads other rows"):
        hooks(options=hooks.Options(positions=True)).execute(plan)
