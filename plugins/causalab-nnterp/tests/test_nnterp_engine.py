"""The nnterp engine: bit-identical to hooks, through a session and through nnsight's serialized path."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from causalab_core import api
from causalab_core.plugins.registry import registry
from causalab_testing.conformance import EngineConformance
from causalab_testing.data import sweep_document, weekday_rows
from causalab_nnterp.engine import NnterpEngine


class TestConformance(EngineConformance):
    tolerance = 0.0  # bit-identical to the hooks engine at float32, padded batches included

    @pytest.fixture(scope="class")
    def engine(self):
        return NnterpEngine()


@pytest.fixture
def small_plan(write_doc, tiny_llama):
    return api.plan(write_doc(sweep_document(str(tiny_llama), layers=[0], positions=[-1]), weekday_rows(4)))


def test_a_plan_carrying_something_unpicklable_fails_on_the_serialized_path(small_plan):
    bad = dataclasses.replace(small_plan, document={"lock": threading.Lock()})
    with pytest.raises(TypeError, match="pickle"):
        NnterpEngine().execute(bad, remote="local")


@pytest.mark.parametrize("site", ["block_input", "attn_output", "mlp_output"])
def test_every_site_matches_the_hooks_engine(site, write_doc, tiny_gpt2):
    from causalab_hooks.engine import HooksEngine

    doc = sweep_document(str(tiny_gpt2), layers=[1, 3], positions=[-4])
    for spec in (*doc["reads"].values(), *doc["writes"].values()):
        spec["site"] = site
    plan = api.plan(write_doc(doc, weekday_rows(6)))
    classes = api.featurizer_classes(plan, registry())
    EngineConformance().assert_same(NnterpEngine().execute(plan, featurizers=classes),
                                    HooksEngine().execute(plan, featurizers=classes))


def test_head_writes_match_the_hooks_engine(write_doc, tiny_llama):
    from causalab_hooks.engine import HooksEngine

    doc = sweep_document(str(tiny_llama), layers=[2], positions=[-4])
    doc.pop("sweep")
    doc["reads"] = {"h1": {"input": "counterfactual", "layer": 2, "site": "head", "head": 1, "position": -4}}
    doc["writes"] = {"w1": {"input": "base", "source": "h1", "layer": 2, "site": "head", "head": 1, "position": -4}}
    plan = api.plan(write_doc(doc, weekday_rows(6)))
    classes = api.featurizer_classes(plan, registry())
    EngineConformance().assert_same(NnterpEngine().execute(plan, featurizers=classes),
                                    HooksEngine().execute(plan, featurizers=classes))


def test_a_loaded_das_rotation_applies_as_on_the_hooks_engine(write_doc, tiny_llama, tmp_path):
    import torch
    from safetensors.torch import save_file

    from causalab_core.compiler.featurizers import identity
    from causalab_core.ir import FeaturizerRef
    from causalab_hooks.engine import HooksEngine

    doc = sweep_document(str(tiny_llama), layers=[2], positions=[-1])
    doc.pop("sweep")
    for spec in (*doc["reads"].values(), *doc["writes"].values()):
        spec["layer"], spec["position"] = 2, -1
    probe = api.plan(write_doc(doc, weekday_rows(6), name="probe.json"))
    site = probe.points[0].steps[-1].writes[0].site
    torch.manual_seed(0)
    path = tmp_path / "q.safetensors"
    save_file({"rotation": torch.linalg.qr(torch.randn(32, 32))[0].contiguous()}, path,
              metadata=identity(probe.model, site, -1, FeaturizerRef("das", "das", {"rank": 4})))
    doc["featurizers"] = {"das": {"kind": "das", "rank": 4, "load": str(path)}}
    doc["writes"]["patch"]["featurizer"] = "das"
    plan = api.plan(write_doc(doc, weekday_rows(6)))
    classes = api.featurizer_classes(plan, registry())
    EngineConformance().assert_same(NnterpEngine().execute(plan, featurizers=classes),
                                    HooksEngine().execute(plan, featurizers=classes))
