"""Bad input: one line naming what and where, the right exit code, no traceback, no output."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest
from typer.testing import CliRunner

from causalab_core.cli import app
from causalab_testing.data import sweep_document, weekday_rows


@pytest.fixture
def base_doc(tiny_llama):
    return sweep_document(str(tiny_llama))


def run_cli(*args):
    from causalab_report.commands import commands  # `causalab plot` is causalab-report's

    return CliRunner().invoke(commands() if args[0] == "plot" else app, [str(a) for a in args])


def nested(depth):
    value = 1
    for _ in range(depth):
        value = [value]
    return value


def edited(doc, edit):
    doc = copy.deepcopy(doc)
    edit(doc)
    return doc


def _set(path, value):
    def edit(doc):
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


def _delete(path):
    def edit(doc):
        node = doc
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return edit


CASES = [
    # (id, edit, exit code, what the message must say)
    ("wrong type", _set(["reads", "cf_resid", "layer"], "two"), 2, ["$.reads.cf_resid.layer", "layer number", "'two'"]),
    ("negative layer", _set(["writes", "patch", "layer"], -1), 2, ["$.writes.patch.layer"]),
    ("unknown key", _set(["reads", "cf_resid", "colour"], "red"), 2, ["$.reads.cf_resid.colour", "unknown key"]),
    ("unknown top key", _set(["sweeps"], {}), 2, ["$.sweeps", "unknown key"]),
    ("bad site", _set(["reads", "cf_resid", "site"], "residual"), 2, ["$.reads.cf_resid.site", "'residual'"]),
    ("missing model", _delete(["model"]), 2, ["$.model", "required"]),
    ("wrong version", _set(["version"], "1"), 2, ["$.version"]),
    ("unknown metric", _set(["metrics", "iia", "kind"], "accuracy"), 2,
     ["$.metrics.iia.kind", "'accuracy'", "installed: answer_rank, iia, kl, logit_diff, logprob, normalized_logit_diff, p_answer"]),
    ("bad metric params", _set(["metrics", "iia", "label"], "nope"), 2, ["$.metrics.iia", "label 'nope'"]),
    ("unknown metric param", _set(["metrics", "logit_diff", "colour"], 1), 2, ["$.metrics.logit_diff.colour", "unknown key"]),
    ("unknown read", _set(["writes", "patch", "source"], "ghost"), 2, ["$.writes.patch.source", "'ghost'"]),
    ("unknown input", _set(["reads", "cf_resid", "input"], "source"), 2, ["$.reads.cf_resid.input", "'source'"]),
    ("unknown axis", _set(["reads", "cf_resid", "layer"], {"sweep": "depth"}), 2, ["$.reads.cf_resid.layer", "'depth'"]),
    ("bad position", _set(["sweep", "pos"], [-1, {"idx": 2}]), 2, ["$.sweep.pos[1]", "$.reads.cf_resid.position", "{'idx': 2}"]),
    ("layer out of range", _set(["sweep", "layers"], [0, 9]), 1,
     ["PlanError", "$.reads.cf_resid.layer", "layer 9", "4 layers", "layers=9,pos=-4"]),
    ("position out of range", _set(["sweep", "pos"], [-40]), 1,
     ["PlanError", "write 'patch'", "position_out_of_range", "layers=0,pos=-40"]),
    ("missing answer column", _set(["metrics", "p_answer", "answer"], "gold"), 1,
     ["PlanError", "$.metrics.p_answer", "no column 'gold'"]),
    ("missing input column", _set(["inputs"], ["base", "counterfactual", "source"]), 1, ["PlanError", "no column 'source'"]),
    ("missing data file", _set(["data"], {"path": "nowhere.jsonl"}), 2, ["$.data.path", "nowhere.jsonl"]),
    ("both data forms", _set(["data"], {"path": "rows.jsonl", "rows": []}), 2, ["$.data", "exactly one"]),
    ("unknown model", _set(["model", "key"], "no-such-org/no-such-model"), 1, ["$.model.key", "no-such-org/no-such-model"]),
    # Swept values are checked like literal ones, with the path of the value.
    ("swept layer as text", _set(["sweep", "layers"], ["3"]), 2, ["$.sweep.layers[0]", "$.reads.cf_resid.layer", "'3'"]),
    ("swept negative layer", _set(["sweep", "layers"], [-1]), 2, ["$.sweep.layers[0]", "layer number", "-1"]),
    ("swept infinite layer", _set(["sweep", "layers"], [0, float("inf")]), 2,
     ["$.sweep.layers[1]", "Infinity is not a finite number"]),
    ("swept sweep reference", _set(["sweep", "pos"], [{"sweep": "pos"}]), 2, ["$.sweep.pos[0]", "position"]),
    ("repeated sweep value", _set(["sweep", "pos"], [-1, -4, -1]), 2, ["$.sweep.pos[2]", "repeats $.sweep.pos[0]"]),
    ("das rank above width", lambda d: (d.__setitem__("featurizers", {"f": {"kind": "das", "rank": 33}}),
                                        d["writes"]["patch"].__setitem__("featurizer", "f")),
     1, ["PlanError", "doc.json", "$.featurizers.f", "`rank` 33 exceeds the site width 32"]),
    ("swept das rank of zero", lambda d: (d.__setitem__("featurizers", {"f": {"kind": "das", "rank": {"sweep": "r"}}}),
                                          d["sweep"].__setitem__("r", [2, 0]), d["writes"]["patch"].__setitem__("featurizer", "f")),
     2, ["doc.json: $.sweep.r[1] (used by $.featurizers.f.rank): ", "greater than or equal to 1"]),
    ("swept das rank given as a string",
     lambda d: (d.__setitem__("featurizers", {"f": {"kind": "das", "rank": {"sweep": "r"}}}),
                d["sweep"].__setitem__("r", ["3", 3]), d["writes"]["patch"].__setitem__("featurizer", "f")),
     2, ["$.sweep.r[0] (used by $.featurizers.f.rank): Input should be a valid integer"]),
    ("intervention number given as a string", lambda d: d["writes"]["patch"].__setitem__(
        "intervention", {"kind": "noise", "scale": "0.5"}), 2, ["$.writes.patch.intervention.scale",
                                                                "Input should be a valid number"]),
    ("intervention number given as true", lambda d: d["writes"]["patch"].__setitem__(
        "intervention", {"kind": "noise", "scale": True}), 2, ["$.writes.patch.intervention.scale",
                                                               "Input should be a valid number"]),
    ("metric string given as a number", lambda d: d["metrics"]["iia"].__setitem__("label", 5), 2,
     ["$.metrics.iia.label", "Input should be a valid string"]),
    ("no inline rows", _set(["data"], {"rows": []}), 2, ["$.data.rows", "no rows"]),
    ("prompt is a number", _set(["data"], {"rows": [{"base": 5, "counterfactual": "x"}]}), 1,
     ["PlanError", "doc.json", "row $.data.rows[0], column 'base'", "a prompt is a string or a list of chat messages"]),
    ("huge wrong-typed name", _set(["name"], ["x" * 10_000_000]), 2, ["$.name", "(10,000,004 characters)"]),
    ("a metric named like causalab's own file", lambda d: d["metrics"].__setitem__("run", d["metrics"].pop("iia")), 2,
     ["$.metrics.run", "causalab writes run.json itself"]),
    ("a very long metric name", lambda d: d["metrics"].__setitem__("m" * 300, d["metrics"].pop("iia")), 2,
     ["$.metrics", "at most 64 characters"]),
]


@pytest.mark.parametrize("edit,code,needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_document_is_one_line_and_nothing_is_written(edit, code, needles, base_doc, write_doc, tmp_path):
    path = write_doc(edited(base_doc, edit), weekday_rows(6))
    out = tmp_path / "out"
    result = run_cli("run", path, "--out", out)
    assert result.exit_code == code, result.output
    message = result.stderr.strip()
    assert "\n" not in message and "Traceback" not in message
    for needle in needles:
        assert needle in message
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


def test_bad_json_names_the_file_line_and_column(tmp_path):
    path = tmp_path / "doc.json"
    path.write_text('{"version": "2",\n "model": {"key": "x"}\n "data": {}}')
    result = run_cli("validate", path)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"DocumentError: {path}: invalid JSON at line 3 column 2: Expecting ',' delimiter"


def test_a_missing_document_file_is_named(tmp_path):
    result = run_cli("plan", tmp_path / "absent.json")
    assert result.exit_code == 2 and "absent.json: no such file" in result.stderr


def test_a_bad_data_line_is_named(base_doc, write_doc, tmp_path):
    path = write_doc(base_doc, weekday_rows(3))
    with open(tmp_path / "rows.jsonl", "a") as f:
        f.write("{not json}\n")
    result = run_cli("validate", path)
    assert result.exit_code == 2 and "rows.jsonl:4: invalid JSON" in result.stderr


def test_an_unknown_engine_is_refused_before_weights_load(base_doc, write_doc, tmp_path):
    result = run_cli("run", write_doc(base_doc, weekday_rows(6)), "--out", tmp_path / "o", "--engine", "warp")
    assert result.exit_code == 2
    assert "unknown engine 'warp' at --engine; installed: hooks" in result.stderr


def test_a_multi_token_answer_is_refused_with_its_row(base_doc, write_doc):
    rows = weekday_rows(4)
    rows[2]["cf_answer"] = " Monday Tuesday"
    result = run_cli("plan", write_doc(base_doc, rows))
    assert result.exit_code == 1
    # Rows are named by the line of their JSONL file: the third row is line 3.
    assert "row rows.jsonl:3, column 'cf_answer'" in result.stderr and "2 tokens" in result.stderr


def test_verbose_adds_the_traceback(base_doc, write_doc):
    path = write_doc(edited(base_doc, _set(["sweep", "layers"], [7])), weekday_rows(3))
    result = run_cli("plan", path, "--verbose")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and result.stderr.strip().splitlines()[-1].startswith("PlanError:")


def test_validate_accepts_the_shipped_example():
    from pathlib import Path

    example = Path(__file__).parent.parent / "documents" / "examples" / "weekdays_sweep.json"
    result = run_cli("validate", example)
    assert result.exit_code == 0 and "valid (48 rows, 8 points)" in result.stdout
    assert json.loads(example.read_text())["version"] == "2"


def test_plan_errors_name_the_document_file(base_doc, write_doc):
    path = write_doc(edited(base_doc, _set(["sweep", "layers"], [9])), weekday_rows(3))
    result = run_cli("plan", path)
    assert result.exit_code == 1 and result.stderr.startswith(f"PlanError: {path}: $.reads.cf_resid.layer")


def test_validate_refuses_what_plan_refuses(base_doc, write_doc):
    for edit in (_set(["sweep", "layers"], [9]), _set(["metrics", "p_answer", "answer"], "gold")):
        path = write_doc(edited(base_doc, edit), weekday_rows(3))
        planned, validated = run_cli("plan", path), run_cli("validate", path)
        assert planned.exit_code == validated.exit_code == 1
        assert planned.stderr == validated.stderr


@pytest.mark.parametrize("depth", [150, 5_000, 100_000])
def test_very_deep_json_is_one_line(base_doc, tmp_path, depth):
    path = tmp_path / "doc.json"
    text = json.dumps({**base_doc, "description": "DEEP"})
    path.write_text(text.replace('"DEEP"', "[" * depth + "]" * depth))
    result = run_cli("validate", path)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "nested deeper than 100 levels" in result.stderr
    assert result.stderr.startswith(f"DocumentError: {path}: ")


@pytest.mark.parametrize("bad", ["not utf-8", "a folder", "deep row"])
def test_bad_data_files_are_one_line_naming_the_file(base_doc, write_doc, tmp_path, bad):
    path = write_doc(base_doc, weekday_rows(3))
    data = tmp_path / "rows.jsonl"
    if bad == "not utf-8":
        data.write_bytes(data.read_bytes() + b'{"base": "caf\xe9"}\n')
        needle = "rows.jsonl:4: not UTF-8 text"
    elif bad == "a folder":
        data.unlink()
        data.mkdir()
        needle = "$.data.path: data file"
    else:
        data.write_text(data.read_text() + json.dumps({"base": nested(120)}) + "\n")
        needle = "rows.jsonl:4: $.base"
    result = run_cli("validate", path)
    assert result.exit_code == 2 and needle in result.stderr and result.stderr.count("\n") == 1, result.stderr
    if bad == "a folder":
        assert "is a folder" in result.stderr


def test_a_model_key_that_is_not_a_checkpoint_is_one_line(base_doc, write_doc, tmp_path):
    (tmp_path / "empty-model").mkdir()
    path = write_doc(edited(base_doc, _set(["model", "key"], "empty-model")), weekday_rows(3))
    result = run_cli("plan", path)
    assert result.exit_code == 1 and "$.model.key" in result.stderr and "not a model checkpoint" in result.stderr


def test_a_relative_model_key_is_relative_to_the_document(base_doc, write_doc, tiny_llama, tmp_path, monkeypatch):
    import shutil

    shutil.copytree(tiny_llama, tmp_path / "models" / "mine")
    path = write_doc(edited(base_doc, _set(["model", "key"], "models/mine")), weekday_rows(3))
    monkeypatch.chdir(tmp_path.parent)  # not the document's folder
    result = run_cli("plan", path)
    assert result.exit_code == 0, result.stderr


def _listed_run(folder, files: dict[str, bytes]):
    """A folder whose manifest vouches for ``files``: what causalab would have written, however odd."""
    from causalab_core.results import folder as output

    output.write_folder(folder, {"run.json": b"{}\n", **files}, force=False)
    return folder


def test_plot_of_a_corrupt_run_is_one_line(tmp_path):
    out = _listed_run(tmp_path / "o", {"document.json": b'{"metrics": '})
    result = run_cli("plot", out)
    assert result.exit_code == 2 and result.stderr.startswith(f"OutputError: '{out / 'document.json'}': ")
    assert result.stderr.count("\n") == 1
    (out / "manifest.json").unlink()  # no manifest: nothing in the folder is the run's
    result = run_cli("plot", out)
    assert result.exit_code == 2 and result.stderr == f"OutputError: '{out}' is not a causalab output folder " \
        "(no manifest.json of causalab's)\n"


def test_the_python_api_works_any_number_of_times(base_doc, write_doc):
    import causalab_core
    import causalab_core.ir  # noqa: F401  (the plan IR is imported; the function must stay a function)

    path = write_doc(base_doc, weekday_rows(3))
    first, second = causalab_core.plan(path), causalab_core.plan(path)
    assert first.to_dict() == second.to_dict()
    assert causalab_core.validate(path).rows == causalab_core.validate(path).rows


def test_jsonl_rows_may_hold_unicode_line_separators(base_doc, write_doc, tmp_path):
    rows = weekday_rows(3)
    rows[1]["note"] = "a\u2028b\u2029c\x85d"
    path = write_doc(base_doc, rows)
    data = tmp_path / "rows.jsonl"
    data.write_text(data.read_text().replace("\\u2028", "\u2028").replace("\\u2029", "\u2029").replace("\\u0085", "\x85"),
                    encoding="utf-8")
    assert "\u2028" in data.read_text(encoding="utf-8")
    result = run_cli("validate", path)
    assert result.exit_code == 0, result.stderr


def test_a_huge_integer_literal_is_one_line(base_doc, tmp_path):
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(base_doc).replace('"layers": [0, 1, 2, 3]', '"layers": [' + "9" * 5000 + "]"))
    result = run_cli("validate", path)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and len(result.stderr) < 600


def test_plot_of_a_metric_file_with_a_bad_summary_is_one_line(sweep_doc, tmp_path):
    from causalab_core import api

    api.run(sweep_doc, out=tmp_path / "o")
    bad = tmp_path / "o" / "layers=0,pos=-4" / "iia.json"
    content = json.loads(bad.read_text())
    content["summary"] = {"mean": "x"}
    bad.write_text(json.dumps(content))
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())  # listed as if causalab wrote it
    manifest["files"]["layers=0,pos=-4/iia.json"] = hashlib.sha256(bad.read_bytes()).hexdigest()
    (tmp_path / "o" / "manifest.json").write_text(json.dumps(manifest))
    result = run_cli("plot", tmp_path / "o", "--metric", "iia")
    assert result.exit_code == 2 and "not a metric file causalab wrote" in result.stderr


def _header(header: bytes) -> bytes:
    return len(header).to_bytes(8, "little") + header


@pytest.mark.parametrize("content,needle", [
    (_header(b'{"__metadata__":[1]}'), "its __metadata__ is not an object of strings"),
    (_header(b'{"__metadata__":{"kind":1}}'), "its __metadata__ is not an object of strings"),
    (_header(b"[" * 100_000 + b"]" * 100_000), "its header is nested too deep"),
    (_header(b"[1]"), "its header is not a JSON object"),
    (_header(b"{not json"), "its header is not JSON"),
    (_header(b'{"a": "\xff"}'), "its header is not JSON"),
    (b"\xff" * 8 + b"{}", "no header of the length"),
    (b"abc", "no header of the length"),
    (None, "no such file"),
    ("folder", "is a folder, not a file"),
])
@pytest.mark.parametrize("swept", [False, True], ids=["literal", "swept"])
def test_a_bad_featurizer_file_is_one_line_naming_the_document_and_the_file(base_doc, write_doc, tmp_path,
                                                                             content, needle, swept):
    target = tmp_path / "das.safetensors"
    if content == "folder":
        target.mkdir()
    elif content is not None:
        target.write_bytes(content)

    def edit(doc):
        doc["featurizers"] = {"f": {"kind": "das", "rank": 2, "load": {"sweep": "files"} if swept else "das.safetensors"}}
        doc["writes"]["patch"]["featurizer"] = "f"
        if swept:
            doc["sweep"]["files"] = ["das.safetensors"]

    path = write_doc(edited(base_doc, edit), weekday_rows(3))
    where = "$.sweep.files[0] (used by $.featurizers.f.load)" if swept else "$.featurizers.f.load"
    for command in ("validate", "plan"):
        result = run_cli(command, path)
        assert result.exit_code == 2, result.output
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        assert result.stderr.startswith(f"DocumentError: {path}: {where}: featurizer file '{target}'"), result.stderr
        assert needle in result.stderr


@pytest.mark.parametrize("sweep", [{"layers": 5}, {"layers": None}, {"layers": []}, ["layers"], "x" * 10_000])
def test_plot_of_a_run_whose_sweep_is_not_lists_is_one_line(tmp_path, sweep):
    out = _listed_run(tmp_path / "o", {"document.json": json.dumps({"metrics": {"iia": {}}, "sweep": sweep}).encode()})
    result = run_cli("plot", out)
    assert result.exit_code == 2 and result.stderr.startswith(f"OutputError: {out / 'document.json'}: $.sweep")
    assert result.stderr.count("\n") == 1 and len(result.stderr) < 600


def _das(load):
    def edit(doc):
        doc["featurizers"] = {"f": {"kind": "das", "rank": 2, "load": load}}
        doc["writes"]["patch"]["featurizer"] = "f"
    return edit


M = 1_000_000
HUGE = [
    ("unknown key", lambda d: d.__setitem__("k" * M, 1), "$.kkkk"),
    ("unknown nested key", _set(["reads", "cf_resid", "z" * M], 1), "$.reads.cf_resid.zzzz"),
    ("data path", _set(["data"], {"path": "p" * 100_000}), "$.data.path"),
    ("data path of folders", _set(["data"], {"path": "p/" * 50_000}), "$.data.path"),
    ("swept position object", _set(["sweep", "pos"], [{"x": "y" * M}]), "$.sweep.pos[0]"),
    ("metric label", _set(["metrics", "iia", "label"], "l" * M), "must be one of the choices"),
    ("read name", lambda d: d["reads"].__setitem__("r" * M, d["reads"]["cf_resid"]), "$.reads.rrrr"),
    ("many inputs", lambda d: (d.__setitem__("inputs", ["base", "counterfactual"] + [f"i{i}" for i in range(100_000)]),
                               d["reads"]["cf_resid"].__setitem__("input", "nope")), "is not one of the inputs"),
    ("featurizer file", _das("f" * 100_000), "$.featurizers.f.load"),
    ("swept layer", _set(["sweep", "layers"], ["x" * M]), "$.sweep.layers[0]"),
    ("answer column", _set(["metrics", "p_answer", "answer"], "g" * M), "has no column"),
]


@pytest.mark.parametrize("edit,needle", [c[1:] for c in HUGE], ids=[c[0] for c in HUGE])
def test_huge_values_are_echoed_short(base_doc, write_doc, edit, needle):
    path = write_doc(edited(base_doc, edit), weekday_rows(3))
    result = run_cli("validate", path)
    assert result.exit_code in (1, 2), result.output
    message = result.stderr
    assert message.count("\n") == 1 and len(message) < 600, (len(message), message[:300])
    assert needle in message and "characters)" in message and str(path) in message


def test_an_engine_options_model_validator_error_names_no_empty_key(base_doc, write_doc, tmp_path):
    """A model validator's error has no location: `--option: ...`, not `--option ?` or an empty key."""
    import types

    from pydantic import BaseModel, ConfigDict, model_validator

    from causalab_core import api, hookimpl
    from causalab_core.errors import EngineError
    from causalab_core.plugins.registry import build_registry
    from causalab_hooks.engine import HooksEngine

    class PairedOptions(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")
        fast: bool = False
        exact: bool = True

        @model_validator(mode="after")
        def _not_both(self):
            if self.fast and self.exact:
                raise ValueError("fast and exact cannot both be true")
            return self

    class Paired(HooksEngine):
        name = "paired"
        Options = PairedOptions

    module = types.ModuleType("causalab_paired")
    module.causalab_engines = hookimpl(lambda: [Paired])
    registry = build_registry(extra=(module,))
    path = write_doc(base_doc, weekday_rows(4))
    with pytest.raises(EngineError) as raised:
        api.run(path, engine="paired", options={"fast": True}, out=tmp_path / "o", registry=registry)
    assert raised.value.one_line() == ("EngineError: --option: fast and exact cannot both be true for engine 'paired' "
                                       "(its options: fast, exact)")
    assert not (tmp_path / "o").exists()


def test_model_validator_errors_of_plugin_parameters_name_the_object_not_an_empty_key(base_doc, write_doc):
    """A metric's or featurizer's parameters refused by a model validator (no field location): the error is at
    the metric or featurizer itself, `$.metrics.NAME: ...`, never `$.metrics.NAME.: ...`."""
    import types

    from pydantic import BaseModel, ConfigDict, model_validator

    from causalab_core import api, hookimpl
    from causalab_core.plugins.contracts import Featurizer, Metric
    from causalab_core.errors import DocumentError, PlanError
    from causalab_core.plugins.registry import build_registry

    class RangeParams(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")
        low: int = 0
        high: int = 1

        @model_validator(mode="after")
        def _ordered(self):
            if self.low >= self.high:
                raise ValueError("low must be below high")
            return self

    class Ranged(Metric):
        name = "ranged"
        Params = RangeParams

        def columns(self, params):
            return ("cf_answer",)

    class Banded(Featurizer):
        name = "banded"
        Params = RangeParams

    module = types.ModuleType("causalab_ranged")
    module.causalab_metrics = hookimpl(lambda: [Ranged])
    module.causalab_featurizers = hookimpl(lambda: [Banded])
    registry = build_registry(extra=(module,))
    doc = copy.deepcopy(base_doc)
    doc["metrics"]["r"] = {"kind": "ranged", "low": 3, "high": 2}
    path = write_doc(doc, weekday_rows(4))
    with pytest.raises((DocumentError, PlanError)) as raised:
        api.plan(path, registry=registry)
    assert raised.value.one_line().endswith("$.metrics.r: low must be below high"), raised.value.one_line()
    doc = copy.deepcopy(base_doc)
    doc["featurizers"] = {"b": {"kind": "banded", "low": 5, "high": 5}}
    doc["writes"]["patch"]["featurizer"] = "b"
    path = write_doc(doc, weekday_rows(4), name="f.json")
    with pytest.raises((DocumentError, PlanError)) as raised:
        api.plan(path, registry=registry)
    assert raised.value.one_line().endswith("$.featurizers.b: low must be below high"), raised.value.one_line()


def _trained(lr):
    def edit(doc):
        doc["featurizers"] = {"f": {"kind": "das", "rank": 2, "train": {"data": {"path": "rows.jsonl"},
                                                                          "label": "cf_answer", "lr": lr}}}
        doc["writes"]["patch"]["featurizer"] = "f"
    return edit


def _noise(scale):
    def edit(doc):
        doc["writes"]["patch"].pop("source")
        doc["writes"]["patch"]["intervention"] = {"kind": "noise", "scale": scale}
    return edit


@pytest.mark.parametrize("edit,where,shown", [
    (_trained(float("inf")), "$.featurizers.f.train.lr", "Infinity"),      # the issue's case: trained, then crashed
    (_trained(float("nan")), "$.featurizers.f.train.lr", "NaN"),
    (_trained("HUGE"), "$.featurizers.f.train.lr", "Infinity"),           # 1e999: too large for a float
    (_noise(float("inf")), "$.writes.patch.intervention.scale", "Infinity"),  # a plugin's parameter (extra key)
    (_noise({"sweep": "scales"}), "$.sweep.scales[1]", "-Infinity"),
], ids=["lr Infinity", "lr NaN", "lr 1e999", "noise scale", "swept value"])
def test_a_number_that_is_not_finite_is_refused_before_any_work(edit, where, shown, base_doc, tmp_path):
    doc = edited(base_doc, edit)
    if "scales" in json.dumps(doc):
        doc["sweep"]["scales"] = [1.0, -float("inf")]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in weekday_rows(6)))
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc, indent=1).replace('"HUGE"', "1e999"))
    for command in (["validate", path], ["run", path, "--out", tmp_path / "out"]):
        result = run_cli(*command)
        assert result.exit_code == 2, result.output
        assert result.stderr == f"DocumentError: {path}: {where}: {shown} is not a finite number (NaN, Infinity and " \
                                "numbers too large for a float mean nothing here)\n"
    assert not (tmp_path / "out").exists()


def test_a_document_built_in_python_holds_no_float_that_is_not_finite():
    from causalab_core.document.schema import TrainSpec
    from causalab_core.errors import DocumentError

    with pytest.raises(DocumentError, match=r"^TrainSpec: \$\.lr: Input should be a finite number"):
        TrainSpec(data={"path": "rows.jsonl"}, label="cf_answer", lr=float("inf"))


def test_data_past_the_row_limit_is_refused_before_a_row_is_parsed(tmp_path):
    """docs/guides.md, "Data at scale": a document holds at most MAX_ROWS rows, however given, refused in one line."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    from causalab_core.document.schema import MAX_ROWS

    doc = json.loads((Path(__file__).parent.parent / "documents/examples/weekdays_sweep.json").read_text())
    doc["data"] = {"path": "rows.jsonl"}
    (tmp_path / "rows.jsonl").write_text("{}\n" * (MAX_ROWS + 1))  # not even rows: the count comes first
    (tmp_path / "doc.json").write_text(json.dumps(doc))
    causalab = str(Path(sys.executable).parent / "causalab")
    started = time.monotonic()
    done = subprocess.run([causalab, "validate", str(tmp_path / "doc.json")], capture_output=True, text=True)
    assert done.returncode == 2 and time.monotonic() - started < 60
    assert done.stderr.splitlines() == [
        f"DocumentError: {tmp_path / 'doc.json'}: $.data.path: data file {str(tmp_path / 'rows.jsonl')!r}: holds "
        f"more than {MAX_ROWS:,} rows, the most a document may hold (a run keeps each row in memory); split it into "
        "documents of at most that"]
    doc["data"] = {"rows": [{}] * (MAX_ROWS + 1)}
    (tmp_path / "inline.json").write_text(json.dumps(doc))
    done = subprocess.run([causalab, "validate", str(tmp_path / "inline.json")], capture_output=True, text=True)
    assert done.returncode == 2 and "$.data.rows" in done.stderr and f"at most {MAX_ROWS}" in done.stderr
    assert done.stderr.count("\n") == 1
