"""What a plugin returns is held to its contract where core receives it: every malformed answer is one
`PluginError` line naming the component (or hook) and its distribution, never a traceback from core's
compiler and never a `DocumentError` about the user's document."""

from __future__ import annotations

import json
import types

import pytest
from pydantic import BaseModel, ConfigDict

from causalab_core import api, hookimpl
from causalab_core.errors import PluginError
from causalab_core.plugins.contracts import Engine, Intervention, PositionResolver, Recipe, Resolved
from causalab_core.plugins.registry import build_registry
from causalab_metrics.answers import IIA
from causalab_testing.data import sweep_document, weekday_rows

WHO = "of causalab-broken"


def plugin(**hooks) -> types.ModuleType:
    module = types.ModuleType("broken_plugin")
    module.DISTRIBUTION = "causalab-broken"
    for name, value in hooks.items():
        setattr(module, name, hookimpl(value))
    return module


def intervention(recipe=None, apply=None):
    class Broken(Intervention):
        name = "broken"

        def recipe(self, params):
            return recipe

    if apply is not None:
        Broken.apply = lambda self, x, v, params: apply(x)
    return plugin(causalab_interventions=lambda: [Broken])


def metric(**methods):
    cls = type("Broken", (IIA,), {"name": "broken", **{k: (lambda v: lambda self, params: v)(v)
                                                        for k, v in methods.items()}})
    return plugin(causalab_metrics=lambda: [cls])


def resolver(answer):
    class Broken(PositionResolver):
        name = "broken"

        def accepts(self, spec):
            return spec == {"broken": True}

        def resolve(self, spec, row):
            return answer

    return plugin(causalab_position_resolvers=lambda: [Broken])


def with_intervention(doc):
    doc["writes"]["patch"]["intervention"] = {"kind": "broken"}


def with_metric(doc):
    doc["metrics"]["again"] = {**doc["metrics"]["iia"], "kind": "broken"}


def with_position(doc):
    doc["reads"]["cf_resid"]["position"] = {"broken": True}


def estimated(doc):
    with_metric(doc)
    doc["metrics"] = {"again": doc["metrics"]["again"]}
    doc["estimate"] = {"method": "attribution"}


COMPILE = [
    ("recipe a tuple", intervention(("source", "replace")), with_intervention,
     "intervention 'broken' of causalab-broken: recipe returned ('source', 'replace'), not a contracts.Recipe"),
    ("recipe None", intervention(None), with_intervention, "recipe returned None, not a contracts.Recipe"),
    ("recipe an unknown need", intervention(Recipe("sauce", "replace")), with_intervention,
     "recipe returned needs='sauce', combine='replace'"),
    ("recipe an alpha that is a list", intervention(Recipe("source", "add", alpha=[1, 2])), with_intervention,
     "recipe returned a Recipe with alpha=[1, 2] (a finite number)"),
    ("recipe an alpha that is NaN", intervention(Recipe("source", "add", alpha=float("nan"))), with_intervention,
     "alpha=nan (a finite number)"),
    ("recipe an alpha that is True", intervention(Recipe("source", "add", alpha=True)), with_intervention,
     "alpha=True (a finite number)"),
    ("recipe a seed that is a string", intervention(Recipe("resample", "replace", seed="3")), with_intervention,
     "seed='3' (an int or None)"),
    ("recipe a minus that is a number", intervention(Recipe("mean", "add", minus=5)), with_intervention,
     "minus=5 (a name or None)"),
    ("recipe a tensor need with no file", intervention(Recipe("tensor", "add")), with_intervention,
     "recipe needs a tensor and names no file"),
    ("recipe custom without apply", intervention(Recipe("source", "custom")), with_intervention,
     "its recipe combines `custom`, and the class has no `apply`"),
    ("needs a list", metric(needs=["answers"]), with_metric,
     "metric 'broken' of causalab-broken: needs returned ['answers'], not a mapping of runs to views"),
    ("needs a string of views", metric(needs={"intervened": "answers"}), with_metric,
     "needs gives the run 'intervened' 'answers', not a tuple of views"),
    ("needs an unknown run", metric(needs={"clean": ("answers",)}), with_metric, "needs names the run 'clean'"),
    ("needs an unknown view", metric(needs={"intervened": ("tokens",)}), with_metric,
     "needs asks for the view 'tokens'"),
    ("linear a list", metric(differentiable=True, linear=[1, -1]), estimated,
     "metric 'broken' of causalab-broken: linear returned [1, -1], not None or a mapping"),
    ("linear an unknown column", metric(differentiable=True, linear={"gold": 1.0}), estimated,
     "linear names 'gold', which is neither one of its columns"),
    ("linear a coefficient that is a string", metric(differentiable=True, linear={"cf_answer": "1"}), estimated,
     "linear gives 'cf_answer' the coefficient '1', not a finite number"),
    ("resolve a tuple", resolver((3,)), with_position,
     "position 'broken' of causalab-broken: resolve returned (3,), not a contracts.Resolved"),
    ("resolve a list of positions", resolver(Resolved(positions=[3])), with_position,
     "resolve returned positions [3], not a tuple of token indices"),
    ("resolve a position past the prompt", resolver(Resolved(positions=(999,))), with_position,
     "resolve returned positions (999,) for a prompt of"),
    ("resolve nothing and no reason", resolver(Resolved()), with_position, "resolve returned no positions and no reason"),
    ("model source a number", plugin(causalab_model_source=lambda key, revision: 42), lambda doc: None,
     "plugin 'broken_plugin' of causalab-broken: causalab_model_source returned 42 for the key"),
]


@pytest.mark.parametrize("module,edit,line", [c[1:] for c in COMPILE], ids=[c[0] for c in COMPILE])
def test_a_malformed_answer_at_compile_time_is_the_plugins_one_line(module, edit, line, write_doc, tiny_llama):
    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    edit(doc)
    registry = build_registry(extra=(module,))
    with pytest.raises(PluginError) as caught:
        api.plan(write_doc(doc, weekday_rows(4)), registry=registry)
    message = caught.value.one_line()
    assert "\n" not in message and line in message and WHO in message, message
    assert "doc.json" not in message  # the plugin's mistake, not the user's document


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


RUN = [
    ("apply a wrong shape", intervention(Recipe("source", "custom"), apply=lambda x: x[..., :1]), with_intervention,
     "intervention 'broken' of ", "1] torch.float32, not a float tensor of the site's shape"),
    ("apply integers", intervention(Recipe("source", "custom"), apply=lambda x: x.long()), with_intervention,
     "intervention 'broken' of ", "torch.int64, not a float tensor"),
    ("provenance a list", plugin(causalab_provenance=lambda engine, remote, plan, details: [1]), lambda doc: None,
     "plugin 'broken_plugin' of causalab-broken", "causalab_provenance returned [1], not a dict"),
]


@pytest.mark.parametrize("module,edit,who,line", [c[1:] for c in RUN], ids=[c[0] for c in RUN])
def test_a_malformed_answer_at_run_time_is_the_plugins_one_line(module, edit, who, line, write_doc, tiny_llama,
                                                               tmp_path):
    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    edit(doc)
    registry = build_registry(extra=(module,))
    with pytest.raises(PluginError) as caught:
        api.run(write_doc(doc, weekday_rows(4)), out=tmp_path / "o", registry=registry)
    message = caught.value.one_line()
    assert "\n" not in message and who in message and line in message, message
    assert not (tmp_path / "o").exists()


def test_a_class_from_an_installed_plugin_is_named_by_its_distribution():
    from causalab_core.runtime.interventions import distribution_of
    from causalab_interventions import Add

    assert distribution_of(Add) == "causalab-interventions"


class Engines:
    """An engine whose ``execute`` answers ``answer(plan)``."""

    @staticmethod
    def of(answer):
        class Broken(Engine):
            name = "broken"

            def execute(self, plan, **kwargs):
                return answer(plan)

        return plugin(causalab_engines=lambda: [Broken])


@pytest.mark.parametrize("answer,line", [
    (lambda plan: None, "execute returned None, not a mapping of step paths to results"),
    (lambda plan: {}, "execute returned no results for the step"),
    (lambda plan: {s.path: [1] for s in plan.steps()}, "execute returned [1] for the step"),
    (lambda plan: {s.path: {"answer_logits": [[1.0]]} for s in plan.steps()},
     "execute returned [[1.0]] as 'answer_logits' of the step"),
], ids=["none", "no steps", "a list", "not a tensor"])
def test_an_engines_malformed_results_are_its_one_line(answer, line, write_doc, tiny_llama, tmp_path):
    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    registry = build_registry(extra=(Engines.of(answer),))
    with pytest.raises(PluginError) as caught:
        api.run(write_doc(doc, weekday_rows(4)), out=tmp_path / "o", engine="broken", registry=registry)
    assert f"engine 'broken' {WHO}: {line}" in caught.value.one_line()


def test_a_chunk_runner_without_its_methods_is_its_one_line(write_doc, tiny_llama, tmp_path):
    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    registry = build_registry(extra=(plugin(causalab_chunk_runner=lambda workers, address: object()),))
    with pytest.raises(PluginError, match="causalab_chunk_runner returned <object object at .*>, which has no "
                                          r"chunk_size\(\)"):
        api.run(write_doc(doc, weekday_rows(4)), out=tmp_path / "o", workers=2, registry=registry)


def test_json_of_a_plugins_line_stays_plain(tmp_path):
    """The lines quote a plugin's value with echo: a huge answer is cut, never dumped whole."""
    from causalab_core.plugins import returns

    with pytest.raises(PluginError) as caught:
        returns.recipe(list(range(100_000)), "intervention 'x' of y")
    assert len(caught.value.one_line()) < 400 and json.dumps(caught.value.one_line())
