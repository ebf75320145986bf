"""The example featurizer: a hand computation, the conformance suite, training end to end on a tiny model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from causalab_core import api
from causalab_testing.conformance import FeaturizerConformance
from causalab_testing.data import sweep_document, weekday_rows

pytest_plugins = ["causalab_testing.fixtures"]

sys.path.insert(0, str(Path(__file__).parent))
from test_project_out import example, plugins  # noqa: E402,F401  (the module, installed or from src/; its registry)

Direction = example.Direction


def test_a_swap_exchanges_the_component_along_the_direction_and_keeps_the_rest():
    """By hand: u = (1, 0); base (3, 4), source (-1, 7) -> (-1, 4)."""
    direction = Direction(Direction.Params(), 2)
    direction.load_state({"direction": torch.tensor([1.0, 0.0])})
    f, _ = direction.featurize(torch.tensor([[-1.0, 7.0]]))
    _, err = direction.featurize(torch.tensor([[3.0, 4.0]]))
    assert direction.inverse(f, err).tolist() == [[-1.0, 4.0]]


class TestConformance(FeaturizerConformance):
    """inverse(featurize(x)) == x, a swap with itself changes nothing, instances follow their parameters alone,
    its one feature is a fixed unit, and a trained state loads back into a fresh instance."""

    @pytest.fixture
    def featurizer(self):
        return Direction(Direction.Params(seed=3), 8)


def test_a_document_trains_the_direction_and_loads_it_back(plugins, write_doc, tiny_llama, tmp_path):  # noqa: F811
    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-4])
    del doc["sweep"]
    for spec in (*doc["reads"].values(), *doc["writes"].values()):
        spec["layer"], spec["position"] = 1, -4
    doc["featurizers"] = {"u": {"kind": "example_direction", "train": {
        "data": {"path": "rows.jsonl"}, "label": "cf_answer", "epochs": 2, "batch_size": 8, "lr": 0.05, "seed": 0}}}
    doc["writes"]["patch"]["featurizer"] = "u"
    api.run(write_doc(doc, weekday_rows(24)), out=tmp_path / "o", registry=plugins)
    from safetensors import safe_open

    with safe_open(tmp_path / "o" / "u.safetensors", "pt") as f:
        trained = f.get_tensor("direction")
        assert f.metadata()["kind"] == "example_direction"
    assert torch.linalg.norm(trained).item() == pytest.approx(1.0, abs=1e-5)
    assert not torch.allclose(trained, Direction(Direction.Params(), 32).unit().detach())  # training moved it
    doc["featurizers"]["u"] = {"kind": "example_direction", "load": str(tmp_path / "o" / "u.safetensors")}
    api.run(write_doc(doc, name="again.json"), out=tmp_path / "again", registry=plugins)
    assert json.loads((tmp_path / "o" / "iia.json").read_text())["values"] == \
        json.loads((tmp_path / "again" / "iia.json").read_text())["values"]
