"""Anchored positions through the whole pipeline: refusals before weights, skipped rows, ragged windows."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from causalab_core import api
from causalab_core.cli import app
from causalab_testing.data import sweep_document

ROOT = Path(__file__).parent.parent

NAMES = ["Alice", "Bob", "Mallory Heidi", "Carol Dave", "Erin"]


def entity_rows(n: int = 8) -> list[dict]:
    """Rows whose entity is spelled by a different number of tokens from row to row."""
    rows = []
    for i in range(n):
        name, other = NAMES[i % len(NAMES)], NAMES[(i + 2) % len(NAMES)]
        rows.append({
            "base": f"the key is with {name} . who has the key ?",
            "counterfactual": f"the key is with {name} . who has the box ?",
            "base_answer": " the", "cf_answer": " a", "entity": name, "other": other,
        })
    return rows


def entity_doc(model: Path, position: dict) -> dict:
    doc = sweep_document(str(model), layers=[1], positions=[-1])
    doc.pop("sweep")
    doc["metrics"] = {"logit_diff": doc["metrics"]["logit_diff"]}
    for spec in (*doc["reads"].values(), *doc["writes"].values()):
        spec["layer"], spec["position"] = 1, position
    return doc


def test_ragged_windows_come_back_the_same_from_both_engines(write_doc, tiny_gpt2, tmp_path):
    path = write_doc(entity_doc(tiny_gpt2, {"variable": "entity"}), entity_rows())
    hooks = api.run(path, out=tmp_path / "hooks", engine="hooks", batch_size=3)
    api.run(path, out=tmp_path / "nnterp", engine="nnterp", batch_size=3)
    widths = {len(w) for w in hooks.plan.points[0].positions[0].windows}
    assert len(widths) > 1, "the entity must take different numbers of tokens on different rows"
    diff = subprocess.run(["diff", "-r", "-x", "run.json", "-x", "manifest.json", tmp_path / "hooks", tmp_path / "nnterp"], capture_output=True)
    assert diff.returncode == 0
    record = json.loads((tmp_path / "hooks" / "logit_diff.json").read_text())["positions"]["patch"]["rows"]
    for row, got in zip(entity_rows(), record):
        assert "".join(got["tokens"]).strip() == row["entity"]


def test_a_write_with_nothing_to_write_is_refused_before_weights_load(write_doc, tiny_llama, tmp_path):
    rows = entity_rows(5)
    rows[1]["entity"] = "Grace"           # not in the prompt
    rows[3]["base"] = "Bob and Bob . who has the key ?"
    rows[3]["entity"] = "Bob"             # twice in the base prompt
    rows[3]["counterfactual"] = "Bob and Erin . who has the box ?"
    doc = entity_doc(tiny_llama, {"index": -1, "scope": {"variable": "entity"}})
    path = write_doc(doc, rows)
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    message = result.stderr.strip()
    # Rows are named by their line in the JSONL file: the second and fourth rows.
    assert message.startswith(f"PlanError: {path}: write 'patch' has nothing to write on row(s) "
                              "{'rows.jsonl:2': 'alignment_missing', 'rows.jsonl:4': 'alignment_ambiguous'}")
    assert not (tmp_path / "o").exists()


def test_a_read_that_misses_a_row_makes_it_ineligible(write_doc, tiny_llama, tmp_path):
    rows = entity_rows(4)
    rows[2]["other"] = "Grace"
    doc = entity_doc(tiny_llama, -1)
    doc["reads"]["other_name"] = {"input": "counterfactual", "layer": 0, "position": {"variable": "other"}}
    for row in rows:
        row["counterfactual"] += f" {row['other']}"
    rows[2]["counterfactual"] = rows[2]["counterfactual"].replace(" Grace", "")
    api.run(write_doc(doc, rows), out=tmp_path / "o")
    content = json.loads((tmp_path / "o" / "logit_diff.json").read_text())
    assert content["eligible"] == [True, True, False, True]
    assert content["values"][2] is None and None not in content["values"][:2]
    assert content["summary"]["eligible"] == 3
    assert content["positions"]["other_name"]["rows"][2]["reason"] == "alignment_missing"


@pytest.mark.parametrize("document", ["v2/entity_patch.json", "v2/chat_turn.json"])
def test_the_v2_documents_run_the_same_on_both_local_engines(document, tmp_path):
    path = ROOT / "documents" / document
    api.run(path, out=tmp_path / "hooks", engine="hooks")
    api.run(path, out=tmp_path / "nnterp", engine="nnterp")
    diff = subprocess.run(["diff", "-r", "-x", "run.json", "-x", "manifest.json", tmp_path / "hooks", tmp_path / "nnterp"], capture_output=True)
    assert diff.returncode == 0


def test_chat_turn_patches_the_last_token_of_the_second_user_message(tmp_path):
    api.run(ROOT / "documents" / "v2" / "chat_turn.json", out=tmp_path / "o")
    content = json.loads((tmp_path / "o" / "iia.json").read_text())
    rows = [json.loads(line) for line in (ROOT / "documents" / "data" / "chat" / "test.jsonl").read_text().splitlines()]
    assert any(r["base"][0]["role"] == "system" for r in rows) and any(r["base"][0]["role"] == "user" for r in rows)
    assert len({json.dumps(r, sort_keys=True) for r in rows}) == len(rows), "the chat rows are distinct"
    for row, got in zip(rows, content["positions"]["patch"]["rows"]):
        assert got["tokens"] == [row["day"]]
        # Counted by hand, not by the template: the BOS the template renders, then "role : content ." per turn;
        # the day is the last word of the last turn.
        words = 1 + sum(len(f"{m['role']} : {m['content']} .".split()) for m in row["base"])
        assert got["window"] == [words - 2]
    for row, got in zip(rows, content["positions"]["cf_day"]["rows"]):
        assert got["tokens"] == [row["cf_day"]]
