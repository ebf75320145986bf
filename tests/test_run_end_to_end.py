"""The acceptance path: a sweep document run from the command line writes the reference's folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from causalab_core import api

CLI = [sys.executable, "-m", "causalab_core"]


def cli(*args, cwd=None):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd)


def metric_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.json")) if p.name not in ("run.json", "manifest.json")}


def test_sweep_writes_every_point_and_twice_gives_the_same_bytes(sweep_doc, tmp_path):
    first, second = tmp_path / "out1", tmp_path / "out2"
    done = cli("run", sweep_doc, "--out", first)
    assert done.returncode == 0, done.stderr
    assert cli("run", sweep_doc, "--out", second, "--batch-size", "42").returncode == 0

    points = [f"layers={layer},pos={pos}" for layer in range(4) for pos in (-4, -1)]
    expected = {"document.json", "run.json", "manifest.json"} | {
        f"{p}/{f}" for p in points for f in ("document.json", "iia.json", "logit_diff.json", "p_answer.json")
    }
    assert {str(p.relative_to(first)) for p in first.rglob("*") if p.is_file()} == expected
    assert metric_files(first) == metric_files(second)
    # The CLI prints every file it wrote.
    assert set(done.stdout.split()) == {str(first / f) for f in expected}


def test_point_documents_have_the_sweep_values_filled_in(sweep_doc, tmp_path):
    assert cli("run", sweep_doc, "--out", tmp_path / "o").returncode == 0
    point = json.loads((tmp_path / "o" / "layers=2,pos=-4" / "document.json").read_text())
    assert point["reads"]["cf_resid"]["layer"] == 2
    assert point["writes"]["patch"]["position"] == -4
    assert point["sweep"] == {}
    top = json.loads((tmp_path / "o" / "document.json").read_text())
    assert top["sweep"] == {"layers": [0, 1, 2, 3], "pos": [-4, -1]}
    assert top["inputs"] == ["base", "counterfactual"]  # defaults filled in


def test_metric_file_holds_values_positions_eligibility_and_summary(sweep_doc, tmp_path):
    result = api.run(sweep_doc, out=tmp_path / "o")
    iia = json.loads((tmp_path / "o" / "layers=0,pos=-4" / "iia.json").read_text())
    assert iia["point"] == {"layers": 0, "pos": -4}
    assert len(iia["values"]) == 42 and set(iia["values"]) <= {0.0, 1.0}
    assert iia["summary"]["mean"] == pytest.approx(sum(iia["values"]) / 42, rel=1e-8)
    assert iia["eligible"] == [True] * 42
    rows = result.plan.points[0].positions[0]
    # The day token sits 4 from the end of "Q : what day is N days after DAY ? A :".
    cf_days = [json.loads(line)["cf_day"] for line in (sweep_doc.parent / "rows.jsonl").read_text().splitlines()]
    assert [r["tokens"] for r in iia["positions"]["cf_resid"]["rows"]] == [[d] for d in cf_days]
    assert rows.windows[0] == (len(result.plan.prompts["counterfactual"][0]) - 4,)


def test_run_json_records_engine_versions_and_digests(sweep_doc, tmp_path):
    api.run(sweep_doc, out=tmp_path / "o", batch_size=8)
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert list(run) == ["engine", "remote", "batch_size", "loaded_dtype", "position_reuse", "versions", "causalab",
                         "components", "arithmetic", "data"]
    # Which rows were scored, so `causalab compare` can tell other data from the same: their count and digest.
    lines = (sweep_doc.parent / "rows.jsonl").read_text().splitlines()
    assert run["data"]["rows"] == len(lines) and len(run["data"]["sha256"]) == 64
    # Positions -4 and -1 of 13-token rows: the planner's pick, and why.
    assert run["position_reuse"]["used"] is True and run["position_reuse"]["by"] == "planner"
    assert run["position_reuse"]["why"].startswith("it saves ")
    assert set(run["arithmetic"]) == {"torch_threads", "cpu_capability", "deterministic_algorithms"}
    assert run["loaded_dtype"] == "torch.float32"  # read off the loaded weights (the document asks float32)
    assert (run["engine"], run["remote"], run["batch_size"]) == ("hooks", False, 8)
    assert set(run["versions"]) == {"torch", "transformers", "nnsight", "nnterp", "pydantic"}
    assert run["versions"]["torch"].startswith("2.")
    dists = run["causalab"]["distributions"]
    assert {"causalab-core", "causalab-hooks", "causalab-metrics", "causalab-positions"} <= set(dists)
    assert all(len(d["digest"]) == 64 for d in dists.values())
    # Whose code made each number: the distribution (and version) behind every component the run used.
    assert run["components"] == {
        "engine": {"hooks": f"causalab-hooks {dists['causalab-hooks']['version']}"},
        "position": {"index": f"causalab-positions {dists['causalab-positions']['version']}"},
        "metric": {k: f"causalab-metrics {dists['causalab-metrics']['version']}" for k in ("iia", "logit_diff", "p_answer")},
    }


def test_an_existing_output_folder_is_kept_unless_forced(sweep_doc, tmp_path):
    out = tmp_path / "o"
    assert cli("run", sweep_doc, "--out", out).returncode == 0
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    refused = cli("run", sweep_doc, "--out", out)
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0 and "--force" in refused.stderr
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before
    assert cli("run", sweep_doc, "--out", out, "--force").returncode == 0
    assert (out / "run.json").exists() and {p for p in out.rglob("*")} == set(before)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


def test_plan_prints_without_loading_weights(sweep_doc, tiny_llama, tmp_path):
    # A copy of the checkpoint without its weights file still plans: the compiler needs none.
    shell = tmp_path / "shell"
    shell.mkdir()
    for f in tiny_llama.iterdir():
        if f.suffix != ".safetensors":
            (shell / f.name).write_bytes(f.read_bytes())
    doc = json.loads(sweep_doc.read_text())
    doc["model"]["key"] = str(shell)
    sweep_doc.write_text(json.dumps(doc))
    done = cli("plan", sweep_doc)
    assert done.returncode == 0, done.stderr
    assert "layers=3,pos=-1" in done.stdout and "model.layers.3 output" in done.stdout
    as_json = json.loads(cli("plan", sweep_doc, "--json").stdout)
    assert len(as_json["points"]) == 8 and as_json["rows"] == 42
