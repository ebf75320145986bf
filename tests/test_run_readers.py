"""Every reader of a finished run (load, table, compare, plot, a featurizer file a document loads) trusts
only what the run's manifest vouches for; compare says when two runs are not of one experiment; tables
and plots show points in the sweep's order, with labels a person (and pandas) can use."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import causalab_core
from causalab_core import api
from causalab_core.cli import app
from causalab_core.results.compare import compare, describe
from causalab_core.errors import OutputError
from causalab_report.plot import token_labels
from causalab_testing.data import sweep_document, weekday_rows

ROOT = Path(__file__).resolve().parents[1]
POSITIONS = (-2, -10, -1)  # as strings they sort -1, -10, -2


def write(folder: Path, document: dict, rows: list[dict], name: str = "doc.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / name).write_text(json.dumps(document))
    return folder / name


@pytest.fixture(scope="module")
def base(tmp_path_factory, tiny_llama):
    """A 2-layer x 3-position sweep on 6 rows: its document, rows and run."""
    folder = tmp_path_factory.mktemp("base")
    document = sweep_document(str(tiny_llama), layers=(0, 2), positions=POSITIONS)
    rows = weekday_rows(6)
    api.run(write(folder, document, rows), out=folder / "out")
    return document, rows, folder / "out"


def invoke(*args):
    from causalab_report.commands import commands  # `causalab plot` is causalab-report's

    result = CliRunner().invoke(commands() if args[0] == "plot" else app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


# -- class 2: the manifest vouches for what is read ------------------------------------------


def _spoil(run: Path, how: str) -> Path:
    target = run / "layers=2,pos=-1" / "iia.json"
    if how == "edited":
        target.write_text(target.read_text().replace("0.", "1.", 1))
    elif how == "removed":
        target.unlink()
    elif how == "a link to the same bytes":
        (run / "elsewhere.json").write_bytes(target.read_bytes())
        target.unlink()
        target.symlink_to(run / "elsewhere.json")
    elif how == "run.json edited":
        target = run / "run.json"
        target.write_text(target.read_text().replace('"hooks"', '"nnterp"'))
    elif how == "document.json edited":
        target = run / "document.json"
        target.write_text(target.read_text().replace('"cf_answer"', '"base_answer"', 1))
    return target


@pytest.mark.parametrize("how", ["edited", "removed", "a link to the same bytes", "run.json edited",
                                 "document.json edited"])
def test_every_reader_refuses_a_changed_run_in_the_same_one_line(base, tmp_path, how):
    _, _, out = base
    run = tmp_path / "run"
    shutil.copytree(out, run)
    target = _spoil(run, how)
    what = "is missing" if how == "removed" else "changed since causalab wrote it"
    line = f"OutputError: '{target}' {what}; the run's numbers cannot be read from it\n"
    with pytest.raises(OutputError) as caught:
        causalab_core.load(run)
    assert f"OutputError: {caught.value}\n" == line
    manifest = (run / "manifest.json").read_bytes()
    for command in (["table", run], ["table", run, "--summaries"], ["compare", out, run], ["compare", run, out],
                    ["plot", run], ["plot", run, "--metric", "p_answer"]):
        assert invoke(*command) == (2, "", line), command
    assert not list(run.glob("*.png")) and (run / "manifest.json").read_bytes() == manifest  # nothing drawn


def test_files_the_manifest_does_not_list_are_never_read(base, tmp_path):
    _, _, out = base
    run = tmp_path / "run"
    shutil.copytree(out, run)
    before = causalab_core.load(run).records
    point = run / "layers=0,pos=-2"
    spoof = json.loads((point / "iia.json").read_text())
    spoof["values"] = [1.0] * len(spoof["values"])
    (point / "iia_by_hand.json").write_text(json.dumps({**spoof, "metric": "iia_by_hand"}))  # a user's own file
    shutil.copytree(point, run / "layers=9,pos=-2")  # a point the run never had
    (run / "layers=9,pos=-2" / "iia.json").write_text(json.dumps(spoof))
    assert causalab_core.load(run).records == before
    code, stdout, _ = invoke("table", run, "--summaries", "--format", "json")
    assert code == 0 and "layers=9" not in stdout and "iia_by_hand" not in stdout


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_llama):
    """A run that trained a DAS featurizer, and a document that loads the trained file."""
    folder = tmp_path_factory.mktemp("trained")
    document = sweep_document(str(tiny_llama), layers=(1,), positions=(-4,))
    document["featurizers"] = {"das": {"kind": "das", "rank": 2, "train": {
        "data": {"path": "rows.jsonl"}, "label": "cf_answer", "epochs": 1, "batch_size": 8, "lr": 0.05, "seed": 3}}}
    document["writes"]["patch"]["featurizer"] = "das"
    document["sweep"] = {}
    for spec in (document["reads"]["cf_resid"], document["writes"]["patch"]):
        spec.update(layer=1, position=-4)
    api.run(write(folder, document, weekday_rows(6), "train.json"), out=folder / "run")
    using = {**document, "featurizers": {"das": {"kind": "das", "rank": 2, "load": "loaded.safetensors"}}}
    return folder / "run" / "das.safetensors", using


@pytest.mark.parametrize("where", ["in its run, edited", "in its run, not listed", "copied out of the run"])
def test_a_featurizer_file_loaded_from_a_run_must_be_as_the_run_wrote_it(trained, tmp_path, where):
    file, using = trained
    run = tmp_path / "run"
    shutil.copytree(file.parent, run)
    data = bytearray(file.read_bytes())
    data[-1] ^= 1  # one bit of a tensor: the header (and the identity it holds) still reads as before
    if where == "in its run, edited":
        loaded = run / file.name
        loaded.write_bytes(bytes(data))
    elif where == "in its run, not listed":
        loaded = run / "mine.safetensors"
        loaded.write_bytes(file.read_bytes())
    else:
        loaded = tmp_path / "copy.safetensors"
        loaded.write_bytes(bytes(data))  # no manifest vouches for it, and none is asked: read as it is
    document = write(tmp_path / "use", {**using, "featurizers": {"das": {**using["featurizers"]["das"],
                                                                         "load": str(loaded)}}}, weekday_rows(6))
    if where == "copied out of the run":
        assert api.plan(document).featurizers()[0].state == bytes(data)
        return
    with pytest.raises(OutputError) as caught:
        api.plan(document)
    why = "changed since causalab wrote it" if where.endswith("edited") else "is not listed in the manifest.json"
    assert str(caught.value).startswith(f"'{loaded}' {why}")


def test_a_featurizer_file_holding_a_nan_is_refused_as_a_documents_number_would_be(trained, tmp_path):
    from safetensors import safe_open
    from safetensors.torch import save_file

    from causalab_core.errors import DocumentError

    file, using = trained
    with safe_open(str(file), "pt") as f:
        metadata, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    key = sorted(tensors)[0]
    tensors[key].view(-1)[5] = float("nan")
    save_file(tensors, tmp_path / "nan.safetensors", metadata=metadata)
    document = write(tmp_path / "use", {**using, "featurizers": {"das": {**using["featurizers"]["das"],
                                                                         "load": str(tmp_path / "nan.safetensors")}}},
                     weekday_rows(6))
    with pytest.raises(DocumentError) as caught:
        api.plan(document)
    assert "$.featurizers.das.load: featurizer file" in str(caught.value)
    assert f"holds nan in its tensor {key!r} at [" in str(caught.value)


# -- class 4: runs of another experiment ----------------------------------------------------


def _variant(base, tmp_path, change) -> Path:
    document, rows, _ = base
    document, rows = json.loads(json.dumps(document)), list(rows)
    document, rows = change(document, rows)
    out = tmp_path / "variant"
    api.run(write(tmp_path / "v", document, rows), out=out)
    return out


def _add_layer(d, r):
    d["sweep"]["layers"] = [*d["sweep"]["layers"], 3]
    return d, r


def _relabel(d, r):
    d["metrics"]["iia"]["label"] = "base_answer"
    return d, r


def _bfloat16(d, r):
    d["model"]["dtype"] = "bfloat16"
    return d, r


@pytest.mark.parametrize("change,first_line,differs", [
    (lambda d, r: (d, r[::-1]), "the data rows differ (both 6 rows, other rows or another order)", {"data"}),
    (lambda d, r: (d, r[:5]), "the data rows differ (6 vs 5 rows)", {"data"}),
    (_add_layer, "the documents differ at $.reads.cf_resid.layer", set()),
    (_relabel, "the documents differ at $.metrics.iia.label", {"document"}),
    (_bfloat16, "the models differ (dtype float32 vs bfloat16)", {"model"}),
], ids=["rows reversed", "a row fewer", "an extra point", "another label", "another dtype"])
def test_compare_says_first_when_runs_are_not_of_one_experiment(base, tmp_path, change, first_line, differs):
    _, _, out = base
    other = _variant(base, tmp_path, change)
    report = compare(out, other)
    assert report["same_experiment"] is False and report["identical"] is False
    found = set(report["experiment"]["differs"])
    assert differs <= found
    order = [f"layers={layer},pos={p}" for layer in (0, 2) for p in POSITIONS]
    flipped = list(report["metrics"]["iia"]["flips"])
    assert flipped == [p for p in order if p in flipped]  # named in the sweep's order, not the folders'
    text = describe(report, "A", "B").splitlines()
    assert text[0].startswith("A and B are not runs of one experiment: "), text
    if change is _add_layer:
        assert found == {"points"} and "the points differ (3 only in B: layers=3,pos=-2, layers=3,pos=-10, " \
            "layers=3,pos=-1)" in text[0]
    else:
        assert first_line in text[0]
    code, stdout, _ = invoke("compare", out, other, "--json")
    assert code == 1 and json.loads(stdout)["experiment"] == json.loads(json.dumps(report["experiment"]))
    code, stdout, _ = invoke("compare", out, other)
    assert code == 1 and stdout.splitlines()[0] == describe(report, str(out), str(other)).splitlines()[0]


def test_the_same_rows_from_another_file_are_one_experiment(base, tmp_path):
    document, rows, out = base
    moved = {**document, "data": {"path": "elsewhere/rows.jsonl"}}
    (tmp_path / "v" / "elsewhere").mkdir(parents=True)
    (tmp_path / "v" / "elsewhere" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "v" / "doc.json").write_text(json.dumps(moved))
    api.run(tmp_path / "v" / "doc.json", out=tmp_path / "variant")
    report = compare(out, tmp_path / "variant")
    assert report["same_experiment"] and report["identical"], report["experiment"]


# -- class 8: order, labels, undefined values --------------------------------------------------


def test_tables_follow_the_sweep_order_not_the_folder_names(base):
    _, _, out = base
    summaries = causalab_core.load(out).records["summaries"]
    assert [(s["layers"], s["pos"]) for s in summaries[::3]] == [(l, p) for l in (0, 2) for p in POSITIONS]
    assert [s["metric"] for s in summaries[:3]] == ["iia", "logit_diff", "p_answer"]  # the document's order
    code, stdout, _ = invoke("table", out)
    assert code == 0 and [line.split(",")[1] for line in stdout.splitlines()[1::18]] == ["-2", "-10", "-1"] * 2


@pytest.fixture(scope="module")
def entity_run(tmp_path_factory):
    """The shipped entity study (positions as objects and numbers on one axis), on 8 rows and 2 layers."""
    document = json.loads((ROOT / "documents/real/entity_layer_sweep.json").read_text())
    document["data"]["causal_model"]["rows"] = 8
    document["sweep"]["layer"] = [0, 1]
    document["sweep"]["pos"] = [document["sweep"]["pos"][0], -4, -1]
    folder = tmp_path_factory.mktemp("entity")
    (folder / "doc.json").write_text(json.dumps(document))
    api.run(folder / "doc.json", out=folder / "out")
    return folder / "out"


def test_the_readme_pivot_works_when_positions_are_objects(entity_run):
    run = causalab_core.load(entity_run)
    table = run.summaries.query("metric == 'iia_answer'").pivot_table(index="layer", columns="pos", values="mean")
    assert table.shape == (2, 3) and set(table.columns) == {"entity[-1]", "-4", "-1"}
    assert {r["pos"] for r in run.records["rows"]} == {"entity[-1]", "-4", "-1"}  # as the folders show them
    assert [p["point"] for p in run.records["summaries"][::3]] == ["layer=0,pos=entity[-1]", "layer=0,pos=-4",
                                                                   "layer=0,pos=-1", "layer=1,pos=entity[-1]",
                                                                   "layer=1,pos=-4", "layer=1,pos=-1"]


def test_plots_label_positions_with_their_tokens(entity_run, base):
    run = causalab_core.load(entity_run)
    rows = json.loads((entity_run / "layer=0,pos=entity[-1]" / "iia_answer.json").read_text())["positions"]["patch"]["rows"]
    first = rows[0]["tokens"][0]
    assert len({r["tokens"][0] for r in rows}) > 1  # the entity differs per row: the first row's, and "varies"
    assert token_labels(run, "iia_answer", run.document) == {"pos": {
        "entity[-1]": f"entity[-1] (varies: {first}, …)", "-4": "-4 (varies: second, …)", "-1": "-1 (:)"}}
    weekday = causalab_core.load(base[2])  # the same token on every row
    assert token_labels(weekday, "iia", weekday.document) == {"pos": {"-2": "-2 (A)", "-10": "-10 (what)", "-1": "-1 (:)"}}
    code, stdout, _ = invoke("plot", entity_run, "--metric", "iia_answer")
    assert code == 0 and (entity_run / "iia_answer.png").read_bytes().startswith(b"\x89PNG")


def test_a_plot_of_a_metric_with_no_defined_value_says_so(tiny_llama, tmp_path):
    document = sweep_document(str(tiny_llama), layers=(0, 1), positions=(-1,))
    document["sweep"] = {"layers": [0, 1]}
    for spec in (document["reads"]["cf_resid"], document["writes"]["patch"]):
        spec["position"] = -1
    # The counterfactual is the base prompt: both clean runs agree, so no row has a normalized effect.
    document["metrics"] = {"nld": {"kind": "normalized_logit_diff", "target": "cf_answer", "other": "base_answer"},
                           "p": {"kind": "p_answer", "answer": "cf_answer"}}
    rows = [{**r, "counterfactual": r["base"]} for r in weekday_rows(4)]
    api.run(write(tmp_path, document, rows), out=tmp_path / "out")
    assert {s["mean"] for s in causalab_core.load(tmp_path / "out").records["summaries"] if s["metric"] == "nld"} == {None}
    code, stdout, stderr = invoke("plot", tmp_path / "out")
    assert code == 0 and stdout.splitlines() == [str(tmp_path / "out" / "nld.png"), str(tmp_path / "out" / "p.png")]
    assert stderr == ("causalab: nld: no point has a defined value (no eligible row, or the metric is undefined "
                      "on every row); the plot says so\n")
    assert (tmp_path / "out" / "nld.png").stat().st_size > 0
