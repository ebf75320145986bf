"""Every intervention kind through the real NDIF test server, installed and shipped code, byte for byte as local.

The kinds' math is core's (`runtime.interventions`), so a server runs them with nothing more installed than a
swap needs; `test_ndif_shipped.py` holds the same on a server with no causalab at all.
"""

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

# kind -> (the write's intervention, whether it reads the write's source)
KINDS = {
    "zero": ({"kind": "zero"}, False),
    "mean": ({"kind": "mean"}, True),
    "resample": ({"kind": "resample", "seed": 2}, True),
    "noise": ({"kind": "noise", "scale": 0.5, "seed": 4}, False),
    "add": ({"kind": "add", "alpha": 2.0, "minus": "cf_first"}, True),
}


def intervention_documents(folder: Path) -> dict[str, Path]:
    """The weekdays sweep cut to 20 rows and 4 points, its write made each kind in turn."""
    found = {}
    for name, (intervention, reads_source) in KINDS.items():
        doc = copy.deepcopy(json.loads(SWEEP.read_text()))
        doc["sweep"] = {"layer": [0, 3], "pos": [-4, -1]}
        doc["data"]["causal_model"]["rows"] = 20
        doc["reads"]["cf_first"] = {"input": "counterfactual", "layer": {"sweep": "layer"}, "site": "block_input",
                                    "position": 0}
        doc["writes"]["patch"]["intervention"] = intervention
        if not reads_source:
            del doc["writes"]["patch"]["source"]
        found[name] = folder / f"{name}.json"
        found[name].write_text(json.dumps(doc))
    return found


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in ("run.json", "manifest.json")}


def assert_remote_is_local(server, engine: str, folder: Path, *options: str) -> None:
    for name, document in intervention_documents(folder).items():
        api.run(document, out=folder / f"local-{name}", engine=engine)
        remote = server.run([CAUSALAB, "run", str(document), "--engine", "ndif", "--out",
                             str(folder / f"remote-{name}"), *options])
        assert remote.returncode == 0, remote.stderr
        here, there = files(folder / f"local-{name}"), files(folder / f"remote-{name}")
        assert sorted(here) == sorted(there) and len(here) > 4, name
        assert [f for f in here if here[f] != there[f]] == [], name


@pytest.mark.parametrize("code", ["installed", "shipped"])
def test_every_kind_through_the_server_writes_the_local_bytes(ndif_server, tmp_path, code):
    assert_remote_is_local(ndif_server, "hooks", tmp_path, "--option", f"code={code}")


def test_every_kind_on_a_server_without_causalab_writes_the_local_bytes(bare_server, tmp_path):
    assert_remote_is_local(bare_server, "nnterp", tmp_path)
