"""The example metric: a hand computation, the conformance suite, a run end to end on a tiny model."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from causalab_core import api
from causalab_core.plugins.contracts import MetricInputs
from causalab_core.plugins.registry import build_registry, registry
from causalab_testing.conformance import MetricConformance
from causalab_testing.data import sweep_document, weekday_rows

# tiny_llama, tiny_gpt2, write_doc, sweep_doc (a plugin's own conftest.py at its root may say this instead)
pytest_plugins = ["causalab_testing.fixtures"]

ROOT = Path(__file__).resolve().parents[1]


def _module():
    """The plugin module: installed (``pip install -e .``), or else loaded from ``src/`` as causalab's CI does."""
    try:
        import causalab_example
    except ImportError:
        spec = importlib.util.spec_from_file_location("causalab_example", ROOT / "src/causalab_example/__init__.py")
        causalab_example = importlib.util.module_from_spec(spec)
        sys.modules["causalab_example"] = causalab_example
        spec.loader.exec_module(causalab_example)
    return causalab_example


example = _module()
Brier = example.Brier


def _installed() -> bool:
    try:
        importlib.metadata.distribution("causalab-example")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.fixture(scope="module")
def plugins():
    """The registry a run uses: the installed entry points, with this plugin's module where it is not installed."""
    return registry() if _installed() else build_registry(extra=(example,))


def test_brier_is_one_minus_the_softmax_probability_squared():
    vocab = torch.tensor([[2.0, 0.0, -1.0, 0.5], [0.0, 0.0, 0.0, 0.0], [-3.0, 4.0, 1.0, 1.0]])
    answer = [0, 2, 1]  # the answer's token id on each row
    inputs = MetricInputs(
        logits=vocab[torch.arange(3), torch.tensor(answer)].unsqueeze(1),
        logsumexp=vocab.logsumexp(-1),
        columns=("cf_answer",),
        token_ids={"cf_answer": answer},
        eligible=[True, True, False],
    )
    got = Brier().compute(Brier.Params(answer="cf_answer"), inputs)
    p = torch.softmax(vocab, -1)[torch.arange(3), torch.tensor(answer)]
    expected = [(1 - p[0].item()) ** 2, (1 - p[1].item()) ** 2]
    assert got.rows[:2] == pytest.approx(expected, rel=1e-6) and got.rows[2] is None
    assert got.summary["mean"] == pytest.approx(sum(expected) / 2, rel=1e-6)
    assert got.summary["eligible"] == 2 and got.summary["rows"] == 3


class TestConformance(MetricConformance):
    """Columns read by name, finite values, None where not eligible, unknown parameters refused, deterministic."""

    @pytest.fixture
    def metric(self):
        return Brier()

    @pytest.fixture
    def params(self):
        return Brier.Params(answer="cf_answer")


def test_a_document_scores_it_beside_the_shipped_metrics(plugins, write_doc, tiny_llama, tmp_path):
    """End to end on the tiny Llama, with the hooks engine: brier is (1 - p_answer)^2 of the same run."""
    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    doc["metrics"]["brier"] = {"kind": "example_brier", "answer": "cf_answer"}
    api.run(write_doc(doc, weekday_rows(8)), out=tmp_path / "o", registry=plugins)
    point = tmp_path / "o" / "layers=1,pos=-1"
    brier = json.loads((point / "brier.json").read_text())
    p = json.loads((point / "p_answer.json").read_text())
    assert brier["values"] == pytest.approx([(1 - v) ** 2 for v in p["values"]], rel=1e-5)
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert "example_brier" in json.dumps(run["components"])


def test_a_misspelt_parameter_is_one_line(plugins, write_doc, tiny_llama):
    from causalab_core.errors import CausalabError

    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    doc["metrics"]["brier"] = {"kind": "example_brier", "answer": "cf_answer", "answr": "base_answer"}
    with pytest.raises(CausalabError) as caught:
        api.plan(write_doc(doc, weekday_rows(4)), registry=plugins)
    assert "$.metrics.brier.answr" in str(caught.value) and "\n" not in str(caught.value)


def test_the_package_declares_its_entry_point_and_version():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["build-system"]["build-backend"] == "hatchling.build"
    assert meta["project"]["version"]
    assert meta["project"]["entry-points"]["causalab"] == {"example": "causalab_example"}
    assert meta["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["src/causalab_example"]


@pytest.mark.skipif(not _installed(), reason="causalab-example is not installed (pip install -e plugins/skeleton/causalab-example)")
def test_installed_it_is_found_through_its_entry_point():
    assert registry().provider("metric", "example_brier").distribution == "causalab-example"
