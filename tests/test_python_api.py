"""Experiments written and run from Python (issue #44): a document as a dict, JSON text or the schema's models,
rows from a DataFrame, results kept in memory and written later, and what a run shows of itself."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

import causalab_core as causalab
from causalab_core import CausalabError, DocumentError, OutputError

EXAMPLE = Path(__file__).parents[1] / "documents" / "examples" / "weekdays_sweep.json"
DATA = EXAMPLE.parent / "data" / "weekdays.jsonl"


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def small(document: dict) -> dict:
    """The example on two points: the tests below are about how a document is given, not about the sweep."""
    return {**document, "sweep": {"layers": [1, 3], "pos": [-4, -1]}}


@pytest.fixture(scope="module")
def on_disk(tmp_path_factory):
    """The example as a file and its folder, the reference every other way of giving it must reproduce."""
    folder = tmp_path_factory.mktemp("api")
    path = folder / "doc.json"
    path.write_text(json.dumps(small(json.loads(EXAMPLE.read_text()))))
    (folder / "data").mkdir()
    (folder / "data" / "weekdays.jsonl").write_bytes(DATA.read_bytes())
    causalab.run(path, out=folder / "out")
    return path, folder_bytes(folder / "out")


def test_a_dict_json_text_and_the_models_give_the_files_bytes(on_disk, tmp_path):
    path, expected = on_disk
    document = json.loads(path.read_text())
    built = causalab.Document.model_validate(document)
    for given in (document, json.dumps(document), built):
        run = causalab.run(given, data_root=path.parent)
        assert run.folder is None
        run.save(tmp_path / "saved")
        assert folder_bytes(tmp_path / "saved") == expected, type(given).__name__
        (tmp_path / "saved").rename(tmp_path / f"seen-{type(given).__name__}-{len(list(tmp_path.iterdir()))}")


def test_a_document_built_from_the_models_writes_out_as_a_file_that_runs_the_same(on_disk, tmp_path):
    path, expected = on_disk
    document = json.loads(path.read_text())
    built = causalab.Document(
        version="2", name=document["name"], description=document["description"],
        model=causalab.ModelSpec(key=document["model"]["key"]),
        data=causalab.DataSpec(path="data/weekdays.jsonl"),
        reads={"cf_resid": causalab.ReadSpec(input="counterfactual", layer=causalab.SweepRef(sweep="layers"),
                                             position=causalab.SweepRef(sweep="pos"))},
        writes={"patch": causalab.WriteSpec(input="base", source="cf_resid", layer=causalab.SweepRef(sweep="layers"),
                                            position=causalab.SweepRef(sweep="pos"))},
        metrics={name: causalab.MetricSpec(**spec) for name, spec in document["metrics"].items()},
        sweep=document["sweep"])
    written = path.parent / "written.json"
    written.write_text(causalab.to_json(built))
    run = causalab.run(written, out=tmp_path / "out")
    assert folder_bytes(tmp_path / "out") == expected
    assert run.out == tmp_path / "out"


def test_rows_from_a_dataframe_score_as_the_file_does(on_disk, tmp_path):
    path, expected = on_disk
    frame = pd.read_json(DATA, lines=True)
    run = causalab.run(json.loads(path.read_text()), rows=frame)
    metrics = {k: v for k, v in expected.items() if k.count("/") == 1 and not k.endswith("document.json")}
    assert metrics and {k: run.files[k] for k in metrics} == metrics
    assert json.loads(run.files["document.json"])["data"]["rows"][0] == json.loads(DATA.read_text().splitlines()[0])
    inline = causalab.DataSpec(rows=frame)  # a DataFrame inside the models too
    assert inline.rows == [json.loads(line) for line in DATA.read_text().splitlines()]


def test_errors_name_the_place_in_the_object(on_disk):
    document = json.loads(on_disk[0].read_text())
    bad = {**document, "writes": {"patch": {**document["writes"]["patch"], "layer": "x"}}}
    with pytest.raises(DocumentError, match=r"^document: \$\.writes\.patch\.layer: expected a layer number"):
        causalab.validate(bad, data_root=on_disk[0].parent)
    frame = pd.read_json(DATA, lines=True)
    frame["count"] = frame["count"].astype(object)
    frame.at[3, "count"] = {1, 2}  # a value JSON cannot hold, in a cell
    with pytest.raises(DocumentError, match=r"^document: \$\.data\.rows\[3\]\.count: a value of type set is not"):
        causalab.plan(document, rows=frame)
    with pytest.raises(DocumentError, match=r"^JSON text: invalid JSON at line 1 column 2"):
        causalab.plan("{nope")
    with pytest.raises(DocumentError, match="a document is a file path, JSON text, a dict or a causalab_core.Document, got int"):
        causalab.run(42)
    with pytest.raises(DocumentError, match=r"rows must be a list of dicts or a pandas DataFrame, got str"):
        causalab.plan(document, rows="data.jsonl")


def test_save_never_replaces_what_a_user_has(on_disk, tmp_path):
    run = causalab.run(json.loads(on_disk[0].read_text()), data_root=on_disk[0].parent)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(OutputError, match="folder exists and is not empty"):
        run.save(tmp_path / "mine")
    with pytest.raises(OutputError):
        run.save(tmp_path / "mine", force=True)  # --force replaces only a causalab output folder
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_a_run_a_loaded_run_and_a_plan_show_themselves_briefly(on_disk, tmp_path):
    document = json.loads(on_disk[0].read_text())
    plan = causalab.plan(document, data_root=on_disk[0].parent)
    run = causalab.run(document, data_root=on_disk[0].parent)
    loaded = causalab.load(run.save(tmp_path / "out"))
    for shown in (plan, run, loaded):
        assert len(repr(shown).splitlines()) <= 10 and len(repr(shown)) < 1500, repr(shown)
    assert repr(run).startswith("<causalab run 'weekdays-layer-position-sweep' (in memory)>")
    assert f"({tmp_path / 'out'})" in repr(loaded).splitlines()[0]
    assert "points 4; steps 8" in repr(plan)
    for line in repr(run).splitlines()[2:5]:  # each metric's range, as the summaries have it
        metric = line.split()[0]
        means = run.summaries.query("metric == @metric")["mean"]
        assert f"{means.min():.3g} to {means.max():.3g}" in line
    page = run._repr_html_()
    assert page.startswith("<iframe srcdoc=") and "What was done" in page
    assert "src=&quot;http" not in page and "href=&quot;http" not in page  # nothing fetched
    assert "<table>" in plan._repr_html_()
    fig = run.plot("logit_diff")
    assert type(fig).__name__ == "Figure" and fig.axes[0].get_title().endswith("logit_diff")


def test_no_progress_is_printed_outside_a_notebook(on_disk, capfd):
    causalab.run(json.loads(on_disk[0].read_text()), data_root=on_disk[0].parent)
    assert capfd.readouterr() == ("", "")


def test_positions_pivot_in_prompt_order(on_disk, tmp_path):
    document = json.loads(on_disk[0].read_text())
    document["sweep"] = {"layers": [1], "pos": [-1, 0, 9, 3]}  # written in no order; index 9 is the day's token
    run = causalab.run(document, data_root=on_disk[0].parent)
    table = run.summaries.query("metric == 'iia'").pivot(index="layers", columns="pos", values="mean")
    assert list(table.columns) == [0, 3, 9, -1]  # the last token (-1, index 12 of 13) after 9
    where = run.positions.query("name == 'patch'").groupby("pos", observed=True)["window"].first()
    assert [w[0] for w in where] == [0, 3, 9, 12]
    assert list(causalab.load(run.save(tmp_path / "out")).summaries["pos"].cat.categories) == [0, 3, 9, -1]


def test_the_tables_of_a_run_kept_in_memory_are_the_folders(on_disk, tmp_path):
    run = causalab.run(json.loads(on_disk[0].read_text()), data_root=on_disk[0].parent)
    loaded = causalab.load(run.save(tmp_path / "out"))
    for table in ("rows", "summaries", "featurizers", "positions"):
        assert getattr(run, table).equals(getattr(loaded, table)), table
    assert {"mean_low", "mean_high"} <= set(run.summaries.columns)
    assert not any(isinstance(v, float) and math.isnan(v) for v in run.summaries["mean"])


def test_an_unknown_type_in_a_dict_is_one_line(on_disk):
    document = json.loads(on_disk[0].read_text())
    document["metrics"]["iia"]["label"] = object()
    with pytest.raises(CausalabError) as caught:
        causalab.plan(document, data_root=on_disk[0].parent)
    assert "\n" not in str(caught.value) and "$.metrics.iia" in str(caught.value)


def test_save_never_replaces_what_the_run_read(on_disk, tmp_path):
    """A run kept in memory remembers what it read: saving it with force over the folder that holds its data
    is refused as `run(out=..., force=True)` refuses it, and the data stays."""
    import shutil

    path, _ = on_disk
    (tmp_path / "old").mkdir()
    causalab.run(json.loads(path.read_text()), data_root=path.parent).save(tmp_path / "old")  # a causalab folder
    shutil.copy(DATA, tmp_path / "old" / "rows.jsonl")
    # the folder now holds a file its manifest does not list (foreign: never replaced), and the run reads it
    document = {**json.loads(path.read_text()), "data": {"path": "old/rows.jsonl"}}
    run = causalab.run(document, data_root=tmp_path)
    with pytest.raises(OutputError):
        run.save(tmp_path / "old", force=True)
    assert (tmp_path / "old" / "rows.jsonl").read_bytes() == DATA.read_bytes()
    assert str(tmp_path / "old" / "rows.jsonl") in {str(p) for p in run.reads}
    with pytest.raises(OutputError, match="save: expected a folder path, got None"):
        run.save(None)


def test_what_python_hands_over_is_taken_as_a_user_means_it(on_disk, tmp_path):
    import numpy as np

    document = json.loads(on_disk[0].read_text())
    root = on_disk[0].parent
    # numpy values and arrays anywhere: the numbers they hold
    arrays = {**document, "sweep": {"layers": np.array([1, 3]), "pos": [np.int64(-4), -1]}}
    assert causalab.plan(arrays, data_root=root).to_dict() == causalab.plan(document, data_root=root).to_dict()
    # JSON text with a byte order mark and blanks in front; a list is not a document
    text = "\ufeff\n  " + json.dumps(document)
    assert len(causalab.plan(text, data_root=root).points) == 4
    with pytest.raises(DocumentError, match=r"^JSON text: \$: expected a JSON object, got list$"):
        causalab.plan("[1, 2]")
    # a file whose name starts with "{" is a file
    odd = tmp_path / "{odd}.json"
    odd.write_text(json.dumps(document))
    assert len(causalab.plan(str(odd), data_root=root).points) == 4
    # a missing cell of a DataFrame is a missing column on that row, as in a ragged list of dicts
    frame = pd.read_json(DATA, lines=True)
    frame.loc[1, "cf_answer"] = None
    with pytest.raises(CausalabError) as framed:
        causalab.plan(document, rows=frame)
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    del rows[1]["cf_answer"]
    with pytest.raises(CausalabError) as listed:
        causalab.plan(document, rows=rows)
    assert str(framed.value) == str(listed.value) and "cf_answer" in str(framed.value)
    assert "NaN" not in str(framed.value)


def test_a_model_built_wrong_in_python_is_one_line():
    with pytest.raises(DocumentError, match=r"^ModelSpec: \$\.key: Input should be a valid string \(got 3\)$"):
        causalab.ModelSpec(key=3)
    with pytest.raises(DocumentError, match=r"^DataSpec: \$: give exactly one of `rows`, `path` or `causal_model`"):
        causalab.DataSpec(rows=[{"a": "b"}], path="x.jsonl")
    with pytest.raises(DocumentError, match=r"^MetricSpec: \$\.kind: required field is missing$"):
        causalab.MetricSpec(label="x")
