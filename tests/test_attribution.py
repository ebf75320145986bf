"""Attribution patching (`estimate: {"method": "attribution"}`) against references written here:

- a plain-torch gradient per row, site and position on the model's own modules (not causalab's runtime):
  the estimate is the clean logit difference plus (counterfactual - clean) . gradient, within 1e-5;
- a finite difference in float64: patching a small fraction of the change moves the metric by that fraction
  of the estimated change;
- the files: marked as estimates, readable by `load`, `table` and `compare` as patching's are; metrics
  without a gradient refused in one line; the top points confirmed by real patching.
"""

from __future__ import annotations

import functools
import json

import pytest
import torch

from causalab_core import api, load
from causalab_core.cli import app
from causalab_testing.data import sweep_document, weekday_rows
from tests.test_intervention_reference import engine

SITES = ("block_input", "block_output", "attn_output", "mlp_output", "head")
LAYERS, POSITIONS, HEAD = (0, 1), (-4, -1), 1
ROWS = weekday_rows(10, seed=4)


def document(model_dir, site: str, **extra) -> dict:
    doc = sweep_document(str(model_dir), layers=LAYERS, positions=POSITIONS)
    for spec in (doc["reads"]["cf_resid"], doc["writes"]["patch"]):
        spec["site"] = site
        if site == "head":
            spec["head"] = HEAD
    doc["metrics"] = {"ld": {"kind": "logit_diff", "target": "cf_answer", "other": "base_answer"},
                      "lp": {"kind": "logprob", "answer": "cf_answer"}}
    return {**doc, "estimate": {"method": "attribution"}, **extra}


@functools.cache
def plain_model(model_dir, dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval().requires_grad_(False)


def site_module(model, site: str, layer: int):
    """(module, tensor) of a site in the model's own modules."""
    blocks = model.transformer.h if hasattr(model, "transformer") else model.model.layers
    block = blocks[layer]
    attn = block.attn if hasattr(block, "attn") else block.self_attn
    if site == "head":
        return (attn.c_proj if hasattr(attn, "c_proj") else attn.o_proj), "input"
    return {"block_input": (block, "input"), "block_output": (block, "output"), "attn_output": (attn, "output"),
            "mlp_output": (block.mlp, "output")}[site]


def edited(model, site: str, layer: int, edit):
    """Run with ``edit(tensor) -> tensor`` replacing the site's tensor (one head's slice for ``head``)."""
    module, tensor = site_module(model, site, layer)

    def change(hidden):
        if site != "head":
            return edit(hidden)
        dim = hidden.shape[-1] // model.config.num_attention_heads
        part = slice(HEAD * dim, (HEAD + 1) * dim)
        return torch.cat([hidden[..., :part.start], edit(hidden[..., part]), hidden[..., part.stop:]], -1)

    if tensor == "input":
        return module.register_forward_pre_hook(lambda mod, args: (change(args[0]), *args[1:]))
    return module.register_forward_hook(
        lambda mod, args, out: (change(out[0]), *out[1:]) if isinstance(out, tuple) else change(out))


def captured(model, site, layer, ids):
    found = []
    handle = edited(model, site, layer, lambda h: found.append(h.detach().clone()) or h)
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]))
    handle.remove()
    return found[0][0]


def reference(model_dir, plan, site: str) -> dict[tuple[int, int], list[float]]:
    """Per (layer, position), per row alone: clean logit difference + (cf - clean) . its gradient at the site."""
    model = plain_model(model_dir)
    token = plan.points[0].steps[-1].scoring.token_ids  # columns: cf_answer, base_answer
    out = {}
    for layer in LAYERS:
        for pos in POSITIONS:
            values = []
            for i, (ids, cf_ids) in enumerate(zip(plan.prompts["base"], plan.prompts["counterfactual"])):
                source = captured(model, site, layer, cf_ids)[pos]
                leaf = {}

                def hold(h):
                    leaf["x"] = h.detach().clone().requires_grad_(True)
                    return leaf["x"]
                handle = edited(model, site, layer, hold)
                with torch.enable_grad():
                    logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
                    ld = logits[token[i][0]] - logits[token[i][1]]
                    (grad,) = torch.autograd.grad(ld, leaf["x"])
                handle.remove()
                delta = source - leaf["x"].detach()[0, pos]
                values.append(ld.item() + (delta.double() * grad[0, pos].double()).sum().item())
            out[(layer, pos)] = values
    return out


def per_point(result, metric: str) -> dict[tuple[int, int], list[float]]:
    return {(dict(m.point.values)["layers"], dict(m.point.values)["pos"]): m.content["values"]
            for m in result.metrics if m.name == metric}


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
def test_estimates_equal_a_plain_torch_gradient(arch, site, request, write_doc):
    model_dir = request.getfixturevalue(arch)
    path = write_doc(document(model_dir, site), ROWS)
    got = per_point(api.run(path), "ld")
    expected = reference(model_dir, api.plan(path), site)
    for key, values in expected.items():
        torch.testing.assert_close(torch.tensor(got[key]), torch.tensor(values), atol=1e-5, rtol=0, msg=str(key))
    # Not a vacuous match: the estimates differ from point to point (the clean value is the same at all).
    spread = torch.tensor(list(got.values())).std(0)
    assert spread.max() > 1e-2


def test_the_estimate_is_the_derivative_of_patching(tiny_llama, write_doc):
    """Patch x +- eps (cf - x) in float64: the central difference (metric(eps) - metric(-eps)) / 2 eps is the
    estimated change. (eps 1e-2: the float64 model keeps some float32 parts, rotary tables among them, whose
    rounding a smaller eps would divide up into the slope.)"""
    path = write_doc(document(tiny_llama, "block_output"), ROWS)
    plan = api.plan(path)
    result = api.run(path)
    est = per_point(result, "ld")
    model = plain_model(tiny_llama, torch.float64)
    token = plan.points[0].steps[-1].scoring.token_ids
    eps = 1e-2
    for layer, pos in ((0, -4), (1, -1)):
        for i in range(3):
            ids, cf_ids = plan.prompts["base"][i], plan.prompts["counterfactual"][i]
            source = captured(model, "block_output", layer, cf_ids)[pos]

            def ld(scale):
                def patch(h):
                    h = h.clone()
                    h[0, pos] += scale * (source - h[0, pos])
                    return h
                handle = edited(model, "block_output", layer, patch)
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
                handle.remove()
                return (logits[token[i][0]] - logits[token[i][1]]).item()

            clean = ld(0.0)
            slope = (ld(eps) - ld(-eps)) / (2 * eps)
            assert est[(layer, pos)][i] - clean == pytest.approx(slope, rel=5e-3, abs=2e-4)


def test_metrics_read_through_one_combination_take_one_backward_each_and_estimate_the_same(tiny_llama, write_doc):
    """A logit difference alone: one backward (target - other), not three (each column and the log-sum-exp);
    with a log-probability beside it, two. The logit difference's estimate is the same either way (and the
    test above holds the two-metric document to a plain-torch gradient)."""
    both = document(tiny_llama, "block_output")
    alone = {**both, "metrics": {"ld": both["metrics"]["ld"]}}

    def combinations(doc, name):
        return {s.combinations for p in api.plan(write_doc(doc, ROWS, name=name)).points for s in p.steps if s.estimate}

    assert combinations(alone, "alone.json") == {((1.0, -1.0, 0.0),)}  # columns cf_answer, base_answer, logsumexp
    assert combinations(both, "both.json") == {((1.0, -1.0, 0.0), (1.0, 0.0, -1.0))}
    got, want = per_point(api.run(write_doc(alone, name="alone.json")), "ld"), per_point(api.run(write_doc(both)), "ld")
    for key in got:
        assert got[key] == pytest.approx(want[key], abs=1e-5)


def test_nnterp_estimates_what_hooks_estimates(tiny_llama, tiny_gpt2, write_doc):
    for model_dir in (tiny_llama, tiny_gpt2):
        for site in SITES:
            plan = api.plan(write_doc(document(model_dir, site), ROWS))
            a = engine("hooks").execute(plan, batch_size=4)
            b = engine("nnterp").execute(plan, batch_size=4)
            for path in a:
                for name in a[path]:
                    torch.testing.assert_close(a[path][name], b[path][name], atol=1e-5, rtol=0)


def test_files_say_estimate_and_the_top_points_are_patched_for_real(tiny_llama, write_doc, tmp_path):
    doc = document(tiny_llama, "block_output", estimate={"method": "attribution", "confirm": {"top": 3}})
    estimated = api.run(write_doc(doc, ROWS), out=tmp_path / "est")
    plain = {k: v for k, v in doc.items() if k != "estimate"}
    patched = {(m.point.name, m.name): m.content for m in api.run(write_doc(plain, name="plain.json")).metrics}
    confirmed = estimated.run["estimate"]["confirmed"]
    assert estimated.run["estimate"]["method"] == "attribution" and confirmed["metric"] == "ld"
    # The three points furthest from the clean mean, by the estimate, are the ones patched.
    effects = {m.point.name: abs(m.content["summary"]["mean"] - m.content["estimate"]["clean_mean"])
               for m in estimated.metrics if m.name == "ld"}
    assert sorted(confirmed["points"]) == sorted(sorted(effects, key=effects.get)[-3:])
    for m in estimated.metrics:
        assert m.content["estimate"]["method"] == "attribution"
        on_disk = json.loads((tmp_path / "est" / m.point.name / f"{m.name}.json").read_text())
        if m.point.name in confirmed["points"]:  # patching's own numbers (without position reuse), beside the estimate
            assert on_disk["patched"]["values"] == pytest.approx(patched[(m.point.name, m.name)]["values"], abs=1e-5)
        else:
            assert "patched" not in on_disk
    loaded = load(tmp_path / "est")
    summaries = loaded.summaries
    assert set(summaries["estimate"]) == {"attribution"}
    from causalab_report.page import provenance  # the report says the values are estimates

    assert any(label == "estimated" and "patched for real" in value for label, value, _ in provenance(loaded))
    assert summaries["patched_mean"].notna().sum() == 3 * 2  # two metrics at each confirmed point


def test_a_metric_without_a_gradient_is_refused_in_one_line(tiny_llama, write_doc, tmp_path):
    from typer.testing import CliRunner

    doc = document(tiny_llama, "block_output")
    doc["metrics"]["iia"] = {"kind": "iia", "choices": ["base_answer", "cf_answer"], "label": "cf_answer"}
    result = CliRunner().invoke(app, ["run", str(write_doc(doc, ROWS)), "--out", str(tmp_path / "out")])
    assert result.exit_code != 0 and not (tmp_path / "out").exists()
    line = result.output.strip()
    assert "\n" not in line and "$.metrics.iia" in line and "logit_diff" in line and "logprob" in line


def test_a_read_of_an_estimated_run_is_refused(tiny_llama, write_doc):
    from causalab_core.errors import PlanError

    doc = document(tiny_llama, "block_output")
    doc["reads"]["after"] = {"input": "base", "layer": 3, "position": -1}
    with pytest.raises(PlanError, match=r"\$\.reads\.after: .*estimates instead of running"):
        api.plan(write_doc(doc, ROWS))


@pytest.mark.parametrize("change,where", [
    (lambda doc: doc.update(writes={}, metrics={}), r"\$\.estimate: the document writes nothing"),
    (lambda doc: doc["metrics"]["ld"].update(input="counterfactual") or doc["metrics"]["lp"].update(
        input="counterfactual"), r"\$\.writes\.patch: .*no metric scores it"),
    (lambda doc: doc["estimate"].update(confirm={"top": 2, "metric": "nope"}), r"\$\.estimate\.confirm\.metric"),
])
def test_what_cannot_be_estimated_is_one_line(tiny_llama, write_doc, change, where):
    from causalab_core.errors import CausalabError

    doc = document(tiny_llama, "block_output")
    change(doc)
    with pytest.raises(CausalabError, match=where):
        api.plan(write_doc(doc, ROWS))
