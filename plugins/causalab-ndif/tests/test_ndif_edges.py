"""Edge patching, path patching and edge attribution through the real NDIF test server: the files a server
run writes are the local nnterp run's byte for byte, and those equal the hooks engine's (the induction model,
served like the other toy checkpoints; the code installed on the server, and shipped to one without causalab)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


from causalab_toy import circuits, models

CAUSALAB = str(Path(sys.executable).parent / "causalab")
EDGES = [["input", "a0.h3<v>"], ["a0.h0", "a1.h2<k>"], ["a0.h3", "a1.h1<k>"], ["input", "a1.h0<q>"], ["m0", "m1"],
         ["a1.h2", "logits"]]


def document(folder: Path, name: str, patch: dict, **extra) -> Path:
    doc = {"version": "2", "model": {"key": "causalab-toy/induction", "revision": models.revision("induction")},
           "data": {"rows": circuits.rows("induction", 8, "test")},
           "edges": {"p": {"input": "base", "source": "counterfactual", **patch}},
           "metrics": {"ld": {"kind": "logit_diff", "target": "base_answer", "other": "cf_answer"}}, **extra}
    path = folder / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path


def documents(folder: Path) -> list[Path]:
    return [
        document(folder, "swap", {"edges": {"sweep": "set"}}, sweep={"set": [EDGES, EDGES[1:2]]}),
        document(folder, "path", {"path": {"sender": "a0.h3", "receivers": ["a1.h0<k>", "a1.h2<k>", "logits"]}}),
        document(folder, "eap", {"edges": {"sweep": "set"}}, sweep={"set": [[e] for e in EDGES]},
                 estimate={"method": "attribution"}),
    ]


def metric_files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.json"))
            if p.name not in ("run.json", "manifest.json")}


def local(path: Path, out: Path, engine: str) -> dict[str, bytes]:
    done = subprocess.run([CAUSALAB, "run", str(path), "--engine", engine, "--out", str(out)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    return metric_files(out)


def test_edges_on_the_server_are_the_local_engines_byte_for_byte(ndif_server, tmp_path):
    for path in documents(tmp_path):
        here = local(path, tmp_path / f"{path.stem}-nnterp", "nnterp")
        assert here == local(path, tmp_path / f"{path.stem}-hooks", "hooks"), path.stem
        done = ndif_server.run([CAUSALAB, "run", str(path), "--engine", "ndif", "--out", str(tmp_path / path.stem)])
        assert done.returncode == 0, done.stderr
        assert metric_files(tmp_path / path.stem) == here, path.stem


def test_edges_run_with_the_code_shipped_to_a_server_without_causalab(bare_server, tmp_path):
    path = documents(tmp_path)[0]
    here = local(path, tmp_path / "nnterp", "nnterp")
    done = bare_server.run([CAUSALAB, "run", str(path), "--engine", "ndif", "--out", str(tmp_path / "r")])
    assert done.returncode == 0, done.stderr
    assert metric_files(tmp_path / "r") == here
    record = json.loads((tmp_path / "r" / "run.json").read_text())
    assert "causalab_core.runtime.edges" in record["code"]["modules"]
