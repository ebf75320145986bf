"""DAS: the contract, an independent check against pyvene, training, saved identity."""

from __future__ import annotations

import json

import pytest
import torch

from causalab_core import api
from causalab_core.errors import PlanError
from causalab_core.plugins.registry import registry
from causalab_testing.conformance import FeaturizerConformance
from causalab_testing.data import sweep_document, weekday_rows
from causalab_featurizers.das import DAS


class TestConformance(FeaturizerConformance):
    @pytest.fixture
    def featurizer(self):
        # With a seed: without one, an untrained DAS draws its rotation from torch's global random state,
        # and two instances with the same parameters differ (the suite's two-instances check fails).
        return DAS(DAS.Params(rank=3, seed=0), width=8)


def test_the_rotation_stays_orthogonal_and_round_trips_through_its_state():
    torch.manual_seed(1)
    das = DAS(DAS.Params(rank=2), width=16)
    q = das.rotation
    torch.testing.assert_close(q @ q.T, torch.eye(16), atol=1e-5, rtol=0)
    other = DAS(DAS.Params(rank=2), width=16)
    other.load_state(das.state())
    torch.testing.assert_close(other.rotation, q, atol=1e-6, rtol=0)


def das_document(model_key: str, rank: int, **featurizer) -> dict:
    doc = sweep_document(model_key, layers=[1], positions=[-4])
    doc.pop("sweep")
    doc["featurizers"] = {"das": {"kind": "das", "rank": rank, **featurizer}}
    for spec in (*doc["reads"].values(), *doc["writes"].values()):
        spec["layer"], spec["position"] = 1, -4
    doc["writes"]["patch"]["featurizer"] = "das"
    return doc


def saved_rotation(tmp_path, write_doc, model_key, rank=3):
    torch.manual_seed(7)
    q = torch.linalg.qr(torch.randn(32, 32))[0]
    path = tmp_path / "q.safetensors"
    from safetensors.torch import save_file

    from causalab_core.compiler.featurizers import identity
    from causalab_core.ir import FeaturizerRef

    plan = api.plan(write_doc(sweep_document(model_key, layers=[1], positions=[-4]), weekday_rows(4), name="probe.json"))
    site = plan.points[0].steps[-1].writes[0].site
    meta = identity(plan.model, site, -4, FeaturizerRef("das", "das", {"rank": rank}))
    save_file({"rotation": q.contiguous()}, path, metadata=meta)
    return q, path


def test_das_application_matches_pyvenes_rotated_space_intervention(tmp_path, write_doc, tiny_llama):
    pv = pytest.importorskip("pyvene")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from causalab_hooks.engine import HooksEngine

    q, path = saved_rotation(tmp_path, write_doc, str(tiny_llama))
    rows = weekday_rows(10, seed=5)
    plan = api.plan(write_doc(das_document(str(tiny_llama), 3, load=str(path)), rows))
    classes = api.featurizer_classes(plan, registry())
    got = HooksEngine().execute(plan, featurizers=classes)[plan.points[0].steps[-1].path]["answer_logits"]

    model = AutoModelForCausalLM.from_pretrained(tiny_llama).eval()
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    config = pv.IntervenableConfig([{"layer": 1, "component": "block_output",
                                     "intervention_type": pv.RotatedSpaceIntervention}])
    intervenable = pv.IntervenableModel(config, model)
    intervention = next(iter(intervenable.interventions.values()))
    intervention = intervention[0] if isinstance(intervention, tuple) else intervention
    intervention.rotate_layer.weight = q
    intervention.set_interchange_dim(3)
    base = tok([r["base"] for r in rows], return_tensors="pt")
    source = tok([r["counterfactual"] for r in rows], return_tensors="pt")
    where = [[[base.input_ids.shape[1] - 4]] * len(rows)]
    with torch.no_grad():
        _, out = intervenable(base, [source], {"sources->base": (where, where)})
    ids = torch.tensor(plan.points[0].steps[-1].scoring.token_ids)
    torch.testing.assert_close(got, out.logits[:, -1].float().gather(1, ids), atol=1e-5, rtol=0)


def test_training_is_seeded_and_the_file_carries_its_identity(tmp_path, write_doc, tiny_llama):
    from safetensors import safe_open

    train = {"data": {"path": "rows.jsonl"}, "label": "cf_answer", "epochs": 2, "batch_size": 8, "lr": 0.05, "seed": 3}
    path = write_doc(das_document(str(tiny_llama), 2, train=train), weekday_rows(24))
    api.run(path, out=tmp_path / "a")
    api.run(path, out=tmp_path / "b")
    with safe_open(tmp_path / "a" / "das.safetensors", framework="pt") as f:
        meta = f.metadata()
        rotation = f.get_tensor("rotation")
    with safe_open(tmp_path / "b" / "das.safetensors", framework="pt") as f:
        assert f.metadata() == meta and torch.equal(f.get_tensor("rotation"), rotation)
    assert {k: meta[k] for k in ("kind", "site", "layer", "position", "rank", "model_key")} == {
        "kind": "das", "site": "block_output", "layer": "1", "position": "-4", "rank": "2", "model_key": str(tiny_llama)}
    assert len(meta["train_data"]) == 64 and len(meta["causalab"]) == 64
    assert not torch.allclose(rotation, torch.eye(32))

    # Reloaded by path, the trained rotation gives the same scores without training again.
    again = write_doc(das_document(str(tiny_llama), 2, load=str(tmp_path / "a" / "das.safetensors")), name="load.json")
    api.run(again, out=tmp_path / "c")
    assert (tmp_path / "a" / "iia.json").read_bytes() == (tmp_path / "c" / "iia.json").read_bytes()


@pytest.mark.parametrize("change,field", [({"layer": 2}, "layer"), ({"site": "block_input"}, "site")])
def test_a_file_trained_elsewhere_is_refused_naming_the_field(change, field, tmp_path, write_doc, tiny_llama):
    _, path = saved_rotation(tmp_path, write_doc, str(tiny_llama))
    doc = das_document(str(tiny_llama), 3, load=str(path))
    for spec in (*doc["reads"].values(), *doc["writes"].values()):
        spec.update(change)
    with pytest.raises(PlanError, match=f"was trained with {field} = "):
        api.plan(write_doc(doc, weekday_rows(4)))


def test_a_rank_mismatch_is_refused(tmp_path, write_doc, tiny_llama):
    _, path = saved_rotation(tmp_path, write_doc, str(tiny_llama), rank=3)
    with pytest.raises(PlanError, match="was trained with rank = '3', this document has '4'"):
        api.plan(write_doc(das_document(str(tiny_llama), 4, load=str(path)), weekday_rows(4)))


def test_hooks_and_nnterp_train_the_same_rotation(tmp_path, write_doc, tiny_llama):
    from safetensors.torch import load_file

    train = {"data": {"path": "rows.jsonl"}, "label": "cf_answer", "epochs": 2, "batch_size": 8, "lr": 0.05, "seed": 3}
    path = write_doc(das_document(str(tiny_llama), 2, train=train), weekday_rows(24))
    api.run(path, out=tmp_path / "hooks", engine="hooks")
    api.run(path, out=tmp_path / "nnterp", engine="nnterp")
    hooks = load_file(tmp_path / "hooks" / "das.safetensors")["rotation"]
    nnterp = load_file(tmp_path / "nnterp" / "das.safetensors")["rotation"]
    # Forward passes agree to ~1e-8; six Adam steps carry that to ~1e-4 in the rotation.
    torch.testing.assert_close(nnterp, hooks, atol=1e-3, rtol=0)
    assert (tmp_path / "hooks" / "iia.json").read_bytes() == (tmp_path / "nnterp" / "iia.json").read_bytes()


def test_an_untrained_unseeded_rotation_is_the_same_in_every_run_and_engine(tmp_path, write_doc, tiny_llama):
    """DAS with no seed, no file and no training draws from torch's global generator; the runtime builds
    such a featurizer from a fixed seed, so its numbers never depend on what ran before in the process."""
    path = write_doc(das_document(str(tiny_llama), 2), weekday_rows(12))
    torch.manual_seed(123)  # whatever the process's generator holds
    api.run(path, out=tmp_path / "a", engine="hooks")
    torch.manual_seed(456)
    api.run(path, out=tmp_path / "b", engine="hooks")
    api.run(path, out=tmp_path / "c", engine="nnterp")
    first = (tmp_path / "a" / "logit_diff.json").read_bytes()
    assert (tmp_path / "b" / "logit_diff.json").read_bytes() == first == (tmp_path / "c" / "logit_diff.json").read_bytes()


def test_an_engine_without_training_refuses_before_loading_weights(tmp_path, write_doc, tiny_llama):
    from causalab_core import hookimpl
    from causalab_core.plugins.contracts import Engine
    from causalab_core.errors import EngineError
    from causalab_core.plugins.registry import build_registry

    class Loader(Engine):
        name = "inference-only"

        def execute(self, plan, **options):
            raise AssertionError("must be refused before running")

    class Plugin:
        __name__ = "inference-only-plugin"

        @staticmethod
        @hookimpl
        def causalab_engines():
            return [Loader]

    train = {"data": {"path": "rows.jsonl"}, "label": "cf_answer"}
    path = write_doc(das_document(str(tiny_llama), 2, train=train), weekday_rows(8))
    with pytest.raises(EngineError, match="engine 'inference-only' cannot run this document: it needs training"):
        api.run(path, engine="inference-only", registry=build_registry(extra=(Plugin,)))
    assert json.loads(path.read_text())["featurizers"]["das"]["rank"] == 2


def test_a_loaded_rotation_travels_in_the_plan_never_as_a_client_path(tmp_path, write_doc, tiny_llama):
    """The compiler reads the file once; the plan carries its bytes. A decoy at the path, or no file at all
    by the time the engine runs, changes nothing; run.json records the digest of what was used."""
    import hashlib

    from safetensors import safe_open
    from safetensors.torch import save_file

    from causalab_hooks.engine import HooksEngine

    _, path = saved_rotation(tmp_path, write_doc, str(tiny_llama))
    original = path.read_bytes()
    doc = write_doc(das_document(str(tiny_llama), 3, load=str(path)), weekday_rows(10, seed=5))
    plan = api.plan(doc)
    classes = api.featurizer_classes(plan, registry())
    trained = HooksEngine().execute(plan, featurizers=classes)
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    save_file({"rotation": torch.eye(32)}, path, metadata=meta)  # a decoy with the same identity
    assert torch.equal(HooksEngine().execute(plan, featurizers=classes)[plan.points[0].steps[-1].path]["answer_logits"],
                       trained[plan.points[0].steps[-1].path]["answer_logits"])
    path.unlink()
    assert HooksEngine().execute(plan, featurizers=classes).keys() == trained.keys()

    path.write_bytes(original)
    record = api.run(doc, out=tmp_path / "o").run
    assert record["loaded_featurizers"] == {"das": hashlib.sha256(original).hexdigest()}
    assert record["components"]["featurizer"] == {"das": f"causalab-featurizers {record['causalab']['distributions']['causalab-featurizers']['version']}"}


def test_tampered_state_in_a_plan_is_refused_where_it_is_used(tmp_path, write_doc, tiny_llama):
    import dataclasses

    from causalab_core.errors import EngineError
    from causalab_core.runtime import featurizer_for

    _, path = saved_rotation(tmp_path, write_doc, str(tiny_llama))
    plan = api.plan(write_doc(das_document(str(tiny_llama), 3, load=str(path)), weekday_rows(4)))
    write = plan.points[0].steps[-1].writes[0]
    tampered = dataclasses.replace(write, featurizer=dataclasses.replace(write.featurizer, state=write.featurizer.state[:-1] + b" "))
    with pytest.raises(EngineError, match="does not match the digest"):
        featurizer_for(tampered, api.featurizer_classes(plan, registry()))


def test_the_dormant_split_needs_the_span_training_measures_and_keeps_it_in_its_state():
    """`part` (the dormant-pathway check; tests/test_das_dormant.py holds it to plain torch on a real model):
    training sees the activations with gradients on and swaps the whole subspace; scored, only the part."""
    torch.manual_seed(0)
    acts = torch.randn(64, 3) @ torch.randn(3, 8)  # activations that vary in 3 of 8 directions
    untrained = DAS(DAS.Params(rank=2, part="varying", seed=1), width=8)
    with torch.no_grad(), pytest.raises(ValueError, match="`part` needs a trained DAS"):
        untrained.inverse(*untrained.featurize(acts[:2]))
    trained = DAS(DAS.Params(rank=2, part="still", seed=1), width=8)
    with torch.enable_grad():
        whole = trained.inverse(trained.featurize(acts[:4])[0], trained.featurize(acts[4:8])[1])
        for start in range(0, 64, 16):
            trained.featurize(acts[start:start + 16])
    q = trained.rotation.detach()[:, :2]
    torch.testing.assert_close(whole, acts[4:8] + (acts[:4] - acts[4:8]) @ q @ q.T, atol=1e-5, rtol=0)
    state = trained.state()
    assert state["variation"].shape == (8, 3)  # 99% of the variance lies in the 3 directions
    loaded = DAS(DAS.Params(rank=2, part="still"), width=8)
    loaded.load_state(state)
    with torch.no_grad():
        base, source = acts[:4], acts[4:8]
        out = loaded.inverse(loaded.featurize(source)[0], loaded.featurize(base)[1])
        patch = (source - base) @ q @ q.T
        span = state["variation"]
        torch.testing.assert_close(out, base + patch - patch @ span @ span.T, atol=1e-5, rtol=0)
        torch.testing.assert_close(loaded.inverse(*loaded.featurize(base)), base, atol=1e-5, rtol=0)
