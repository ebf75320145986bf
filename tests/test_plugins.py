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

from causalab_core import hookimpl, hookspecs
from causalab_core.cli import app
from causalab_core.errors import PluginError
from causalab_core.plugins import build_registry


def test_plugins_lists_the_shipped_plugins_with_versions_hooks_and_digests():
    result = CliRunner().invoke(app, ["plugins"])
    assert result.exit_code == 0
    listing = {p["distribution"]: p for p in json.loads(result.stdout)}
    assert listing["causalab-hooks"]["provides"] == {"engine": ["hooks"]}
    assert listing["causalab-metrics"]["provides"] == {"metric": ["iia", "logit_diff", "p_answer"]}
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


def test_a_duplicate_name_names_both_distributions():
    plugin = _inline_plugin("imposter", "causalab-imposter", "iia")
    with pytest.raises(PluginError, match="metric name 'iia' is provided twice: by causalab-metrics and by causalab-imposter"):
        build_registry(extra=(plugin,))


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
    from causalab_core.provenance import source_digest

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
    from causalab_core.contracts import Featurizer

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

    with pytest.raises(EngineError, match=r"--option allow_skew: unknown option for engine 'hooks' \(its options: optimize\)"):
        api.run(sweep_doc, out=tmp_path / "o", options={"allow_skew": True})
    plain = api.run(sweep_doc, out=tmp_path / "plain", options={"optimize": False})
    reused = api.run(sweep_doc, out=tmp_path / "reused")
    assert [m.content for m in plain.metrics] == [m.content for m in reused.metrics]
    assert not (tmp_path / "o").exists()


def test_a_plugin_adds_commands_and_may_not_take_a_name_already_used(monkeypatch):
    import typer

    from causalab_core import cli
    from causalab_core.errors import PluginError
    from causalab_core.plugins import registry

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
