"""Every intervention kind through the real NDIF test server, installed and shipped code, byte for byte as local;
and causal tracing by role (a second column's run, noise scaled by a read's spread, a read of a noised run).

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


def tracing_document() -> dict:
    """Causal tracing, noising: 3 sigma noise on the asked name's embeddings (sigma from a third run of the
    prompt), the noised run's value read where the noise has reached and patched into the clean run, by role."""
    text = (ROOT / "documents" / "README.md").read_text()
    fragment = text.split("#### Patching direction")[1].split("```json")[1].split("```")[0]
    entity = json.loads((ROOT / "documents/real/entity_layer_sweep.json").read_text())["model"]
    doc = {"version": "2", "model": {"key": "causalab-toy/entity", "revision": entity["revision"]},
           "data": {"causal_model": {"kind": "entity", "intervene": ["line", "place"], "rows": 20,
                                     "split": "test", "seed": 0}},
           **json.loads("{" + fragment + "}"), "sweep": {"layer": [1, 3]}}
    doc["direction"]["patch"] = "noising"
    return doc


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


def test_causal_tracing_by_role_through_the_server_writes_the_local_bytes(ndif_server, tmp_path):
    """A second column's run, noise scaled by a read's spread and a read of the noised run, by role (the
    entity model is deployed for the installed code only)."""
    document = tmp_path / "tracing.json"
    document.write_text(json.dumps(tracing_document()))
    api.run(document, out=tmp_path / "local", engine="hooks")
    remote = ndif_server.run([CAUSALAB, "run", str(document), "--engine", "ndif", "--out", str(tmp_path / "remote"),
                              "--option", "code=installed"])
    assert remote.returncode == 0, remote.stderr
    here, there = files(tmp_path / "local"), files(tmp_path / "remote")
    assert sorted(here) == sorted(there) and len(here) > 4
    assert [f for f in here if here[f] != there[f]] == []


def test_every_kind_on_a_server_without_causalab_writes_the_local_bytes(bare_server, tmp_path):
    assert_remote_is_local(bare_server, "nnterp", tmp_path)


CUSTOM = """
import json, sys
from causalab_core import api
from causalab_core.plugins.registry import build_registry
import causalab_example

registry = build_registry(extra=(causalab_example,))
document, out, engine = sys.argv[1:4]
options = {"code": "shipped"} if engine == "ndif" else None
api.run(document, out=out, engine=engine, registry=registry, options=options)
"""


def test_a_third_partys_custom_kind_travels_by_value_and_writes_the_local_bytes(ndif_server, tmp_path):
    """The skeleton's `example_project_out` (its own `apply`), installed nowhere: its module goes to the server
    with the request, and the server writes what the hooks engine writes here."""
    from safetensors.torch import save_file
    import torch

    skeleton = ROOT / "plugins" / "skeleton" / "causalab-example" / "src"
    doc = copy.deepcopy(json.loads(SWEEP.read_text()))
    doc["sweep"] = {"layer": [1, 4], "pos": [-4, -1]}
    doc["data"]["causal_model"]["rows"] = 20
    save_file({"u": torch.randn(64, generator=torch.Generator().manual_seed(0))}, tmp_path / "u.safetensors")
    doc["writes"]["patch"]["intervention"] = {"kind": "example_project_out", "vector": "u.safetensors"}
    del doc["writes"]["patch"]["source"]
    document = tmp_path / "custom.json"
    document.write_text(json.dumps(doc))
    script = tmp_path / "custom.py"
    script.write_text(CUSTOM)
    env = {"PYTHONPATH": str(skeleton)}
    for engine in ("hooks", "ndif"):
        done = ndif_server.run([sys.executable, str(script), str(document), str(tmp_path / engine), engine], env=env)
        assert done.returncode == 0, done.stderr[-2000:]
    here, there = files(tmp_path / "hooks"), files(tmp_path / "ndif")
    assert sorted(here) == sorted(there) and len(here) > 4
    assert [f for f in here if here[f] != there[f]] == []
    run = json.loads((tmp_path / "ndif" / "run.json").read_text())
    assert "causalab_example" in json.dumps(run)  # what travelled, and the kind's provider, are on record
