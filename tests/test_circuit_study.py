"""documents/real/README.md's circuit section against the studies its commands ran (conftest.py's ``studies``)."""

from __future__ import annotations

import json
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


def table() -> dict[str, list[str]]:
    return {row[0] + " / " + row[1]: row for row in STUDY.tables()[0][1:]}


def circuit(studies, name) -> tuple[dict, dict]:
    run = load(studies[f"{name}.json"].out)
    return run.circuit, json.loads(run.files["faithfulness.json"])


def test_patching_and_acdc_recover_the_known_induction_circuit(studies):
    rows = table()
    for name, label in (("induction_circuit", "patching each edge / top 16"),
                        ("induction_circuit_acdc", "patching (ACDC) / threshold 0.5")):
        found, curve = circuit(studies, name)
        assert {tuple(e) for e in found["edges"]} == known_circuit(), name
        share = found["faithfulness"]
        figure, low_high = rows[label][3].split(" (")
        low, high = (float(x) for x in low_high.rstrip(")").split("-"))
        assert abs(share["share"] - float(figure)) <= FIGURE and share["share"] >= 0.9
        assert abs(share["share_low"] - low) <= FIGURE and abs(share["share_high"] - high) <= FIGURE
        assert abs(curve["cpr"] - float(rows[label][4])) <= FIGURE
    assert STUDY.says("keeps 0.98 of the full model's effect")
    points = {p["edges"]: p["share"] for p in curve["curve"]}
    assert abs(points[8] - 0.27) <= FIGURE and all(abs(points[k] - 1) <= FIGURE for k in points if k >= 32)


def test_eap_from_the_clean_run_misses_the_previous_token_path(studies):
    found, curve = circuit(studies, "induction_circuit_eap")
    edges = {tuple(e) for e in found["edges"]}
    assert {(i, "logits") for i in ("a1.h0", "a1.h1", "a1.h2", "a1.h3")} <= edges
    assert not {("input", "a0.h0<v>"), ("input", "a0.h3<v>")} & edges
    assert found["scored_by"] == "attribution" and found["faithfulness"]["share_high"] < 0.5
    row = table()["EAP, gradient on the clean run / top 16"]
    assert abs(found["faithfulness"]["share"] - float(row[3].split(" (")[0])) <= FIGURE
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
