"""A finished run as a table (causalab_core.load, `causalab table`) and two runs compared (`causalab compare`)."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import causalab_core
from causalab_testing.data import sweep_document, weekday_rows

CAUSALAB = str(Path(sys.executable).parent / "causalab")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory, tiny_llama):
    folder = tmp_path_factory.mktemp("run")
    document = folder / "doc.json"
    document.write_text(json.dumps(sweep_document(str(tiny_llama), layers=(0, 2), positions=(-4, -1))))
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in weekday_rows(12)))
    done = subprocess.run([CAUSALAB, "run", str(document), "--out", str(folder / "out")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return folder / "out"


def _files(out: Path) -> dict[str, dict]:
    """Every metric file, read on its own: ``{point/metric: content}``."""
    return {f"{p.parent.name}/{p.stem}": json.loads(p.read_text()) for p in out.glob("*/*.json")
            if p.name != "document.json"}


def test_the_table_of_a_run_is_what_its_files_hold(sweep_run):
    run = causalab_core.load(sweep_run)
    files = _files(sweep_run)
    assert len(files) == 4 * 3  # points x metrics
    records = run.records["rows"]
    assert len(records) == 4 * 3 * 12
    for record in records:
        content = files[f"{record['point']}/{record['metric']}"]
        assert record["value"] == content["values"][record["row"]]
        assert record["eligible"] == content["eligible"][record["row"]]
        assert {k: record[k] for k in ("layers", "pos")} == content["point"]
        assert record["kind"] == content["kind"]
    assert len(run.records["summaries"]) == 12
    assert all(s["mean"] == files[f"{s['point']}/{s['metric']}"]["summary"]["mean"] for s in run.records["summaries"])
    frame = run.rows
    assert type(frame).__name__ == "DataFrame" and len(frame) == len(records)
    assert frame.groupby(["layers", "pos", "metric"])["value"].mean().loc[(2, -1, "iia")] == pytest.approx(
        files["layers=2,pos=-1/iia"]["summary"]["mean"])


def test_without_pandas_the_tables_are_plain_records(sweep_run, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` now fails
    run = causalab_core.load(sweep_run)
    assert isinstance(run.rows, list) and run.rows == run.records["rows"]


def test_the_table_command_prints_csv_and_json_lines(sweep_run):
    done = subprocess.run([CAUSALAB, "table", str(sweep_run)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    parsed = list(csv.DictReader(io.StringIO(done.stdout)))
    records = causalab_core.load(sweep_run).records["rows"]
    assert len(parsed) == len(records)
    assert [float(r["value"]) for r in parsed] == [r["value"] for r in records]
    summaries = causalab_core.load(sweep_run).records["summaries"]
    lines = subprocess.run([CAUSALAB, "table", str(sweep_run), "--summaries", "--format", "jsonl"],
                           capture_output=True, text=True).stdout.splitlines()
    assert [json.loads(line) for line in lines] == summaries
    whole = subprocess.run([CAUSALAB, "table", str(sweep_run), "--summaries", "--format", "json"],
                           capture_output=True, text=True).stdout
    assert json.loads(whole) == summaries  # one JSON document, as the README says


def test_a_folder_that_is_not_a_run_is_one_line(tmp_path):
    done = subprocess.run([CAUSALAB, "table", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("OutputError: ") and done.stderr.count("\n") == 1


def test_a_featurizer_folder_loads_with_its_trained_files(tmp_path):
    document = json.loads((ROOT / "documents/real/weekdays_das.json").read_text())
    document["sweep"].update(rank=[2], seed=[0])
    path = tmp_path / "das.json"
    path.write_text(json.dumps(document))
    done = subprocess.run([CAUSALAB, "run", str(path), "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    run = causalab_core.load(tmp_path / "out")
    [trained] = run.records["featurizers"]
    assert trained["point"] == "layer=5,pos=-1,rank=2,seed=0" and trained["rank"] == 2 and trained["kind"] == "das"
    assert trained["file"] == "layer=5,pos=-1,rank=2,seed=0/das.safetensors"
    assert {s["metric"] for s in run.records["summaries"]} == set(document["metrics"])

    # Trained files are byte-stable too: safetensors writes its header in hash order, causalab sorts it.
    again = subprocess.run([CAUSALAB, "run", str(path), "--out", str(tmp_path / "again")], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again" / trained["file"]).read_bytes() == (tmp_path / "out" / trained["file"]).read_bytes()


def _rewrite(path: Path, change, folder: Path) -> None:
    """Change a metric file as another run would have written it: its manifest entry follows."""
    import hashlib

    content = json.loads(path.read_text())
    change(content)
    path.write_text(json.dumps(content))
    _relist(folder, {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()})


def _relist(folder: Path, changes: dict) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    for rel, digest in changes.items():
        if digest is None:
            del manifest["files"][rel]
        else:
            manifest["files"][rel] = digest
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_compare_reports_exactly_the_differences_built_in(sweep_run, tmp_path):
    same = subprocess.run([CAUSALAB, "compare", str(sweep_run), str(sweep_run)], capture_output=True, text=True)
    assert same.returncode == 0 and same.stdout == f"{sweep_run} and {sweep_run}: identical (12 metric files)\n"

    other = tmp_path / "other"
    shutil.copytree(sweep_run, other)
    iia = json.loads((sweep_run / "layers=2,pos=-1/iia.json").read_text())["values"]
    flip = [i for i, v in enumerate(iia) if v is not None][:2]

    def flip_two(content):
        for i in flip:
            content["values"][i] = 1.0 - content["values"][i]

    _rewrite(other / "layers=2,pos=-1/iia.json", flip_two, other)
    _rewrite(other / "layers=0,pos=-4/logit_diff.json", lambda c: c["values"].__setitem__(3, c["values"][3] + 0.5), other)

    done = subprocess.run([CAUSALAB, "compare", str(sweep_run), str(other), "--json"], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["identical"] is False
    assert report["only_in_a"] == [] and report["only_in_b"] == []
    m = report["metrics"]
    assert (m["iia"]["files_differ"], m["iia"]["rows_differ"], m["iia"]["flips"]) == (1, 2, {"layers=2,pos=-1": flip})
    assert m["logit_diff"]["files_differ"] == 1 and m["logit_diff"]["rows_differ"] == 1
    assert m["logit_diff"]["largest_difference"] == pytest.approx(0.5, abs=1e-6) and m["logit_diff"]["flips"] == {}
    assert m["p_answer"]["files_differ"] == 0 and m["p_answer"]["files"] == 4

    # A metric file removed with its manifest line is still not the run its document.json describes.
    gone = tmp_path / "gone"
    shutil.copytree(sweep_run, gone)
    (gone / "layers=0,pos=-1/p_answer.json").unlink()
    _relist(gone, {"layers=0,pos=-1/p_answer.json": None})
    refused = subprocess.run([CAUSALAB, "compare", str(sweep_run), str(gone)], capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "p_answer.json' is missing (1 metric file of the run's document.json)" in refused.stderr

    text = subprocess.run([CAUSALAB, "compare", str(sweep_run), str(other)], capture_output=True, text=True).stdout
    assert f"2 IIA rows flipped (0-based data rows): layers=2,pos=-1: rows {flip[0]}, {flip[1]}" in text


def test_a_run_changed_since_causalab_wrote_it_is_refused_in_one_line(sweep_run, tmp_path):
    edited = tmp_path / "edited"
    shutil.copytree(sweep_run, edited)
    target = edited / "layers=2,pos=-1/iia.json"
    target.write_text(target.read_text().replace("1.0", "0.0", 1))
    (edited / "layers=0,pos=-4/p_answer.json").unlink()
    for command in (["table", str(edited)], ["compare", str(sweep_run), str(edited)]):
        done = subprocess.run([CAUSALAB, *command], capture_output=True, text=True)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr == f"OutputError: '{edited}/layers=0,pos=-4/p_answer.json' is missing; the run's numbers cannot be read from it\n"


def test_a_sweep_axis_named_like_a_column_keeps_its_values(tiny_llama, write_doc, tmp_path):
    document = sweep_document(str(tiny_llama), layers=(1,), positions=(-1,))
    document["sweep"] = {"value": [1, 2], "metric": [-1]}
    for spec in (*document["reads"].values(), *document["writes"].values()):
        spec["layer"], spec["position"] = {"sweep": "value"}, {"sweep": "metric"}
    causalab_core.run(write_doc(document, weekday_rows(4)), out=tmp_path / "o")
    rows = causalab_core.load(tmp_path / "o").records["rows"]
    assert {(r["sweep_value"], r["sweep_metric"]) for r in rows} == {(1, -1), (2, -1)}
    assert {r["metric"] for r in rows} == {"iia", "logit_diff", "p_answer"}


def test_a_point_folder_renamed_with_its_manifest_is_not_read_as_the_run(sweep_run, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(sweep_run, moved)
    (moved / "layers=0,pos=-1").rename(moved / "layers=0,pos=-9")
    manifest = json.loads((moved / "manifest.json").read_text())
    manifest["files"] = {rel.replace("layers=0,pos=-1/", "layers=0,pos=-9/"): d for rel, d in manifest["files"].items()}
    (moved / "manifest.json").write_text(json.dumps(manifest))
    for command in (["table", str(moved)], ["plot", str(moved)], ["compare", str(sweep_run), str(moved)]):
        done = subprocess.run([CAUSALAB, *command], capture_output=True, text=True)
        assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, (command, done.stderr)
        assert "layers=0,pos=-9" in done.stderr and "not a point of the run's document.json" in done.stderr
