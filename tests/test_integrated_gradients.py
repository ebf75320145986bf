"""Integrated gradients (`estimate: {"method": "attribution", "steps": N}`) against references written here:

- a plain-torch path integral per row on the model's own modules: at each layer, the swept positions' values
  moved together from the clean run's toward the counterfactual's in N steps (k / N, k = 0..N-1), the
  gradient at the site averaged; the estimate is the clean logit difference plus (counterfactual - clean) .
  that mean, within 1e-5;
- the patched effect itself: a single write's estimate tends to it as N grows (the path integral of the
  gradient is the change), on the hooks and nnterp engines, which agree bit for bit (the NDIF server's is in
  plugins/causalab-ndif/tests/test_ndif_attribution.py);
- what cannot be estimated this way, refused in one line before any weights load.
"""

from __future__ import annotations

import pytest
import torch

from causalab_core import api, load
from causalab_core.errors import DocumentError, PlanError
from tests.test_attribution import HEAD, LAYERS, POSITIONS, ROWS, captured, document, edited, per_point, plain_model

STEPS = 4


def reference(model_dir, plan, site: str, steps: int) -> dict[tuple[int, int], list[float]]:
    """Per (layer, position), per row alone: clean logit difference + (cf - clean) . the gradient at the site
    averaged over the path on which every swept position moves from clean to cf together."""
    model = plain_model(model_dir)
    token = plan.points[0].steps[-1].scoring.token_ids  # columns: cf_answer, base_answer
    out: dict[tuple[int, int], list[float]] = {}
    for layer in LAYERS:
        for i, (ids, cf_ids) in enumerate(zip(plan.prompts["base"], plan.prompts["counterfactual"])):
            clean, source = captured(model, site, layer, ids), captured(model, site, layer, cf_ids)
            change = torch.zeros_like(clean)
            for pos in POSITIONS:
                change[pos] = source[pos] - clean[pos]
            total, leaf = torch.zeros_like(clean), {}
            for k in range(steps):
                def moved(h, k=k):
                    leaf["x"] = (h.detach() + k / steps * change).requires_grad_(True)
                    return leaf["x"]
                handle = edited(model, site, layer, moved)
                with torch.enable_grad():
                    logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
                    ld = logits[token[i][0]] - logits[token[i][1]]
                    (grad,) = torch.autograd.grad(ld, leaf["x"])
                handle.remove()
                total += grad[0]
                if k == 0:
                    start = ld.item()
            for pos in POSITIONS:
                out.setdefault((layer, pos), []).append(
                    start + (change[pos].double() * (total[pos] / steps).double()).sum().item())
    return out


@pytest.mark.parametrize("site", ["block_input", "block_output", "head"])
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
def test_integrated_gradients_equal_a_plain_torch_path_integral(arch, site, request, write_doc):
    model_dir = request.getfixturevalue(arch)
    path = write_doc(document(model_dir, site, estimate={"method": "attribution", "steps": STEPS}), ROWS)
    got = per_point(api.run(path), "ld")
    expected = reference(model_dir, api.plan(path), site, STEPS)
    for key, values in expected.items():
        torch.testing.assert_close(torch.tensor(got[key]), torch.tensor(values), atol=1e-5, rtol=0, msg=str(key))
    # Not the plain estimate under another name: one step differs from four.
    plain = per_point(api.run(write_doc(document(model_dir, site), ROWS)), "ld")
    assert max(abs(a - b) for key in got for a, b in zip(got[key], plain[key])) > 1e-3


@pytest.mark.parametrize("site", ["block_output", "mlp_output", "head"])
def test_more_steps_tend_to_the_patched_effect_on_both_engines(tiny_llama, site, write_doc):
    """One write (layer 1, position -4): the estimate's distance from real patching falls with the steps, to a
    few hundredths of the plain estimate's at 64 (a left Riemann sum's error shrinks as 1 / steps)."""
    def doc(**extra):
        d = document(tiny_llama, site, **extra)
        d["sweep"] = {"layers": [1], "pos": [-4]}
        return write_doc(d, ROWS)

    real = per_point(api.run(doc(estimate=None)), "ld")[(1, -4)]
    errors = {}
    for steps in (1, 8, 64):
        path = doc(estimate={"method": "attribution", "steps": steps})
        hooks, nnterp = api.run(path, engine="hooks"), api.run(path, engine="nnterp")
        got = per_point(hooks, "ld")[(1, -4)]
        assert got == per_point(nnterp, "ld")[(1, -4)]  # bit for bit
        errors[steps] = max(abs(a - b) for a, b in zip(got, real))
    assert errors[64] < errors[8] < errors[1]
    assert errors[64] < 0.05 * errors[1]


def test_the_files_say_how_many_steps(tiny_llama, write_doc, tmp_path):
    path = write_doc(document(tiny_llama, "block_output", estimate={"method": "attribution", "steps": 3}), ROWS)
    api.run(path, out=tmp_path / "out")
    run = load(tmp_path / "out")
    assert run.run["estimate"] == {"method": "attribution", "steps": 3}
    assert set(run.summaries["estimate_steps"]) == {3} and set(run.summaries["estimate"]) == {"attribution"}


@pytest.mark.parametrize("steps", [0, 257, 2.5, -1, [5]])
def test_steps_out_of_range_are_one_line(tiny_llama, write_doc, steps):
    path = write_doc(document(tiny_llama, "block_output", estimate={"method": "attribution", "steps": steps}), ROWS)
    with pytest.raises(DocumentError) as found:
        api.plan(path)
    assert "$.estimate.steps" in str(found.value) and "\n" not in str(found.value)


@pytest.mark.parametrize("edges", [[["a0.h1", "a1.kv1<k>"]], [["input", "a1.h0<q>"], ["a0.h3", "m1"], ["m0", "logits"]]])
def test_edge_integrated_gradients_tend_to_the_patched_edges_on_both_engines(tiny_llama, write_doc, edges):
    """An edge patch (one edge; three of three kinds, moved together): the estimate's distance from patching
    the edges for real falls with the steps, to a few hundredths of the plain estimate's (EAP's) at 64."""
    def doc(**extra):
        d = {"version": "2", "model": {"key": str(tiny_llama)}, "data": {"path": "rows.jsonl"},
             "edges": {"p": {"input": "base", "source": "counterfactual", "edges": edges}},
             "metrics": {"ld": {"kind": "logit_diff", "target": "cf_answer", "other": "base_answer"}}, **extra}
        return write_doc(d, ROWS)

    real = api.run(doc()).rows["value"].tolist()
    errors = {}
    for steps in (1, 8, 64):
        path = doc(estimate={"method": "attribution", "steps": steps})
        hooks = api.run(path, engine="hooks").rows["value"].tolist()
        assert hooks == api.run(path, engine="nnterp").rows["value"].tolist()  # bit for bit
        errors[steps] = max(abs(a - b) for a, b in zip(hooks, real))
    assert errors[64] < errors[8] < errors[1]
    assert errors[64] < 0.05 * errors[1]


def test_integrated_gradients_over_a_path_patch_are_refused_in_one_line(tiny_llama, write_doc):
    doc = {"version": "2", "model": {"key": str(tiny_llama)}, "data": {"path": "rows.jsonl"},
           "edges": {"e": {"input": "base", "source": "counterfactual",
                           "path": {"sender": "a0.h0", "receivers": ["a1.h0<q>"]}}},
           "metrics": {"ld": {"kind": "logit_diff", "target": "cf_answer", "other": "base_answer"}},
           "estimate": {"method": "attribution", "steps": 5}}
    with pytest.raises(PlanError, match=r"\$\.edges\.e\.path: integrated gradients move edges"):
        api.plan(write_doc(doc, ROWS))


def test_a_confirmation_that_agrees_poorly_is_one_warning_line_naming_the_figure(tiny_llama, write_doc, tmp_path):
    """The plain estimate on the tiny random model's early layers misses (checked here against the run's own
    figures); the run still writes its files and exits 0, and says so in one line at the end."""
    from typer.testing import CliRunner

    from causalab_core.cli import app

    doc = document(tiny_llama, "block_output", estimate={"method": "attribution", "confirm": {"top": 4}})
    result = CliRunner().invoke(app, ["run", str(write_doc(doc, ROWS)), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    confirmed = load(tmp_path / "o").run["estimate"]["confirmed"]
    poor = (confirmed["spearman"] is not None and confirmed["spearman"] < 0.5) or confirmed["same_sign"] < 0.8 \
        or confirmed["mean_abs_error"] > 0.5 * confirmed["mean_abs_effect"]
    assert poor, confirmed  # three of the four signs right
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, result.stderr
    assert "agrees poorly with patching on the 4 confirmed points (ld)" in warnings[0]
    assert "same sign on 75%" in warnings[0] and warnings[0] == result.stderr.splitlines()[-1]


def test_a_confirmation_that_agrees_says_nothing(tiny_llama, write_doc, tmp_path):
    """Integrated gradients at 16 steps, one position per layer (each point its own path), agree: no warning."""
    from typer.testing import CliRunner

    from causalab_core.cli import app

    doc = document(tiny_llama, "block_output", estimate={"method": "attribution", "steps": 16, "confirm": {"top": 4}})
    doc["sweep"] = {"layers": [0, 1, 2, 3], "pos": [-4]}
    result = CliRunner().invoke(app, ["run", str(write_doc(doc, ROWS)), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    confirmed = load(tmp_path / "o").run["estimate"]["confirmed"]
    assert confirmed["same_sign"] == 1 and confirmed["mean_abs_error"] < 0.2 * confirmed["mean_abs_effect"], confirmed
    assert "warning:" not in result.stderr


def test_compare_of_an_estimated_and_a_patched_run_reports_their_agreement(tiny_llama, write_doc, tmp_path):
    """The figures are the ones computed here from the two runs' summaries."""
    from typer.testing import CliRunner

    from causalab_core.cli import app
    from causalab_core.results.confirm import spearman

    estimated = document(tiny_llama, "block_output", estimate={"method": "attribution", "steps": 2})
    patched = {k: v for k, v in estimated.items() if k != "estimate"}
    api.run(write_doc(estimated, ROWS, "e.json"), out=tmp_path / "e")
    api.run(write_doc(patched, ROWS, "p.json"), out=tmp_path / "p")
    guess, real = load(tmp_path / "e").summaries, load(tmp_path / "p").summaries
    ld = guess[guess.metric == "ld"].merge(real[real.metric == "ld"], on="point", suffixes=("", "_real"))
    est, act = ld["mean"] - ld["clean_mean"], ld["mean_real"] - ld["clean_mean"]
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "p"), str(tmp_path / "e"), "--json"])
    assert result.exit_code == 1  # the files differ
    found = __import__("json").loads(result.stdout)
    assert found["same_experiment"] and found["estimate"]["estimated"] == "b"
    m = found["estimate"]["metrics"]["ld"]
    assert m["points"] == 4 and m["spearman"] == pytest.approx(spearman(list(est), list(act)))
    assert m["same_sign"] == ((est > 0) == (act > 0)).mean()
    assert m["mean_abs_error"] == pytest.approx((est - act).abs().mean())
    text = CliRunner().invoke(app, ["compare", str(tmp_path / "p"), str(tmp_path / "e")]).stdout
    assert f"{tmp_path / 'e'} estimates (attribution, 2 steps) what {tmp_path / 'p'} patches:" in text
    assert "    ld: over 4 points Spearman" in text


def test_a_run_kept_in_chunks_estimates_what_a_run_in_memory_does(tiny_llama, write_doc, tmp_path):
    """Integrated gradients move every estimated edge along one path, so the points of a run kept beside --out
    (chunks of a tenth of the sweep otherwise) run as one chunk: every edge of the graph, the same values."""
    doc = {"version": "2", "model": {"key": str(tiny_llama)}, "data": {"path": "rows.jsonl"},
           "edges": {"p": {"input": "base", "source": "counterfactual", "edges": "each"}},
           "metrics": {"ld": {"kind": "logit_diff", "target": "cf_answer", "other": "base_answer"}},
           "estimate": {"method": "attribution", "steps": 3}}
    path = write_doc(doc, ROWS)
    kept, memory = api.run(path, out=tmp_path / "o"), api.run(path)
    assert len(memory.metrics) == 343
    assert {m.point.name: m.content["values"] for m in kept.metrics} == \
        {m.point.name: m.content["values"] for m in memory.metrics}
