"""The real studies' recorded tables (documents/real/README.md) match a fresh run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from causalab_core import api
from causalab_core.compiler.sweep import axis_label

ROOT = Path(__file__).parent.parent
README = (ROOT / "documents" / "real" / "README.md").read_text()


def recorded(study: str) -> dict[tuple[int, str], str]:
    section = README.split(f"## {study}")[1].split("\n## ")[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ")]
    header = [json.loads(c.strip().strip("`")) for c in lines[0].strip("|").split("|")[1:]]
    table = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        for position, cell in zip(header, cells[1:]):
            table[(int(cells[0]), axis_label(position))] = cell
    return table


def test_the_recorded_entity_table_is_what_a_fresh_run_gives(tmp_path):
    result = api.run(ROOT / "documents" / "real" / "entity_layer_sweep.json", out=tmp_path / "out")
    table = recorded("entity_layer_sweep.json")
    fresh = {}
    for point in result.plan.points:
        values = dict(point.values)
        iia = json.loads((tmp_path / "out" / point.name / "iia.json").read_text())["summary"]["mean"]
        diff = json.loads((tmp_path / "out" / point.name / "logit_diff.json").read_text())["summary"]["mean"]
        fresh[(values["layers"], axis_label(values["pos"]))] = (iia, diff)
    # Untrained forwards: the same on every machine up to float32 rounding of the
    # last bits, so one row (1/60) of IIA and 0.1 of logit difference is the spread.
    assert fresh.keys() == table.keys()
    for key, cell in table.items():
        iia, diff = float(cell.split()[0]), float(cell.split()[1].strip("()"))
        assert abs(fresh[key][0] - iia) <= 0.02 and abs(fresh[key][1] - diff) <= 0.1, (key, cell, fresh[key])


def iia_table(out: Path, result) -> dict[tuple[int, int], dict[str, float]]:
    """(layer, position) -> IIA against each variable's label."""
    table = {}
    for point in result.plan.points:
        values = dict(point.values)
        table[(values["layer"], values["pos"])] = {
            v: json.loads((out / point.name / f"iia_{v}.json").read_text())["summary"]["mean"]
            for v in ("count", "day", "answer")}
    return table


def test_the_weekdays_sweep_tells_count_day_and_answer_apart(tmp_path):
    """The claims of documents/real/README.md, each against the counterfactual that could refute it."""
    result = api.run(ROOT / "documents" / "real" / "weekdays_layer_sweep.json", out=tmp_path / "o")
    rows = [json.loads(line) for line in (tmp_path / "o" / "data.jsonl").read_text().splitlines()]
    # The data can refute: on every row the three hypotheses and the base predict four different answers.
    assert all(len({r["base_answer"], r["label_count"], r["label_day"], r["label_answer"]}) == 4 for r in rows)
    t = iia_table(tmp_path / "o", result)
    # Embeddings: the count's token carries the count, the day's token the day, and nothing else.
    assert t[(0, -7)]["count"] >= 0.95 and t[(0, -4)]["day"] >= 0.95
    assert max(t[(0, -7)]["day"], t[(0, -7)]["answer"], t[(0, -4)]["count"], t[(0, -4)]["answer"]) <= 0.05
    # Block 0 moves the day to the last token and the count to the day's token.
    assert t[(1, -1)]["day"] >= 0.9 and t[(1, -4)]["count"] >= 0.9
    assert t[(1, -1)]["answer"] <= 0.05
    # The answer is computed at the last token over blocks 1-4: partial at block 2, whole from block 5.
    assert t[(2, -1)]["answer"] <= 0.7 and all(t[(layer, -1)]["answer"] >= 0.95 for layer in (5, 6, 7))
    # Controls that can fail: after block 0 the count's token carries nothing the answer needs.
    assert all(max(t[(layer, -7)].values()) <= 0.05 for layer in range(1, 8))


@pytest.mark.parametrize("threads", [1, 2])
def test_the_das_finding_holds_with_one_and_two_threads(tmp_path, threads):
    """The answer takes two dimensions at the last token entering block 5; random rotations of the same
    ranks move nothing. Training's decimals follow the thread count and the CPU, the finding does not."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        found = {}
        for label, name, ranks in (("das", "weekdays_das.json", [1, 2, 8]), ("control", "weekdays_das_control.json", [2, 8])):
            document = json.loads((ROOT / "documents" / "real" / name).read_text())
            document["sweep"].update(rank=ranks, seed=[0])
            path = tmp_path / name
            path.write_text(json.dumps(document))
            result = api.run(path, out=tmp_path / label)
            for point in result.plan.points:
                folder = tmp_path / label / point.name
                found[(label, dict(point.values)["rank"])] = {
                    v: json.loads((folder / f"iia_{v}.json").read_text())["summary"]["mean"] for v in ("count", "day", "answer")}
            assert result.run["arithmetic"]["torch_threads"] == threads
    finally:
        torch.set_num_threads(previous)
    assert found[("das", 2)]["answer"] >= 0.9 and found[("das", 8)]["answer"] >= 0.9
    assert found[("das", 1)]["answer"] < found[("das", 2)]["answer"]
    assert all(found[("das", r)][v] <= 0.1 for r in (2, 8) for v in ("count", "day"))
    assert all(max(found[("control", r)].values()) <= 0.2 for r in (2, 8))
    assert (tmp_path / "das" / "layer=5,pos=-1,rank=2,seed=0" / "das.safetensors").is_file()


def test_the_plot_lands_in_the_output_folder(tmp_path):
    from typer.testing import CliRunner

    from causalab_core.cli import app

    api.run(ROOT / "documents" / "real" / "entity_layer_sweep.json", out=tmp_path / "o")
    result = CliRunner().invoke(app, ["plot", str(tmp_path / "o"), "--metric", "iia"])
    assert result.exit_code == 0, result.output
    png = (tmp_path / "o" / "iia.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
