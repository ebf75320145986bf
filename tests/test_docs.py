"""What the docs show works: the example study, and the plugin written in CONTRIBUTING.md."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path

import pytest

from causalab_core import api
from causalab_core.plugins.registry import build_registry
from causalab_testing.data import sweep_document, weekday_rows

ROOT = Path(__file__).parent.parent


def test_the_quick_start_example_runs_and_writes_every_point(tmp_path):
    result = api.run(ROOT / "documents" / "examples" / "weekdays_sweep.json", out=tmp_path / "example")
    assert len(result.plan.points) == 8 and result.plan.rows == 48
    assert (tmp_path / "example" / "layers=3,pos=-1" / "p_answer.json").is_file()


def test_the_readme_example_document_is_the_shipped_one():
    shipped = json.loads((ROOT / "documents" / "examples" / "weekdays_sweep.json").read_text())
    text = (ROOT / "documents" / "README.md").read_text()
    shown = json.loads(re.search(r"```json\n(\{\n  \"version\".*?)\n```", text, re.S).group(1))
    shipped.pop("description")
    assert shown == shipped


def test_the_contributing_metric_plugin_works(write_doc, tiny_llama, tmp_path):
    text = (ROOT / "CONTRIBUTING.md").read_text()
    source = re.search(r"```python\n(# src/causalab_brier/__init__.py\n.*?)```", text, re.S).group(1)
    module = types.ModuleType("causalab_brier")
    exec(compile(source, "CONTRIBUTING.md", "exec"), module.__dict__)
    registry = build_registry(extra=(module,))
    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    doc["metrics"] = {"brier": {"kind": "brier", "answer": "cf_answer"}, **doc["metrics"]}
    result = api.run(write_doc(doc, weekday_rows(6)), out=tmp_path / "o", registry=registry)
    brier = json.loads((tmp_path / "o" / "layers=1,pos=-1" / "brier.json").read_text())
    p = json.loads((tmp_path / "o" / "layers=1,pos=-1" / "p_answer.json").read_text())
    # Both files hold 9 significant digits: compare within them, not rounded (a rounding edge flips a digit).
    assert brier["values"] == pytest.approx([(1 - v) ** 2 for v in p["values"]], abs=1e-7)
    assert result.metrics


SHIPPED = sorted((ROOT / "documents").glob("*/*.json"))


@pytest.mark.parametrize("document", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_document_plans_and_prints_its_plan(document):
    """`causalab plan` as text (every step kind: a DAS document's fit steps too) and as JSON."""
    from typer.testing import CliRunner

    from causalab_core.cli import app

    for args in (["plan", str(document)], ["plan", str(document), "--json"]):
        done = CliRunner().invoke(app, args)
        assert done.exit_code == 0, (args, done.output[-2000:])
    fits = any(step.kind == "fit" for step in api.plan(document).steps())
    assert ("\n  fit " in CliRunner().invoke(app, ["plan", str(document)]).output) == fits


def test_a_rank_counts_the_tokens_strictly_above_and_ties_share_the_better_rank():
    """CONTRIBUTING's `ranks` view: int32 [rows, columns], read with `inputs.rank(name)`."""
    import torch

    from causalab_core.plugins.contracts import MetricInputs
    from causalab_core.runtime.scores import answer_scores

    last = torch.tensor([[1.0, 5.0, 5.0, 3.0, 0.0]])
    found = answer_scores(last, [(1, 2, 3, 4)], views=("answers", "ranks"))
    ranks = found["answer_ranks"]
    assert ranks.dtype == torch.int32 and ranks.tolist() == [[0, 0, 2, 4]]
    inputs = MetricInputs(logits=found["answer_logits"], logsumexp=found["logsumexp"], columns=("a", "b", "c", "d"),
                          token_ids={}, eligible=[True], ranks=ranks)
    assert inputs.rank("c").tolist() == [2]


def test_a_metric_has_no_gradient_unless_it_says_so(write_doc, tiny_llama):
    """CONTRIBUTING: `Metric.differentiable` defaults to False, and an estimate of such a metric is refused."""
    from causalab_core.errors import PlanError
    from causalab_core.plugins.contracts import Metric

    assert Metric.differentiable is False
    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    doc["metrics"] = {"iia": doc["metrics"]["iia"]}
    doc["estimate"] = {"method": "attribution"}
    with pytest.raises(PlanError, match=r"\$\.metrics\.iia: metric kind 'iia' has no gradient"):
        api.plan(write_doc(doc, weekday_rows(4)))
