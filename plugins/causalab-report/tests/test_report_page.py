"""`causalab report` writes one self-contained page into the run's folder, listed in its manifest, that
holds the run's numbers as its files have them; what the page cannot show is said, never guessed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from causalab_core import load
from causalab_core.results import folder as output
from causalab_core.results.manifest import sha256_of
from causalab_core.results.table import metric_files

from causalab_report import page
from causalab_report.page import render, write_report

ROOT = Path(__file__).parents[3]
CAUSALAB = str(Path(sys.prefix) / "bin" / "causalab")


def payload(html: str) -> dict:
    (data,) = re.findall(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    return json.loads(data)


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text of each script."""

    def __init__(self):
        super().__init__()
        self.tags, self.scripts, self._in = [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in = []

    def handle_data(self, data):
        if self._in is not None:
            self._in.append(data)

    def handle_endtag(self, tag):
        if tag == "script" and self._in is not None:
            self.scripts.append("".join(self._in))
            self._in = None


def parsed(html: str) -> Tags:
    tags = Tags()
    tags.feed(html)
    return tags


@pytest.fixture(scope="module")
def written(runs):
    """``causalab report`` on the sweep, as a user runs it: the command line, in a fresh process."""
    done = subprocess.run([CAUSALAB, "report", str(runs["sweep"])], capture_output=True, text=True, timeout=300)
    return done, runs["sweep"] / "report.html"


def test_the_report_is_one_file_listed_in_the_manifest(written, runs):
    done, path = written
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(path) and done.stderr == ""
    manifest = json.loads((runs["sweep"] / "manifest.json").read_text())
    assert manifest["files"]["report.html"] == sha256_of(path.read_bytes()) and "pending" not in manifest
    assert output.first_foreign(runs["sweep"]) is None  # a later run --force may still replace the folder
    assert load(runs["sweep"]).files["report.html"] == path.read_bytes()


def test_the_page_fetches_nothing(written):
    html = written[1].read_text()
    tags = parsed(html)
    # Nothing to load: no element names a source or a stylesheet; the script and the style are inline.
    assert [(t, a) for t, a in tags.tags if {"src", "href", "srcset", "data"} & set(a)] == []
    assert [t for t, _ in tags.tags if t in ("link", "img", "iframe", "object", "embed", "base")] == []
    assert [t for t, _ in tags.tags].count("script") == 2 and [t for t, _ in tags.tags].count("style") == 1
    assert "http" not in html and "url(" not in html and "@import" not in html  # no address anywhere
    assert len(html.encode()) < 200_000  # 24 points x 60 rows x 3 metrics, with every row's prompts


def test_the_page_holds_the_runs_numbers_as_its_files_have_them(written, runs):
    data = payload(written[1].read_text())
    run = load(runs["sweep"])
    assert data["axes"] == ["layer", "pos"] and len(data["points"]) == 24 and data["rows"] == 60
    assert [m["name"] for m in data["metrics"]] == ["iia_count", "iia_day", "iia_answer"]
    for rel in metric_files(runs["sweep"], run.files):
        content = json.loads(run.files[rel])
        p = [q["name"] for q in data["points"]].index(rel.rpartition("/")[0])
        assert data["summary"][content["metric"]][p] == content["summary"]
        assert data["values"][content["metric"]][p] == content["values"]
        # each read's and write's record: the windows and tokens of every row
        for name, record in content["positions"].items():
            (mine,) = [data["records"][i] for i in data["at_point"][p] if data["records"][i]["name"] == name]
            assert mine["windows"] == [r["window"] for r in record["rows"]]
            assert mine["tokens"] == [r["tokens"] for r in record["rows"]]
    # The axis labels carry the token a position lands on, as the metric files' records have it.
    assert data["ticks"]["pos"] == ["-7 (varies: 11, …)", "-4 (varies: Thursday, …)", "-1 (:)"]
    # Each row's prompts, tokenized as the run did: a window indexes the token its record names.
    rows = [json.loads(line) for line in run.files["data.jsonl"].decode().splitlines()]
    assert data["data"] == rows and data["prompts_note"] is None and data["data_note"] is None
    assert "".join(data["prompts"]["base"][0]) == "<s>" + rows[0]["base"].replace(" ", "")  # a word-level tokenizer
    assert data["prompts"]["base"][0][9] == "Thursday" == rows[0]["day"]
    assert data["metrics"][0]["columns"] == ["base_answer", "label_count", "label_day", "label_answer"]


def test_provenance_and_warnings_are_at_the_top(written):
    html = written[1].read_text()
    head = html.split('<main id="app">')[0]
    for shown in ("engine</th><td", ">hooks<", "torch 2.13.0+cpu", "causalab-toy/weekdays@09424f3bbcf8 float32",
                  "60 rows (causal model weekdays), sha256 d705c638bad8"):
        assert shown in head, shown
    run = {"engine": "ndif", "remote": True, "served_dtype": "torch.bfloat16", "skew": {"nnsight": ["0.8.1", "0.8.2"]},
           "dtype_mismatch": "the server serves bfloat16, the document asks for float32",
           "data": {"labels_agree": {"label_answer = label_count+day": 1.0, "base_answer = label_day": 0.2}}}
    said = page.warnings(run)
    assert said == ["served dtype differs from the document's: the server serves bfloat16, the document asks for float32",
                    "allowed version skew: nnsight 0.8.1 here, 0.8.2 on the server",
                    "the rows cannot tell label_answer = label_count+day apart (they agree on every row): no finding "
                    "may choose between them"]


def test_text_from_a_document_cannot_end_the_pages_script(written):
    data = payload(written[1].read_text())
    data["title"] = data["description"] = "</script><script>alert(1)</script><!--"
    data["data"][0]["base"] = "a </script> b"
    html = render(data, "")
    tags = parsed(html)
    assert [t for t, _ in tags.tags].count("script") == 2
    assert payload(html) == data


def test_a_run_whose_rows_are_in_a_data_file(tmp_path, runs):
    """The example document reads data/weekdays.jsonl: the run does not hold the rows, so the page says
    where they are; `--data` shows them, and a file with other rows is refused in one line."""
    from causalab_core import api

    doc = ROOT / "documents" / "examples" / "weekdays_sweep.json"
    out = tmp_path / "example"
    api.run(doc, out=out, engine="hooks")
    _, notes = write_report(out)
    assert notes == ["the rows are in the document's data file data/weekdays.jsonl, not in the run; "
                     "`causalab report --data FILE` shows them"]
    shown = payload((out / "report.html").read_text())
    assert shown["data"] is None and shown["prompts"] is None
    _, notes = write_report(out, data_file=doc.parent / "data" / "weekdays.jsonl")
    shown = payload((out / "report.html").read_text())
    assert notes == [] and len(shown["data"]) == 48 and len(shown["prompts"]["counterfactual"]) == 48
    other = tmp_path / "other.jsonl"
    other.write_text("\n".join((doc.parent / "data" / "weekdays.jsonl").read_text().splitlines()[1:]))
    done = subprocess.run([CAUSALAB, "report", str(out), "--data", str(other)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"OutputError: '{other}': not the rows this run scored (their sha256 differs "
                                  "from the one run.json records")


def test_without_the_models_tokenizer_the_page_shows_each_window_and_says_why(runs, monkeypatch, tmp_path):
    from causalab_report import prompts

    def missing(document):
        raise OSError("no tokenizer.json")

    monkeypatch.setattr(prompts, "_tokenizer", missing)
    folder = tmp_path / "line"
    import shutil

    shutil.copytree(runs["line"], folder)
    _, notes = write_report(folder)
    assert notes == [f"the {what} tokens are not shown (the model's tokenizer is not on this machine: "
                     "OSError: no tokenizer.json)" for what in ("prompts'", "predicted")]
    shown = payload((folder / "report.html").read_text())
    assert shown["prompts"] is None and len(shown["records"]) == 2  # the read's and the write's windows
    assert shown["predicted"] is None


def test_compare_lists_the_planted_difference(runs):
    path, _ = write_report(runs["compared"], compare_with=runs["planted"])
    data = payload(path.read_text())
    point, metric = runs["at"]
    p = [q["name"] for q in data["points"]].index(point)
    assert data["compare"]["differs"] == {metric: {str(p): [runs["row"]]}}
    assert data["compare"]["flips"] == {metric: {str(p): [runs["row"]]}}
    assert data["compare"]["values"][metric][str(p)][runs["row"]] == 1.0
    assert data["values"][metric][p][runs["row"]] == 0.0
    assert "1 IIA rows flipped (0-based data rows): layer=3,pos=-4: rows" in data["compare"]["line"]
    html = path.read_text()
    assert html.count('<div class="prov" data-side=') == 2  # both runs' provenance, side by side


def test_report_out_writes_a_new_file_and_refuses_what_it_must_not_touch(runs, tmp_path):
    import os

    from typer.testing import CliRunner

    from causalab_report.commands import commands

    signed = runs["signed"]
    untouched = {p: p.read_bytes() for p in sorted(signed.rglob("*")) if p.is_file()}

    def report(*args):
        return CliRunner().invoke(commands(), ["report", str(signed), *args])

    page = tmp_path / "page.html"
    done = report("--out", str(page))
    assert done.exit_code == 0 and done.stdout.strip() == str(page)
    assert "What was done" in page.read_text()
    umask = os.umask(0)
    os.umask(umask)
    assert page.stat().st_mode & 0o777 == 0o666 & ~umask  # as any file the user writes
    before = page.read_bytes()
    for args, said in (
        (["--out", str(page)], "exists; name a new file"),
        (["--out", str(tmp_path / "no" / "page.html")], "no folder"),
        (["--out", str(runs["signed"] / "mine.html")], "inside a run's folder"),
        (["--tolerance", "0.1"], "--tolerance applies to --compare"),
        (["--compare", str(runs["sweep"]), "--tolerance", "inf"], "--tolerance must be a finite number"),
    ):
        done = report(*args)
        assert done.exit_code != 0 and said in done.output and len(done.output.strip().splitlines()) == 1, done.output
    assert page.read_bytes() == before
    assert {p: p.read_bytes() for p in sorted(signed.rglob("*")) if p.is_file()} == untouched  # the run as it was


def test_a_figure_names_the_axes_it_cannot_show(runs):
    figure = load(runs["cube"]).plot("p_base")
    assert figure.axes[0].get_title() == "weekdays-noise-cube: p_base (at scale = 1)"
    assert load(runs["signed"]).plot().axes[0].get_title() == "weekdays-logit-difference: ld"
