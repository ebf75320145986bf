"""The plugin system: discovery, listing, duplicate names, missing distributions."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from causalab_core import api, hookimpl
from causalab_core.plugins import hookspecs
from causalab_core.cli import app
from causalab_core.errors import PluginError
from causalab_core.plugins.registry import build_registry


def test_plugins_lists_the_shipped_plugins_with_versions_hooks_and_digests():
    result = CliRunner().invoke(app, ["plugins"])
    assert result.exit_code == 0
    listing = {p["distribution"]: p for p in json.loads(result.stdout)}
    assert listing["causalab-hooks"]["provides"] == {"engine": ["hooks"]}
    assert listing["causalab-metrics"]["provides"] == {"metric": ["answer_rank", "iia", "kl", "logit_diff",
                                                             "logprob", "normalized_logit_diff", "p_answer"]}
    assert listing["causalab-positions"]["provides"] == {"position": ["index", "scoped_index", "variable"]}
    assert listing["causalab-nnterp"]["provides"] == {"engine": ["nnterp"]}
    assert listing["causalab-toy"]["hooks"] == ["causalab_causal_models", "causalab_model_source"]
    assert listing["causalab-toy"]["provides"] == {"causal_model": ["entity", "weekdays"]}
    # Test tooling is its own distribution: a product install never loads it.
    assert listing["causalab-testing"]["hooks"] == ["causalab_model_source"]
    assert listing["causalab-metrics"]["hooks"] == ["causalab_metrics"]
    import importlib.metadata

    for dist, entry in listing.items():
        assert entry["version"] == importlib.metadata.version(dist)  # the installed distribution's own
        assert len(entry["digest"]) == 64


def _inline_plugin(name: str, dist: str, metric_name: str):
    class Dummy:
        pass

    Dummy.name = metric_name
    module = types.ModuleType(name)
    module.DISTRIBUTION = dist
    module.causalab_metrics = hookimpl(lambda: [Dummy])
    return module


def test_a_name_offered_twice_is_refused_where_used_and_nowhere_else(write_doc, tiny_llama, tmp_path):
    from causalab_testing.data import sweep_document, weekday_rows

    registry = build_registry(extra=(_inline_plugin("imposter", "causalab-imposter", "iia"),))
    from causalab_core.errors import DocumentError

    with pytest.raises(DocumentError, match="metric name 'iia' at \\$.metrics.iia.kind is provided twice: by "
                                            "causalab-metrics and by causalab-imposter; uninstall one of them"):
        api.plan(write_doc(sweep_document(str(tiny_llama)), weekday_rows(4)), registry=registry)
    # A document that does not name it runs, and the listing still shows everything that loaded.
    document = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    del document["metrics"]["iia"]
    result = api.run(write_doc(document, weekday_rows(4), name="other.json"), registry=registry)
    assert {m.name for m in result.metrics} == {"logit_diff", "p_answer"}
    assert registry.clashes == {("metric", "iia"): ["causalab-metrics", "causalab-imposter"]}


def test_a_third_party_metric_registers_like_a_built_in_one():
    registry = build_registry(extra=(_inline_plugin("extra", "causalab-extra", "brier"),))
    assert "brier" in registry.names("metric")
    assert registry.provider("metric", "brier").distribution == "causalab-extra"


def test_an_implementation_without_a_spec_is_refused():
    module = types.ModuleType("typo")
    module.causalab_metric = hookimpl(lambda: [])  # missing the trailing s
    with pytest.raises(PluginError, match="causalab_metric"):
        build_registry(extra=(module,))


def test_the_digest_changes_when_a_plugin_source_changes(tmp_path):
    from causalab_core.plugins.provenance import source_digest

    (tmp_path / "a.py").write_text("x = 1\n")
    before = source_digest(tmp_path)
    (tmp_path / "a.py").write_text("x = 2\n")
    assert source_digest(tmp_path) != before


def test_every_hook_spec_is_documented_in_contributing():
    text = (Path(__file__).parent.parent / "CONTRIBUTING.md").read_text()
    specs = [n for n in dir(hookspecs) if n.startswith("causalab_")]
    assert specs
    for name in specs:
        assert f"`{name}`" in text, f"{name} is not documented in CONTRIBUTING.md"
        assert getattr(hookspecs, name).__doc__


def _site_without(tmp_path: Path, distribution: str) -> Path:
    """A site folder holding everything this environment has installed but one distribution."""
    site = tmp_path / "site"
    site.mkdir()
    package = distribution.replace("-", "_")
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.startswith((f"{package}-", f"_editable_impl_{package}.", f"__editable__.{package}-")):
            continue
        (site / entry.name).symlink_to(entry)
    return site


def test_a_document_needing_an_uninstalled_plugin_says_what_is_installed(sweep_doc, tmp_path):
    site = _site_without(tmp_path, "causalab-metrics")
    code = (
        "import site, sys; site.addsitedir(sys.argv[1]); sys.argv = sys.argv[1:];"
        "from causalab_core.cli import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code, str(site), "run", str(sweep_doc), "--out", str(tmp_path / "o")],
        capture_output=True, text=True,
    )
    assert done.returncode == 2, done.stderr
    # No hand-kept table of this project's names: the refusal lists what the installed entry points provide.
    assert done.stderr.strip() == f"DocumentError: {sweep_doc}: unknown metric 'iia' at $.metrics.iia.kind; installed: none"
    assert not (tmp_path / "o").exists()


def test_a_featurizer_added_through_the_registry_argument_runs_end_to_end(sweep_doc, tmp_path):
    """The engines are handed the featurizer classes of the caller's registry, not the global one."""
    from pydantic import BaseModel, ConfigDict

    from causalab_core import api
    from causalab_core.plugins.contracts import Featurizer

    class PrefixParams(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")
        keep: int

    class Prefix(Featurizer):
        """The first ``keep`` coordinates are the features; the rest is the error term."""

        name = "prefix"
        Params = PrefixParams

        def featurize(self, x):
            return x[..., : self.params.keep], x[..., self.params.keep:]

        def inverse(self, f, err):
            import torch

            return torch.cat([f, err], dim=-1)

    module = types.ModuleType("causalab_prefix")
    module.DISTRIBUTION = "causalab-prefix"
    module.causalab_featurizers = hookimpl(lambda: [Prefix])
    reg = build_registry(extra=(module,))
    document = json.loads(sweep_doc.read_text())
    plain = api.run(sweep_doc, out=tmp_path / "plain")
    document["featurizers"] = {"all": {"kind": "prefix", "keep": 32}}
    document["writes"]["patch"]["featurizer"] = "all"
    sweep_doc.write_text(json.dumps(document))
    for engine in ("hooks", "nnterp"):
        whole = api.run(sweep_doc, out=tmp_path / engine, engine=engine, registry=reg)
        # Keeping every coordinate is the plain swap: the same numbers, through the plugin's featurizer.
        assert [m.content["values"] for m in whole.metrics] == [m.content["values"] for m in plain.metrics]


def test_engine_options_are_the_engines_own_and_checked_before_any_work(sweep_doc, tmp_path):
    from causalab_core import api
    from causalab_core.errors import EngineError

    with pytest.raises(EngineError, match=r"--option allow_skew: unknown option for engine 'hooks' \(its options: optimize, positions\)"):
        api.run(sweep_doc, out=tmp_path / "o", options={"allow_skew": True})
    plain = api.run(sweep_doc, out=tmp_path / "plain", options={"optimize": False})
    reused = api.run(sweep_doc, out=tmp_path / "reused", options={"positions": False})
    assert [m.content for m in plain.metrics] == [m.content for m in reused.metrics]  # prefix reuse: bitwise
    assert not (tmp_path / "o").exists()


def test_a_plugin_adds_commands_and_may_not_take_a_name_already_used(monkeypatch):
    import typer

    from causalab_core import cli
    from causalab_core.errors import PluginError
    from causalab_core.plugins.registry import registry

    def app_with_run():
        app = typer.Typer()
        app.command("run")(lambda: None)
        return app

    app = app_with_run()
    cli.add_plugin_commands(app)  # the installed plugins: causalab-ndif adds its `ndif` group
    assert [g.name for g in app.registered_groups] == ["ndif"]

    ndif = next(p for p in registry().plugins if p.distribution == "causalab-ndif").module
    monkeypatch.setattr(ndif, "causalab_commands", lambda app: app.command("run")(lambda: None))
    with pytest.raises(PluginError, match="causalab-ndif adds the command 'run', which causalab already has"):
        cli.add_plugin_commands(app_with_run())


def _site_with(tmp_path: Path, dists: dict[str, dict[str, str]]) -> Path:
    """A site folder of non-editable distributions: ``{name: {file: text}}``, each with its RECORD."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    for name, files in dists.items():
        info = site / f"{name.replace('-', '_')}-0.1.0.dist-info"
        info.mkdir()
        for rel, text in files.items():
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).write_text(text)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
        module = next(iter(files)).removesuffix(".py").split("/")[0]
        (info / "entry_points.txt").write_text(f"[causalab]\n{name.removeprefix('causalab-')} = {module}\n")
        (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in files) + f"{info.name}/METADATA,,\n")
    return site


def _plugins_from(site: Path) -> subprocess.CompletedProcess:
    code = ("import site, sys; site.addsitedir(sys.argv[1]); sys.argv = ['causalab', 'plugins'];"
            "from causalab_core.cli import main; main()")
    return subprocess.run([sys.executable, "-c", code, str(site)], capture_output=True, text=True)


PLUGIN = '"""A single-module plugin."""\nfrom causalab_core import hookimpl\n'


def test_a_single_module_plugin_is_digested_from_its_own_files(tmp_path):
    site = _site_with(tmp_path, {"causalab-x": {"causalab_x.py": PLUGIN}, "unrelated": {"unrelated.py": "A = 1\n"}})

    def digest() -> str:
        done = _plugins_from(site)
        assert done.returncode == 0, done.stderr
        return next(p["digest"] for p in json.loads(done.stdout) if p["distribution"] == "causalab-x")

    first = digest()
    (site / "unrelated.py").write_text("A = 2\n")  # another package in the same site changes
    assert digest() == first
    (site / "causalab_x.py").write_text(PLUGIN + "# edited\n")
    assert digest() != first


def test_two_distributions_sharing_an_entry_point_name_is_one_line(tmp_path):
    site = _site_with(tmp_path, {"causalab-metrics2": {"causalab_metrics2.py": PLUGIN}})
    info = next(site.glob("causalab_metrics2-*.dist-info"))
    (info / "entry_points.txt").write_text("[causalab]\nmetrics = causalab_metrics2\n")  # causalab-metrics' own name
    done = _plugins_from(site)
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr == ("PluginError: entry point 'metrics' of group 'causalab' is declared by both causalab-metrics "
                           "and causalab-metrics2: only one of them could load; uninstall one\n")


class _Greedy:
    """A resolver that also takes plain integers, which the index resolver owns."""

    name = "greedy"

    def accepts(self, spec):
        return isinstance(spec, int)


def test_a_position_form_two_resolvers_accept_is_refused_naming_both(write_doc, tiny_llama):
    from causalab_core.errors import DocumentError
    from causalab_testing.data import sweep_document, weekday_rows

    module = types.ModuleType("greedy")
    module.causalab_position_resolvers = hookimpl(lambda: [_Greedy])
    registry = build_registry(extra=(module,))
    with pytest.raises(DocumentError, match=r"position -4 is accepted by more than one resolver \(greedy, index\)"):
        api.plan(write_doc(sweep_document(str(tiny_llama)), weekday_rows(4)), registry=registry)


def test_plugins_lists_everything_and_warns_on_stderr_of_a_name_two_plugins_offer(monkeypatch):
    from causalab_core.plugins import registry as plugins

    registry = build_registry(extra=(_inline_plugin("imposter", "causalab-imposter", "iia"),
                                     _inline_plugin("copycat", "causalab-copycat", "kl")))
    monkeypatch.setattr(plugins, "registry", lambda: registry)
    result = CliRunner().invoke(app, ["plugins"])
    assert result.exit_code == 0
    listing = {p["distribution"]: p for p in json.loads(result.stdout)}
    assert {"causalab-imposter", "causalab-copycat", "causalab-metrics"} <= set(listing)
    assert "p_answer" in listing["causalab-metrics"]["provides"]["metric"]  # the unclashed names still listed
    assert result.stderr.splitlines() == [
        "warning: metric name 'iia' is provided by causalab-metrics and by causalab-imposter: a document naming it "
        "is refused; uninstall one of them",
        "warning: metric name 'kl' is provided by causalab-metrics and by causalab-copycat: a document naming it "
        "is refused; uninstall one of them",
    ]


def _causalab_with(site: Path, *args: str) -> subprocess.CompletedProcess:
    code = ("import site, sys; site.addsitedir(sys.argv[1]); sys.argv = ['causalab', *sys.argv[2:]];"
            "from causalab_core.cli import main; main()")
    return subprocess.run([sys.executable, "-c", code, str(site), *args], capture_output=True, text=True)


BROKEN_LINE = ("plugin 'x' of causalab-x failed to load (causalab_x): ImportError: causalab-x needs a newer torch")


def test_a_plugin_that_fails_to_import_is_one_warning_line_and_the_rest_still_load(tmp_path):
    broken = PLUGIN + 'raise ImportError("causalab-x needs a newer torch")\n'
    site = _site_with(tmp_path, {"causalab-x": {"causalab_x.py": broken}})
    done = _plugins_from(site)
    assert done.returncode == 0
    assert done.stderr == f"warning: {BROKEN_LINE}; what uses none of its components goes on\n"
    assert "causalab-metrics" in {p["distribution"] for p in json.loads(done.stdout)}


def test_a_broken_plugin_stops_only_the_runs_missing_a_component_and_names_it(tmp_path, sweep_doc):
    """A document that names only installed components runs (warned); one naming a component no loaded
    plugin provides is refused, naming the broken plugin that may provide it."""
    broken = PLUGIN + 'raise ImportError("causalab-x needs a newer torch")\n'
    site = _site_with(tmp_path, {"causalab-x": {"causalab_x.py": broken}})
    done = _causalab_with(site, "validate", str(sweep_doc))
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"warning: {BROKEN_LINE}; what uses none of its components goes on\n"
    document = json.loads(sweep_doc.read_text())
    document["metrics"]["iia"]["kind"] = "x_metric"
    other = sweep_doc.with_name("other.json")
    other.write_text(json.dumps(document))
    done = _causalab_with(site, "validate", str(other))
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()[1:]
    assert line.startswith(f"DocumentError: {other}: unknown metric 'x_metric' at $.metrics.iia.kind; "
                           f"{BROKEN_LINE}, and may provide it; installed: ")


def test_help_loads_a_plugin_adding_commands_and_names_it_when_it_breaks(tmp_path):
    commands = PLUGIN + ("import typer\n\n@hookimpl\ndef causalab_commands(app):\n"
                         "    app.add_typer(typer.Typer(help='Things of x.'), name='xthings')\n")
    site = _site_with(tmp_path, {"causalab-x": {"causalab_x.py": commands}})
    code = ("import site, sys; site.addsitedir(sys.argv[1]); sys.argv = ['causalab', '--help'];"
            "from causalab_core.cli import main; main()")
    done = subprocess.run([sys.executable, "-c", code, str(site)], capture_output=True, text=True)
    assert done.returncode == 0 and "xthings" in done.stdout and "Things of x." in done.stdout
    (site / "causalab_x.py").write_text(commands.replace("name='xthings'", "name=1 / 0"))
    done = subprocess.run([sys.executable, "-c", code, str(site)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("PluginError: plugin 'x' of causalab-x failed in its causalab_commands hook: "
                           "ZeroDivisionError: division by zero\n")


def test_help_names_a_command_plugin_that_fails_to_import(tmp_path):
    broken = PLUGIN + "@hookimpl\ndef causalab_commands(app):\n    pass\n\nimport causalab_x_missing_dependency\n"
    site = _site_with(tmp_path, {"causalab-x": {"causalab_x.py": broken}})
    code = ("import site, sys; site.addsitedir(sys.argv[1]); sys.argv = ['causalab', '--help'];"
            "from causalab_core.cli import main; main()")
    done = subprocess.run([sys.executable, "-c", code, str(site)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("PluginError: plugin 'x' of causalab-x failed to load (causalab_x): "
                           "ModuleNotFoundError: No module named 'causalab_x_missing_dependency'\n")


def test_a_metric_naming_its_columns_as_one_string_is_blamed_not_the_data(write_doc, tiny_llama):
    from causalab_core.plugins.contracts import Metric, mean_over_eligible
    from causalab_testing.data import sweep_document, weekday_rows

    class OneString(Metric):
        name = "one_string"

        def columns(self, params):
            return "cf_answer"  # a str, not a tuple: read letter by letter it names columns 'c', 'f', ...

        def compute(self, params, inputs):
            return mean_over_eligible([0.0] * len(inputs.eligible), inputs.eligible)

    module = types.ModuleType("causalab_one_string")
    module.causalab_metrics = hookimpl(lambda: [OneString])
    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    doc["metrics"] = {"m": {"kind": "one_string"}}
    from causalab_core.errors import PluginError

    with pytest.raises(PluginError) as raised:  # the plugin's mistake: not a DocumentError, the user's file unnamed
        api.validate(write_doc(doc, weekday_rows(3)), registry=build_registry(extra=(module,)))
    assert str(raised.value) == ("metric 'one_string' of causalab_one_string at $.metrics.m: "
                                 "columns() returned \"'cf_answer'\", not a tuple of column names")
