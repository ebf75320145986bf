"""Every summary's mean carries its 95% interval over rows: a seeded percentile bootstrap, checked against
SciPy's, the same on any thread count, and shown where a user reads a run (table, compare, plot)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from scipy import stats
from typer.testing import CliRunner

from causalab_core import api, load
from causalab_core.cli import app
from causalab_core.results.intervals import bootstrap, with_interval
from causalab_testing.data import sweep_document, weekday_rows


@pytest.mark.parametrize("kind", ["binary", "continuous"])
def test_the_interval_is_scipys_percentile_bootstrap(kind):
    rng = random.Random(1)
    values = [float(rng.random() < 0.4) if kind == "binary" else rng.gauss(2.0, 3.0) for _ in range(60)]
    low, high = bootstrap(values)
    theirs = stats.bootstrap((np.array(values),), np.mean, confidence_level=0.95, n_resamples=20000,
                             method="percentile", random_state=np.random.default_rng(0)).confidence_interval
    # Two finite bootstraps of one sample: their bounds agree to a tenth of the standard error or so, and
    # a mean of 0/1 values moves in steps of 1/rows.
    tolerance = 0.15 * np.std(values) / np.sqrt(len(values)) + (1 / len(values) if kind == "binary" else 0)
    assert abs(low - theirs.low) <= tolerance and abs(high - theirs.high) <= tolerance
    assert low < np.mean(values) < high


def test_rows_not_scored_are_left_out_and_edge_cases_are_plain():
    values = [1.0, 0.0, None, float("nan"), 1.0, 1.0]
    assert bootstrap(values) == bootstrap([1.0, 0.0, 1.0, 1.0])
    assert bootstrap([0.5]) == (0.5, 0.5) and bootstrap([1.0] * 9) == (1.0, 1.0)
    assert all(b != b for b in bootstrap([None, float("nan")]))
    # A summary whose mean is not the rows' mean (another statistic) gets no interval.
    assert "mean_low" not in with_interval({"mean": 0.9}, [0.0, 1.0])
    assert list(with_interval({"mean": 0.5, "eligible": 2}, [0.0, 1.0])) == ["mean", "mean_low", "mean_high",
                                                                              "eligible"]


def test_the_interval_does_not_depend_on_the_thread_count():
    values = [random.Random(3).gauss(0, 1) for _ in range(500)]
    before = torch.get_num_threads()
    try:
        found = set()
        for threads in (1, 2):
            torch.set_num_threads(threads)
            found.add(bootstrap(values))
    finally:
        torch.set_num_threads(before)
    assert len(found) == 1


def test_a_run_shows_its_intervals_in_files_table_compare_and_plot(write_doc, tiny_llama, tmp_path):
    doc = sweep_document(str(tiny_llama), layers=[0, 3], positions=[-1])
    path = write_doc(doc, weekday_rows(40, seed=2))
    api.run(path, out=tmp_path / "a")
    content = json.loads((tmp_path / "a" / "layers=0,pos=-1" / "iia.json").read_text())
    summary = content["summary"]
    assert summary["mean_low"] <= summary["mean"] <= summary["mean_high"]
    assert content["interval"]["method"] == "percentile bootstrap over the scored rows"
    assert content["interval"]["level"] == 0.95
    summaries = load(tmp_path / "a").records["summaries"]
    assert all({"mean_low", "mean_high"} <= set(s) for s in summaries)
    table = CliRunner().invoke(app, ["table", str(tmp_path / "a"), "--summaries"])
    assert table.exit_code == 0 and "mean,mean_low,mean_high" in table.output.splitlines()[0]

    # Half the rows: the means move, and compare says whether beyond the intervals.
    doc["data"] = {"path": "half.jsonl"}
    (path.parent / "half.jsonl").write_text("".join(json.dumps(r) + "\n" for r in weekday_rows(40, seed=2)[:20]))
    api.run(write_doc(doc, name="half.json"), out=tmp_path / "b")
    said = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert "the mean differs at" in said.output and "95% interval" in said.output, said.output

    from causalab_report.commands import commands  # `causalab plot` is causalab-report's

    plotted = CliRunner().invoke(commands(), ["plot", str(tmp_path / "a")])
    assert plotted.exit_code == 0, plotted.output
