"""Runs the report tests read (one fresh run of each document, shared by the session) and the browser."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from causalab_core import api
from causalab_core.results import added

ROOT = Path(__file__).parents[3]
SWEEP = ROOT / "documents" / "real" / "weekdays_layer_sweep.json"
PLANTED = ("layer=3,pos=-4", "iia_count")
"""The point and metric whose file the compare test's run B changes: one row's IIA flipped from 0 to 1."""
SHOTS: list[str] = []
"""Every screenshot the browser tests saved, listed at the end of the session."""


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> dict[str, Any]:
    """``sweep``: the shipped layer x position sweep (24 points, 60 rows, three IIA metrics); ``line``: the
    same at position -4 only (one axis, 8 points); ``cube``: noise at 2 layers x 2 positions x 2 scales
    (three axes); ``signed``: a logit difference over 4 layers x 2 positions (negative and positive);
    ``nudged``: a copy of ``sweep`` with one value moved by 1e-8; ``planted``: a copy of ``sweep`` with one row flipped
    (``row``, at ``at``: ``PLANTED``); ``compared``: another copy of ``sweep``, for the page comparing it with ``planted``."""
    folder = tmp_path_factory.mktemp("report-runs")
    api.run(SWEEP, out=folder / "sweep", engine="hooks")
    line = json.loads(SWEEP.read_text())
    line["name"] = "weekdays-layer-line"
    for part in ("reads", "writes"):
        for spec in line[part].values():
            spec["position"] = -4
    line["sweep"] = {"layer": line["sweep"]["layer"]}
    (folder / "line.json").write_text(json.dumps(line))
    api.run(folder / "line.json", out=folder / "line", engine="hooks")
    cube = {**json.loads(SWEEP.read_text()), "name": "weekdays-noise-cube",  # three axes: noise of two scales
            "description": "Noise at the residual stream entering blocks 0 and 1, at the day and the last token."}
    del cube["reads"]
    cube["writes"] = {"noise": {"input": "base", "layer": {"sweep": "layer"}, "site": "block_input",
                                "position": {"sweep": "pos"}, "intervention": {"kind": "noise", "scale": {"sweep": "scale"}}}}
    cube["metrics"] = {"p_base": {"kind": "p_answer", "answer": "base_answer", "input": "base"}}
    cube["sweep"] = {"layer": [0, 1], "pos": [-4, -1], "scale": [1, 8]}
    (folder / "cube.json").write_text(json.dumps(cube))
    api.run(folder / "cube.json", out=folder / "cube", engine="hooks")
    signed = {**json.loads(SWEEP.read_text()), "name": "weekdays-logit-difference"}
    signed["metrics"] = {"ld": {"kind": "logit_diff", "target": "label_answer", "other": "base_answer"}}
    signed["sweep"] = {"layer": [0, 3, 5, 7], "pos": [-4, -1]}
    (folder / "signed.json").write_text(json.dumps(signed))
    api.run(folder / "signed.json", out=folder / "signed", engine="hooks")
    shutil.copytree(folder / "sweep", folder / "nudged")  # one value moved by 1e-8: below --compare's tolerance
    nudged = json.loads((folder / "nudged" / "layer=0,pos=-7/iia_count.json").read_text())
    nudged["values"][0] += 1e-8
    added.add_file(folder / "nudged", "layer=0,pos=-7/iia_count.json", (json.dumps(nudged, indent=1) + "\n").encode())
    shutil.copytree(folder / "sweep", folder / "planted")
    shutil.copytree(folder / "sweep", folder / "compared")  # where the compare page is written
    point, metric = PLANTED
    rel = f"{point}/{metric}.json"
    content = json.loads((folder / "planted" / rel).read_text())
    row = content["values"].index(0.0)
    content["values"][row] = 1.0
    scored = [v for v in content["values"] if v is not None]
    content["summary"]["mean"] = float(format(sum(scored) / len(scored), ".9g"))
    added.add_file(folder / "planted", rel, (json.dumps(content, indent=1) + "\n").encode())
    return {"sweep": folder / "sweep", "line": folder / "line", "cube": folder / "cube", "planted": folder / "planted",
            "signed": folder / "signed", "nudged": folder / "nudged",
            "row": row, "at": PLANTED,
            "compared": folder / "compared"}


@pytest.fixture(scope="session")
def shoot(tmp_path_factory):
    """``shoot(browser, name)``: save what the browser shows as ``<name>.png`` under pytest's tmp folder."""
    folder = tmp_path_factory.mktemp("report-screenshots")

    def save(browser, name: str) -> Path:
        path = folder / f"{name}.png"
        assert browser.save_screenshot(str(path)), path
        SHOTS.append(str(path))
        print(f"screenshot: {path}")
        return path

    return save


def pytest_terminal_summary(terminalreporter):
    if SHOTS:
        terminalreporter.write_line("report screenshots (what the browser showed):")
        for path in SHOTS:
            terminalreporter.write_line(f"  {path}")
