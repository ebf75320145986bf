"""A third party's plugin that breaks: one line naming the component's kind, name and distribution and the
exception (the traceback with --verbose), wherever core calls into it; and `causalab --help` loads no plugin."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest
import torch
from pydantic import BaseModel, ConfigDict
from typer.testing import CliRunner

from causalab_core import api, hookimpl
from causalab_core.cli import app
from causalab_core.plugins.contracts import (
    CausalModel, Engine, Featurizer, Metric, MetricValues, PositionResolver, Resolved, mean_over_eligible,
)
from causalab_core.errors import DocumentError, PluginError
from causalab_core.plugins.registry import build_registry
from causalab_testing.data import sweep_document, weekday_rows


class PeekParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    answer: str = "cf_answer"


class PeekBase(Metric):
    """Reads the base run its `needs` left out."""

    name = "peek_base"
    Params = PeekParams

    def columns(self, params):
        return (params.answer,)

    def compute(self, params, inputs):
        base = inputs.runs["base"]
        return mean_over_eligible(base.column(params.answer).tolist(), inputs.eligible)


class Quits(PeekBase):
    """Calls sys.exit inside compute: a run must not end silently with the plugin's exit code."""

    name = "quits"

    def compute(self, params, inputs):
        sys.exit(0)


class BadColumns(PeekBase):
    name = "bad_columns"

    def columns(self, params):
        return tuple(params.answers)  # no such field


class Boom(Featurizer):
    """Breaks inside the engine, where the hooks engine calls it."""

    name = "boom"

    def featurize(self, x):
        raise ZeroDivisionError("the featurizer divided by zero")

    def inverse(self, f, err):
        return f


class BadSite(Boom):
    name = "bad_site"

    @classmethod
    def check_site(cls, params, width):
        return {}["width"]


class Polite(Boom):
    """Refuses deliberately with a causalab error: it must pass unchanged."""

    name = "polite"

    def featurize(self, x):
        raise DocumentError("polite: this featurizer refuses, on purpose")


class Grabby(PositionResolver):
    name = "grabby"

    def accepts(self, spec):
        return isinstance(spec, dict) and "grab" in spec

    def resolve(self, spec, row):
        return Resolved(positions=(row.ids.index(-7),))  # ValueError: not in tuple


class Crashing(Engine):
    name = "crashing"

    def execute(self, plan, **kwargs):
        return self.helper()

    def helper(self):
        raise RuntimeError("engine fell over")


class Days(CausalModel):
    name = "broken_days"
    inputs = ("day",)
    mechanisms = {"answer": ("day",)}

    def sample(self, rng, variable):
        return rng.choice(["Monday", "Tuesday", "Friday"])

    def compute(self, variable, parents):
        return parents["day"]

    def prompt(self, values):
        return values["weekday"]  # KeyError: no such variable

    def answer(self, values):
        return " " + values["answer"]

    def split(self, inputs):
        return "train"


def _module(**hooks):
    module = types.ModuleType("causalab_broken")
    module.DISTRIBUTION = "causalab-broken"
    for name, value in hooks.items():
        setattr(module, name, hookimpl(value))
    return module


BROKEN = _module(
    causalab_metrics=lambda: [PeekBase, BadColumns, Quits],
    causalab_featurizers=lambda: [Boom, BadSite, Polite],
    causalab_position_resolvers=lambda: [Grabby],
    causalab_engines=lambda: [Crashing],
    causalab_causal_models=lambda: [Days],
)


@pytest.fixture(scope="module")
def broken():
    return build_registry(extra=(BROKEN,))


@pytest.fixture
def cli(broken, monkeypatch):
    """The CLI over the installed plugins and the broken one."""
    monkeypatch.setattr(api, "default_registry", lambda: broken)

    def invoke(*args):
        return CliRunner().invoke(app, [str(a) for a in args])

    return invoke


@pytest.fixture
def doc(tiny_llama):
    document = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    document["metrics"] = {"p": {"kind": "p_answer", "answer": "cf_answer"}}
    return document


def _one_line(result, expected: str, code: int = 2):
    assert result.exit_code == code, result.output
    assert result.stderr.splitlines() == [expected]
    assert "Traceback" not in result.output


def test_a_metric_reading_a_run_it_did_not_ask_for_is_one_line_naming_it(cli, doc, write_doc, tmp_path):
    doc["metrics"]["peek"] = {"kind": "peek_base"}
    path = write_doc(doc, weekday_rows(4))
    _one_line(cli("run", path, "--out", tmp_path / "o"),
              "PluginError: metric 'peek_base' of causalab-broken failed in compute: KeyError: 'base'")
    assert not (tmp_path / "o").exists()
    verbose = cli("run", path, "--out", tmp_path / "o", "--verbose")
    assert verbose.exit_code == 2
    assert "Traceback" in verbose.stderr and 'base = inputs.runs["base"]' in verbose.stderr
    assert verbose.stderr.strip().splitlines()[-1].startswith("PluginError: metric 'peek_base'")


def test_a_plugin_calling_sys_exit_is_one_line_not_a_silent_exit(cli, doc, write_doc, tmp_path):
    doc["metrics"]["q"] = {"kind": "quits"}
    _one_line(cli("run", write_doc(doc, weekday_rows(4)), "--out", tmp_path / "o"),
              "PluginError: metric 'quits' of causalab-broken failed in compute: SystemExit: 0")
    assert not (tmp_path / "o").exists()


def test_an_extra_plugin_named_like_an_installed_one_registers_and_one_given_twice_is_one_line():
    metrics = types.ModuleType("metrics")  # a third party's metrics.py; causalab-metrics' entry point is "metrics"
    metrics.causalab_metrics = hookimpl(lambda: [Quits])
    assert "quits" in build_registry(extra=(metrics,)).names("metric")
    with pytest.raises(PluginError, match="registered already") as raised:
        build_registry(extra=(metrics, metrics))
    assert "\n" not in str(raised.value)


def test_a_metric_failing_at_compile_time_is_named_by_validate(cli, doc, write_doc):
    doc["metrics"]["bad"] = {"kind": "bad_columns"}
    _one_line(cli("validate", write_doc(doc, weekday_rows(4))),
              "PluginError: metric 'bad_columns' of causalab-broken failed in columns: "
              "AttributeError: 'PeekParams' object has no attribute 'answers'")


def test_a_featurizer_failing_inside_the_engine_is_named(cli, doc, write_doc, tmp_path):
    doc["featurizers"] = {"f": {"kind": "boom"}}
    doc["writes"]["patch"]["featurizer"] = "f"
    _one_line(cli("run", write_doc(doc, weekday_rows(4)), "--out", tmp_path / "o"),
              "PluginError: featurizer 'boom' of causalab-broken failed in featurize: "
              "ZeroDivisionError: the featurizer divided by zero")
    doc["featurizers"] = {"f": {"kind": "bad_site"}}
    _one_line(cli("plan", write_doc(doc, weekday_rows(4), name="site.json")),
              "PluginError: featurizer 'bad_site' of causalab-broken failed in check_site: KeyError: 'width'")


def test_a_plugins_own_causalab_error_passes_unchanged(cli, doc, write_doc, tmp_path):
    doc["featurizers"] = {"f": {"kind": "polite"}}
    doc["writes"]["patch"]["featurizer"] = "f"
    _one_line(cli("run", write_doc(doc, weekday_rows(4)), "--out", tmp_path / "o"),
              "DocumentError: polite: this featurizer refuses, on purpose")


def test_a_position_resolver_and_an_engine_failing_are_named(cli, doc, write_doc, tmp_path):
    path = write_doc(doc, weekday_rows(4))
    _one_line(cli("run", path, "--out", tmp_path / "o", "--engine", "crashing"),
              "PluginError: engine 'crashing' of causalab-broken failed in helper: RuntimeError: engine fell over")
    for spec in (doc["reads"]["cf_resid"], doc["writes"]["patch"]):
        spec["position"] = {"grab": 1}
    del doc["sweep"]["pos"]
    _one_line(cli("plan", write_doc(doc, weekday_rows(4), name="grab.json")),
              "PluginError: position resolver 'grabby' of causalab-broken failed in resolve: "
              "ValueError: tuple.index(x): x not in tuple")


def test_a_causal_model_failing_while_generating_rows_is_named(cli, doc, write_doc):
    doc["data"] = {"causal_model": {"kind": "broken_days", "intervene": ["day"], "rows": 2, "split": "train"}}
    _one_line(cli("validate", write_doc(doc)),
              "PluginError: causal model 'broken_days' of causalab-broken failed in prompt: KeyError: 'weekday'")


def test_hooks_that_fail_are_named_with_their_plugin(doc, write_doc, tmp_path, monkeypatch):
    def source(key, revision):
        raise OSError("no cache here")

    def provenance(engine, remote, plan, details):
        return {"x": 1 / 0}

    registry = build_registry(extra=(_module(causalab_model_source=source),))
    with pytest.raises(PluginError, match=r"^plugin 'causalab_broken' of causalab-broken failed in its "
                                          r"causalab_model_source hook: OSError: no cache here$"):
        api.plan(write_doc(doc, weekday_rows(4)), registry=registry)
    registry = build_registry(extra=(_module(causalab_provenance=provenance),))
    with pytest.raises(PluginError, match=r"causalab_provenance hook: ZeroDivisionError: division by zero$") as caught:
        api.run(write_doc(doc, weekday_rows(4), name="p.json"), out=tmp_path / "o", registry=registry)
    assert isinstance(caught.value.__cause__, ZeroDivisionError)  # the original, for --verbose
    assert not (tmp_path / "o").exists()
    with pytest.raises(PluginError, match=r"^plugin 'causalab_broken' of causalab-broken failed in its "
                                          r"causalab_metrics hook: ImportError: no torch$"):
        build_registry(extra=(_module(causalab_metrics=lambda: (_ for _ in ()).throw(ImportError("no torch"))),))


def test_an_interruption_inside_a_plugin_stays_an_interruption(cli, doc, write_doc, tmp_path, monkeypatch):
    def interrupt(self, x):
        raise KeyboardInterrupt

    monkeypatch.setattr(Boom, "featurize", interrupt)
    doc["featurizers"] = {"f": {"kind": "boom"}}
    doc["writes"]["patch"]["featurizer"] = "f"
    result = cli("run", write_doc(doc, weekday_rows(4)), "--out", tmp_path / "o")
    assert result.exit_code == 130 and result.stderr.strip() == "Interrupted"


def test_a_core_bug_is_not_blamed_on_a_plugin(broken):
    with pytest.raises(ZeroDivisionError):
        with broken.boundary():
            1 / 0


def test_a_plugin_command_hook_that_fails_is_named(monkeypatch):
    import typer

    from causalab_core import cli
    from causalab_core.plugins.registry import registry

    ndif = next(p for p in registry().plugins if p.distribution == "causalab-ndif").module
    monkeypatch.setattr(ndif, "causalab_commands", lambda app: {}["ndif"])
    with pytest.raises(PluginError, match=r"^plugin 'ndif' of causalab-ndif failed in its "
                                          r"causalab_commands hook: KeyError: 'ndif'$"):
        cli.add_plugin_commands(typer.Typer())


HELP = """
import sys
sys.argv = ["causalab", *sys.argv[1:]]
from causalab_core.cli import main
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "nnsight", "causalab_hooks",
                "causalab_featurizers", "causalab_metrics", "causalab_nnterp", "causalab_positions", "causalab_toy",
                "causalab_testing"))
print(loaded, file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--help"], ["schema"], ["run", "--help"], ["ndif", "--help"]])
def test_help_and_schema_load_no_plugin_and_no_torch(args):
    done = subprocess.run([sys.executable, "-c", HELP, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == "[]"
    if args == ["--help"]:
        assert "ndif" in done.stdout  # a plugin's command is still listed: its module names the hook
    if args == ["schema"]:
        assert json.loads(done.stdout)["title"]


def test_core_code_holding_a_plugin_class_is_not_blamed_on_it(broken):
    """A core function with the class in a local named ``cls`` that fails after the plugin returned: core's bug."""
    def core_step():
        cls = broken.get("metric", "peek_base")
        cls().columns(PeekParams())
        return {}["core's own bug"]

    with pytest.raises(KeyError):
        with broken.boundary():
            core_step()


def _broken(base: type, method: str, name: str) -> type:
    """``base`` with ``method`` raising, under another name."""
    def fail(*args, **kwargs):
        raise LookupError(f"{method} broke")

    wrapped = classmethod(fail) if method == "check_site" else fail
    return type(f"Broken_{method}", (base,), {"name": name, method: wrapped})


class Sound(Boom):
    name = "sound"

    def featurize(self, x):
        return x, None


@pytest.mark.parametrize("base,kind,method,run", [
    (PeekBase, "metric", "needs", False),
    (PeekBase, "metric", "columns", False),
    (Sound, "featurizer", "__init__", True),
    (Sound, "featurizer", "inverse", True),
    (Days, "causal model", "sample", False),
    (Days, "causal model", "compute", False),
    (Days, "causal model", "answer", False),
    (Days, "causal model", "split", False),
])
def test_every_method_core_calls_is_named_when_it_breaks(base, kind, method, run, doc, write_doc, tmp_path):
    cls = _broken(base, method, f"broken_{method.strip('_')}")
    if base is Days:
        cls.prompt = lambda self, values: "Q : what day is 3 days after " + values["day"] + " ? A :"
        doc["data"] = {"causal_model": {"kind": cls.name, "intervene": ["day"], "rows": 2, "split": "train"}}
        path = write_doc(doc)
    elif base is PeekBase:
        doc["metrics"]["bad"] = {"kind": cls.name}
        path = write_doc(doc, weekday_rows(4))
    else:
        doc["featurizers"] = {"f": {"kind": cls.name}}
        doc["writes"]["patch"]["featurizer"] = "f"
        path = write_doc(doc, weekday_rows(4))
    hook = {"metric": "causalab_metrics", "featurizer": "causalab_featurizers", "causal model": "causalab_causal_models"}
    registry = build_registry(extra=(_module(**{hook[kind]: lambda: [cls]}),))
    with pytest.raises(PluginError) as raised:
        (api.run(path, registry=registry) if run else api.plan(path, registry=registry))
    assert raised.value.one_line() == (f"PluginError: {kind} {cls.name!r} of causalab-broken failed in {method}: "
                                       f"LookupError: {method} broke")


@pytest.mark.parametrize("returned,problem", [
    (lambda rows: [0.5] * rows, "compute returned [0.5, 0.5, 0.5, 0.5], not a MetricValues(rows, summary)"),
    (lambda rows: MetricValues([0.5] * (rows - 1), {}), "compute returned 3 row values for 4 rows"),
    (lambda rows: MetricValues([torch.tensor(0.5)] * rows, {}), "compute returned tensor(0.5000) for row 0, not a "
                                                                "float or None"),
    (lambda rows: MetricValues([0.5] * rows, {"mean": torch.tensor(0.5)}), "compute returned the summary entry "
                                                                           "'mean': tensor(0.5000), not a name and"),
    (lambda rows: MetricValues([0.5] * rows, {"mean": float("inf")}), "compute returned the summary entry 'mean': "
                                                                      "inf, not a finite number or NaN"),
    (lambda rows: MetricValues([0.5] * rows, {"spread": -float("inf")}), "compute returned the summary entry "
                                                                         "'spread': -inf, not a finite number or NaN"),
])
def test_a_metric_returning_what_breaks_the_contract_is_named_before_any_file(returned, problem, doc, write_doc,
                                                                              tmp_path):
    class Careless(PeekBase):
        name = "careless"

        def compute(self, params, inputs):
            return returned(len(inputs.eligible))

    doc["metrics"]["c"] = {"kind": "careless"}
    registry = build_registry(extra=(_module(causalab_metrics=lambda: [Careless]),))
    with pytest.raises(PluginError) as raised:
        api.run(write_doc(doc, weekday_rows(4)), out=tmp_path / "o", registry=registry)
    assert raised.value.one_line().startswith(f"PluginError: metric 'careless' of causalab-broken at $.metrics.c: "
                                              f"{problem}")
    assert not (tmp_path / "o").exists()


def test_a_value_for_a_row_that_is_not_eligible_breaks_the_contract():
    from causalab_core.plugins.returns import values_problem

    assert values_problem(MetricValues([0.5, None], {"mean": 0.5}), [True, False]) is None
    assert values_problem(MetricValues([0.5, float("nan")], {}), [True, True]) is None  # NaN: undefined, allowed
    assert values_problem(MetricValues([0.5, 0.25], {}), [True, False]) == (
        "compute returned 0.25 for row 1, which is not eligible (its value must be None)")
    assert values_problem(MetricValues([True], {}), [True]) == "compute returned True for row 0, not a float or None"


def test_core_writes_the_counts_of_every_summary_from_the_eligible_mask(doc, write_doc, tmp_path):
    """A metric's summary that leaves out `eligible` and `rows`, or miscounts them, is written with core's
    counts (the README promises them in every summary); its own entries, a NaN among them, are kept."""

    class Uncounted(PeekBase):
        name = "uncounted"

        def columns(self, params):
            return ("cf_answer", "base_answer")

        def compute(self, params, inputs):
            return MetricValues([0.5 if ok else None for ok in inputs.eligible], {"mean": 0.5, "spread": float("nan")})

    class Miscounted(Uncounted):
        name = "miscounted"

        def compute(self, params, inputs):
            return MetricValues([0.5 if ok else None for ok in inputs.eligible],
                                {"eligible": 99, "mean": 0.5, "rows": -1})

    rows = weekday_rows(4)
    rows[2]["cf_answer"] = rows[2]["base_answer"]  # one row not eligible (answers_coincide) for a two-column metric
    doc["metrics"] = {"u": {"kind": "uncounted"}, "m": {"kind": "miscounted"},
                      "ld": {"kind": "logit_diff", "target": "cf_answer", "other": "base_answer"}}
    registry = build_registry(extra=(_module(causalab_metrics=lambda: [Uncounted, Miscounted]),))
    api.run(write_doc(doc, rows), out=tmp_path / "o", registry=registry)
    folder = tmp_path / "o" / "layers=1,pos=-1"
    read = {name: json.loads((folder / f"{name}.json").read_text())["summary"] for name in ("u", "m", "ld")}
    # Beside each mean, core's interval over the rows (every value 0.5 here: the interval is the point).
    assert read["u"] == {"mean": 0.5, "mean_low": 0.5, "mean_high": 0.5, "spread": "NaN", "eligible": 3, "rows": 4}
    assert list(read["m"].items()) == [("eligible", 3), ("mean", 0.5), ("mean_low", 0.5), ("mean_high", 0.5),
                                       ("rows", 4)]
    assert read["ld"]["eligible"] == 3 and read["ld"]["rows"] == 4
