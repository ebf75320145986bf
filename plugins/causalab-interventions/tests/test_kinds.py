"""The kinds' recipes, composition with a featurizer, and what a document without an intervention keeps."""

from __future__ import annotations

import json
import types

import pytest
import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from causalab_core import api, hookimpl
from causalab_core.plugins.contracts import Intervention, Recipe
from causalab_core.plugins.registry import build_registry, registry
from causalab_interventions import Add, Mean, Noise, Resample, Swap, Zero
from causalab_testing.data import sweep_document, weekday_rows

ROWS = weekday_rows(8, seed=3)


def test_recipes():
    assert Swap().recipe(Swap.Params()) == Recipe("source", "replace")
    assert Zero().recipe(Zero.Params()) == Recipe("nothing", "scale", alpha=0.0)
    assert Mean().recipe(Mean.Params()) == Recipe("mean", "replace")
    assert Resample().recipe(Resample.Params(seed=4)) == Recipe("resample", "replace", seed=4)
    assert Noise().recipe(Noise.Params(scale=2.0, seed=1)) == Recipe("noise", "add", alpha=2.0, seed=1)
    assert Add().recipe(Add.Params(alpha=3, minus="r")) == Recipe("mean", "add", alpha=3.0, minus="r")
    assert Add().recipe(Add.Params(vector="v.st")) == Recipe("tensor", "add", alpha=1.0, tensor="v.st")
    with pytest.raises(ValueError, match="exactly one"):
        Add().recipe(Add.Params())
    for cls, bad in ((Noise, {"scale": 0}), (Noise, {"scale": float("nan")}), (Resample, {"seed": -1}),
                     (Add, {"alpha": float("inf"), "minus": "r"}), (Zero, {"alpha": 1})):
        with pytest.raises(ValidationError):
            cls.Params.model_validate(bad)


def test_the_registry_lists_the_kinds():
    assert registry().names("intervention") == ["add", "mean", "noise", "resample", "swap", "zero"]


def plan_of(write_doc, tiny_llama, intervention=None, featurizer=None, source=True):
    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    write = doc["writes"]["patch"]
    if intervention is not None:
        write["intervention"] = intervention
    if not source:
        del write["source"]
    if featurizer is not None:
        doc["featurizers"] = {"f": featurizer}
        write["featurizer"] = "f"
    return api.plan(write_doc(doc, ROWS))


def test_a_document_without_an_intervention_plans_as_before(write_doc, tiny_llama):
    """No `intervention` key in the plan's dict nor in its copy of the document: the plan digest, the output
    files and `causalab plan --json` are what they were before interventions existed."""
    plan = plan_of(write_doc, tiny_llama)
    assert '"intervention"' not in json.dumps(plan.to_dict(), default=str)
    assert plan.interventions() == []


def test_an_explicit_swap_gives_the_bytes_of_no_intervention(write_doc, tiny_llama):
    engine = registry().get("engine", "hooks")()
    implicit = engine.execute(plan_of(write_doc, tiny_llama))
    explicit = engine.execute(plan_of(write_doc, tiny_llama, {"kind": "swap"}))
    assert implicit.keys() == explicit.keys()
    assert all(torch.equal(implicit[p][n], explicit[p][n]) for p in implicit for n in implicit[p])


def last_token_outputs(model_dir, prompts, layer, edit):
    """Plain forwards, row by row, block ``layer``'s output edited at the last token by ``edit(vector, row)``."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval().requires_grad_(False)
    out = []
    for row, ids in enumerate(prompts):
        def hook(mod, args, output, row=row):
            hidden = (output[0] if isinstance(output, tuple) else output).clone()
            edit(hidden[0, -1], row)
            return (hidden, *output[1:]) if isinstance(output, tuple) else hidden
        handle = model.model.layers[layer].register_forward_hook(hook)
        with torch.no_grad():
            out.append(model(input_ids=torch.tensor([ids])).logits[0, -1])
        handle.remove()
    return torch.stack(out)


@pytest.mark.parametrize("kind", ["zero", "noise"])
def test_through_a_featurizer_only_its_features_change(kind, write_doc, tiny_llama):
    """Zero (or noise) in a subspace, the rest kept: the identity featurizer's coordinates 0, 1 and 5."""
    features = [0, 1, 5]
    intervention = {"kind": "zero"} if kind == "zero" else {"kind": "noise", "scale": 2.0, "seed": 3}
    plan = plan_of(write_doc, tiny_llama, intervention, {"kind": "identity", "features": features}, source=False)
    classes = api.featurizer_classes(plan, registry())
    got = registry().get("engine", "hooks")().execute(plan, featurizers=classes, batch_size=3)
    got = got[plan.points[0].steps[-1].path]

    def edit(vector, row):
        if kind == "zero":
            vector[features] = 0
        else:  # noise of the features' shape, [1 position, 3 features], from (seed * 0x9E3779B1 + row) mod 2**32
            vector[features] += 2.0 * torch.randn(
                (1, 3), generator=torch.Generator().manual_seed((3 * 0x9E3779B1 + row) % 2**32))[0]

    expected = last_token_outputs(tiny_llama, plan.prompts["base"], 1, edit)
    token_ids = torch.tensor(plan.points[0].steps[-1].scoring.token_ids)
    torch.testing.assert_close(got["answer_logits"], expected.gather(1, token_ids), atol=1e-5, rtol=0)


def test_noise_and_resample_do_not_follow_the_batching(write_doc, tiny_llama):
    engine = registry().get("engine", "hooks")()
    for intervention, source in (({"kind": "noise", "scale": 1.0, "seed": 9}, False),
                                 ({"kind": "resample", "seed": 9}, True)):
        plan = plan_of(write_doc, tiny_llama, intervention, source=source)
        whole, cut = engine.execute(plan), engine.execute(plan, batch_size=3)
        for path in whole:
            for name in whole[path]:
                torch.testing.assert_close(whole[path][name], cut[path][name], atol=1e-5, rtol=0)


def test_resample_draws_another_row_from_its_seed(write_doc, tiny_llama):
    rows = [plan_of(write_doc, tiny_llama, {"kind": "resample", "seed": s}).interventions()[0].rows for s in (1, 1, 2)]
    assert rows[0] == rows[1] != rows[2]
    assert all(j != i for i, j in enumerate(rows[0])) and len(set(rows[0])) > 1


def test_a_swept_alpha_steers_by_that_much(write_doc, tiny_llama, tmp_path):
    """`alpha` from a sweep axis: at 0 the run is the clean one; the difference of means moves the logits
    linearly in alpha at the site (so the logit change at 2 is not the one at 1)."""
    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    doc["reads"]["cf_first"] = {"input": "counterfactual", "layer": 1, "position": 0}
    doc["writes"]["patch"]["intervention"] = {"kind": "add", "alpha": {"sweep": "alpha"}, "minus": "cf_first"}
    doc["sweep"]["alpha"] = [0.0, 1.0, 2.0]
    doc["metrics"] = {"p": {"kind": "p_answer", "answer": "cf_answer"}}
    plan = api.plan(write_doc(doc, ROWS))
    assert [w.intervention.alpha for p in plan.points for s in p.steps for w in s.writes] == [0.0, 1.0, 2.0]
    got = registry().get("engine", "hooks")().execute(plan)
    logits = [got[p.steps[-1].path]["answer_logits"] for p in plan.points]
    clean = last_token_outputs(tiny_llama, plan.prompts["base"], 1, lambda vector, row: None)
    token_ids = torch.tensor(plan.points[0].steps[-1].scoring.token_ids)
    torch.testing.assert_close(logits[0], clean.gather(1, token_ids), atol=1e-5, rtol=0)
    assert not torch.allclose(logits[1], logits[0]) and not torch.allclose(logits[2], logits[1])


class BlendParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    alpha: float


class Blend(Intervention):
    """A third party's kind, from the contract alone: part of the way from the site's value to the mean."""

    name = "blend"
    Params = BlendParams

    def recipe(self, params):
        return Recipe("mean", "interpolate", alpha=params.alpha)


def test_a_third_party_kind_runs_from_its_recipe_alone(write_doc, tiny_llama):
    """`interpolate`, which no shipped kind uses, through a kind registered beside the installed plugins:
    (1 - alpha) x + alpha mean, against a plain forward; `causalab plugins`' registry lists it."""
    module = types.ModuleType("causalab_blend")
    module.DISTRIBUTION = "causalab-blend"
    module.causalab_interventions = hookimpl(lambda: [Blend])
    reg = build_registry(extra=(module,))
    assert "blend" in reg.names("intervention")
    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    doc["writes"]["patch"]["intervention"] = {"kind": "blend", "alpha": 0.25}
    plan = api.plan(write_doc(doc, ROWS), registry=reg)
    got = registry().get("engine", "hooks")().execute(plan)[plan.points[0].steps[-1].path]["answer_logits"]
    read = last_token_reads(tiny_llama, plan.prompts["counterfactual"], 1)
    mean = read.mean(0)

    def edit(vector, row):
        vector[:] = 0.75 * vector + 0.25 * mean

    expected = last_token_outputs(tiny_llama, plan.prompts["base"], 1, edit)
    token_ids = torch.tensor(plan.points[0].steps[-1].scoring.token_ids)
    torch.testing.assert_close(got, expected.gather(1, token_ids), atol=1e-5, rtol=0)


def last_token_reads(model_dir, prompts, layer):
    """Block ``layer``'s output at each row's last token, from plain forwards."""
    found = []

    def edit(vector, row):
        found.append(vector.clone())

    last_token_outputs(model_dir, prompts, layer, edit)
    return torch.stack(found)


def test_run_json_names_the_distribution_behind_each_kind_used(write_doc, tiny_llama, tmp_path):
    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    doc["writes"]["patch"]["intervention"] = {"kind": "zero"}
    del doc["writes"]["patch"]["source"]
    api.run(write_doc(doc, ROWS), out=tmp_path / "o")
    components = json.loads((tmp_path / "o" / "run.json").read_text())["components"]
    provider = registry().provider("intervention", "zero")
    assert components["intervention"] == {"zero": f"{provider.distribution} {provider.version}"}
    assert provider.distribution == "causalab-interventions"


def test_each_noise_seed_draws_its_own_noise_and_seed_zero_draws_from_the_row():
    """torch keeps a generator seed's low 32 bits: the seed is mixed in below them, so seeds 0, 1 and 2**31 - 1
    draw three different noises for one row, and seed 0 draws what a generator seeded by the row's index does."""
    from causalab_core.runtime.interventions import noise

    draws = [noise(seed, [5, 6], (2, 4)) for seed in (0, 1, 2**31 - 1)]
    assert all(not torch.equal(a, b) for i, a in enumerate(draws) for b in draws[i + 1:])
    assert torch.equal(draws[0][1], torch.randn((2, 4), generator=torch.Generator().manual_seed(6)))
    assert torch.equal(noise(1, [6], (2, 4))[0], draws[1][1])  # a row's draw does not depend on its batch


def test_resample_draws_each_row_on_its_own_with_repeats_never_itself():
    """As Resample's docstring says: not a permutation; each row draws another row of its window's width."""
    from causalab_core.compiler.interventions import drawn_rows

    windows = ((1,),) * 40 + ((1, 2),) * 3
    drawn = drawn_rows(windows, windows, 0, "$.writes.w", lambda i: f"row {i}")
    assert all(j != i for i, j in enumerate(drawn))
    assert all(len(windows[j]) == len(windows[i]) for i, j in enumerate(drawn))
    assert len(set(drawn[:40])) < 40  # repeats: some row drawn twice, some never
    assert drawn == drawn_rows(windows, windows, 0, "$.writes.w", lambda i: f"row {i}")


def test_std_of_is_the_sample_standard_deviation_of_every_value_the_read_holds():
    """documents/README.md: n - 1 in the denominator, over every position of every resolved row, every dimension."""
    import statistics

    from causalab_core.runtime.interventions import std_of

    rows = [torch.tensor([[1.0, 2.0], [3.0, 5.0]]), torch.zeros(0, 2), torch.tensor([[8.0, 13.0]])]
    values = [1.0, 2.0, 3.0, 5.0, 8.0, 13.0]
    assert std_of({"emb": rows}, "emb", "w") == pytest.approx(statistics.stdev(values), rel=1e-12)
    assert std_of({"emb": rows}, "emb", "w") != pytest.approx(statistics.pstdev(values), rel=1e-3)
