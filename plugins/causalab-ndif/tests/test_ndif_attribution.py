"""Attribution patching through the real NDIF test server: the gradient is taken on the server, inside the
one session, and the estimates equal the local engines' (installed code, code shipped by value, and a server
with no causalab at all); `confirm` patches the top points for real on the server too. The estimate is by
integrated gradients (3 steps: each layer's two positions moved along the path together, two traces more per
layer), whose first step is the plain estimate."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from causalab_core import api

ROOT = Path(__file__).resolve().parents[3]
CAUSALAB = str(Path(sys.executable).parent / "causalab")
SWEEP = ROOT / "documents/real/weekdays_layer_sweep.json"


def attribution_document(folder: Path) -> Path:
    """The weekdays sweep cut to 20 rows and 6 points, scored by logit difference and log-probability,
    estimated by integrated gradients, the top 2 points confirmed by patching."""
    doc = copy.deepcopy(json.loads(SWEEP.read_text()))
    doc["sweep"] = {"layer": [0, 3, 6], "pos": [-4, -1]}
    doc["data"]["causal_model"]["rows"] = 20
    doc["metrics"] = {"ld": {"kind": "logit_diff", "target": "label_answer", "other": "base_answer"},
                      "lp": {"kind": "logprob", "answer": "label_answer"}}
    doc["estimate"] = {"method": "attribution", "steps": 3, "confirm": {"top": 2}}
    path = folder / "attribution.json"
    path.write_text(json.dumps(doc))
    return path


def metric_values(folder: Path) -> dict[str, list]:
    return {str(p.relative_to(folder)): json.loads(p.read_text())["values"] for p in sorted(folder.rglob("*.json"))
            if p.name not in ("run.json", "manifest.json", "document.json")}


def assert_close(a: dict[str, list], b: dict[str, list]) -> None:
    assert sorted(a) == sorted(b) and len(a) == 12
    for name in a:
        assert len(a[name]) == len(b[name])
        assert max(abs(x - y) for x, y in zip(a[name], b[name])) <= 1e-5, name


@pytest.mark.parametrize("code", ["installed", "shipped"])
def test_estimates_on_the_server_equal_the_local_engines(ndif_server, tmp_path, code):
    document = attribution_document(tmp_path)
    for engine in ("hooks", "nnterp"):
        api.run(document, out=tmp_path / engine, engine=engine)
    remote = ndif_server.run([CAUSALAB, "run", str(document), "--engine", "ndif", "--out", str(tmp_path / "ndif"),
                              "--option", f"code={code}"])
    assert remote.returncode == 0, remote.stderr
    here = metric_values(tmp_path / "hooks")
    assert_close(here, metric_values(tmp_path / "ndif"))
    assert_close(metric_values(tmp_path / "nnterp"), metric_values(tmp_path / "ndif"))
    run = json.loads((tmp_path / "ndif" / "run.json").read_text())
    assert run["estimate"]["method"] == "attribution" and len(run["estimate"]["confirmed"]["points"]) == 2
    assert run["estimate"]["steps"] == 3


def test_estimates_on_a_server_without_causalab_equal_the_local_engine(bare_server, tmp_path):
    document = attribution_document(tmp_path)
    api.run(document, out=tmp_path / "nnterp", engine="nnterp")
    remote = bare_server.run([CAUSALAB, "run", str(document), "--engine", "ndif", "--out", str(tmp_path / "ndif")])
    assert remote.returncode == 0, remote.stderr
    assert_close(metric_values(tmp_path / "nnterp"), metric_values(tmp_path / "ndif"))
