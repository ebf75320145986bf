"""`causalab plot` draws what a user wrote as written: names and sweep values are text, never mathtext."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from causalab_core import api
from causalab_core.results import folder as output
from causalab_testing.data import sweep_document, weekday_rows

from causalab_report.commands import commands


@pytest.mark.parametrize("axes", [1, 2], ids=["line", "heatmap"])
def test_a_name_with_dollar_signs_is_drawn_literally(tiny_llama, write_doc, tmp_path, axes):
    document = sweep_document(str(tiny_llama), layers=(0, 1), positions=(-4, -1))
    document["name"] = r"study $\frac{a$ cost $x^$"
    if axes == 1:
        document["sweep"] = {"layers": [0, 1]}
        for spec in (document["reads"]["cf_resid"], document["writes"]["patch"]):
            spec["position"] = -1
    out = tmp_path / "o"
    api.run(write_doc(document, weekday_rows(4)), out=out)
    result = CliRunner().invoke(commands(), ["plot", str(out), "--metric", "iia"])
    assert result.exit_code == 0, result.output
    png = out / "iia.png"
    assert png.read_bytes().startswith(b"\x89PNG") and "iia.png" in json.loads((out / "manifest.json").read_text())["files"]
    assert output.first_foreign(out) is None  # the plot is listed: a later --force may replace the folder
