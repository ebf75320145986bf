"""documents/real/README.md's circuit section against the studies its commands ran (conftest.py's ``studies``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from causalab_core import load
from causalab_toy import models
from tests.readme_sections import Section

ROOT = Path(__file__).parent.parent
STUDY = Section((ROOT / "documents" / "real" / "README.md").read_text(),
                "Circuits on a model whose circuit is known: induction_circuit*.json")
FIGURE = 0.02 + 1e-9


def known_circuit() -> set[tuple[str, str]]:
    """From the induction model's recorded facts: the previous-token heads read by the induction heads' keys
    (the three whose keys matter: a1.h3 attends least), every induction head read by the logits, the
    embeddings read by all their values."""
    facts = json.loads((models.CHECKPOINTS / "induction" / "training.json").read_text())["facts"]
    prev, induction = facts["previous_token_heads"], facts["induction_heads"]
    return ({(p, f"{i}<k>") for p in prev for i in induction[:3]} | {(i, "logits") for i in induction}
            | {("input", f"{h}<v>") for h in prev + induction})


def figure_of(cell: str) -> tuple[float, float, float]:
    """``0.68 (0.50-0.88)`` (bounds may be negative) as three numbers."""
    found = re.fullmatch(r"(-?[\d.]+) \((-?[\d.]+)-(-?[\d.]+)\)", cell)
    return float(found[1]), float(found[2]), float(found[3])


def table() -> dict[str, list[str]]:
    return {row[0] + " / " + row[1]: row for row in STUDY.tables()[0][1:]}


def circuit(studies, name) -> tuple[dict, dict]:
    run = load(studies[f"{name}.json"].out)
    return run.circuit, json.loads(run.files["faithfulness.json"])


def test_patching_acdc_and_eap_ig_recover_the_known_induction_circuit(studies):
    rows = table()
    for name, label in (("induction_circuit", "patching each edge / top 16"),
                        ("induction_circuit_acdc", "patching (ACDC) / threshold 0.5"),
                        ("induction_circuit_eap_ig", "EAP-IG, 5 steps from the clean run / top 16")):
        found, curve = circuit(studies, name)
        assert {tuple(e) for e in found["edges"]} == known_circuit(), name
        share = found["faithfulness"]
        figure, low, high = figure_of(rows[label][3])
        assert abs(share["share"] - figure) <= FIGURE and share["share"] >= 0.9
        assert abs(share["share_low"] - low) <= FIGURE and abs(share["share_high"] - high) <= FIGURE
        assert abs(curve["cpr"] - float(rows[label][4])) <= FIGURE
    assert STUDY.says("keeps 0.98 of the full model's effect")
    points = {p["edges"]: p["share"] for p in curve["curve"]}
    assert abs(points[8] - 0.27) <= FIGURE and all(abs(points[k] - 1) <= FIGURE for k in points if k >= 32)


def test_eap_from_the_clean_run_misses_the_previous_token_path(studies):
    found, curve = circuit(studies, "induction_circuit_eap")
    edges = {tuple(e) for e in found["edges"]}
    assert {(i, "logits") for i in ("a1.h0", "a1.h1", "a1.h2", "a1.h3")} <= edges
    assert not {(p, f"a1.h{i}<k>") for p in ("a0.h0", "a0.h3") for i in range(3)} & edges
    assert found["scored_by"] == "attribution" and found["faithfulness"]["share_high"] < 0.5
    row = table()["EAP, gradient on the clean run / top 16"]
    assert abs(found["faithfulness"]["share"] - figure_of(row[3])[0]) <= FIGURE
    assert abs({p["edges"]: p["share"] for p in curve["curve"]}[32] - 0.94) <= FIGURE
    corrupted, _ = circuit(studies, "induction_circuit_eap_corrupted")
    assert corrupted["size"] == 32 and corrupted["faithfulness"]["share"] >= 1 - FIGURE


def test_the_sweep_scores_every_edge_as_a_point(studies):
    """The edge scores are the sweep's points: one per edge of the graph, read by load and table as any
    sweep's, beside circuit.json and faithfulness.json in the manifest."""
    run = load(studies["induction_circuit.json"].out)
    assert len(run.summaries) == 110 and set(run.summaries["edge"]) >= {"a0.h3->a1.h2<k>", "a1.h2->logits"}
    assert {"circuit.json", "faithfulness.json"} <= set(json.loads(
        (studies["induction_circuit.json"].out / "manifest.json").read_text())["files"])
    assert list(run.faithfulness["edges"]) == [0, 1, 2, 4, 8, 16, 32, 64, 110]


IOI = Section((ROOT / "documents" / "real" / "README.md").read_text(),
              "What an IOI-style model learned: ioi_circuit*.json")


def test_the_ioi_models_facts_are_the_readmes():
    facts = json.loads((models.CHECKPOINTS / "ioi" / "training.json").read_text())["facts"]
    assert IOI.says(f"accuracy {facts['accuracy']:.2f} (ABBA {facts['accuracy_ABBA']:.2f}, BABA "
                    f"{facts['accuracy_BABA']:.2f}), and {facts['wrong_answers_that_are_the_subject']:.2f} of its wrong")
    attention = facts["attention_from_last"]
    first = [min(attention["io"][0][h], attention["s1"][0][h]) for h in range(7)]
    assert min(first) >= 0.36 - 0.005 and max(attention["s2"][0]) < 0.005
    assert max(max(attention["io"][layer]) for layer in (1, 2, 3)) <= 0.24 + 0.005
    assert min(attention["s2"][layer][h] for layer in (1, 2) for h in range(8)) >= 0.21 - 0.005
    drops = facts["accuracy_change_one_head_zeroed"]
    assert abs(drops["a0.h3"] + 0.48) <= 0.005 and sorted(drops.values())[1] >= -0.08


def test_the_ioi_curve_is_the_readmes(studies):
    rows = {row[0]: row for row in IOI.tables()[0][1:]}
    for name, label in (("ioi_circuit", "patching each edge"), ("ioi_circuit_eap", "EAP, gradient on the clean run")):
        found, curve = circuit(studies, name)
        points = {p["edges"]: p for p in curve["curve"]}
        for column, size in enumerate((128, 256, 512, 1024), start=1):
            figure, low, high = figure_of(rows[label][column])
            assert abs(points[size]["share"] - figure) <= FIGURE, (name, size)
            assert abs(points[size]["share_low"] - low) <= FIGURE and abs(points[size]["share_high"] - high) <= FIGURE
        assert abs(curve["cpr"] - float(rows[label][5])) <= FIGURE
    found, curve = circuit(studies, "ioi_circuit")
    assert {p["edges"]: p["share"] for p in curve["curve"]}[64] <= 0.02
    heads = [n for n in found["nodes"] if ".h" in n]
    assert len(heads) == 27 and sum(n.startswith("m") for n in found["nodes"]) == 4
