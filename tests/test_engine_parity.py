"""The same document through `hooks` and `nnterp` writes the same folder, but for run.json."""

from __future__ import annotations

import json
import subprocess

import pytest

from causalab_core import api
from causalab_testing.conformance import ragged_rows
from causalab_testing.data import sweep_document


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
def test_hooks_and_nnterp_write_identical_metric_files(arch, request, write_doc, tmp_path):
    doc = write_doc(sweep_document(str(request.getfixturevalue(arch))), ragged_rows(42))
    api.run(doc, out=tmp_path / "hooks", engine="hooks", batch_size=16)
    api.run(doc, out=tmp_path / "nnterp", engine="nnterp", batch_size=16)
    diff = subprocess.run(["diff", "-r", "-x", "run.json", "-x", "manifest.json", tmp_path / "hooks", tmp_path / "nnterp"],
                          capture_output=True, text=True)
    assert diff.returncode == 0 and diff.stdout == ""
    hooks_run = json.loads((tmp_path / "hooks" / "run.json").read_text())
    nnterp_run = json.loads((tmp_path / "nnterp" / "run.json").read_text())
    assert (hooks_run["engine"], nnterp_run["engine"]) == ("hooks", "nnterp")
    # The same run but for which engine ran (and the distribution behind it).
    assert (hooks_run["components"].pop("engine"), nnterp_run["components"].pop("engine")) == (
        {"hooks": f"causalab-hooks {hooks_run['causalab']['distributions']['causalab-hooks']['version']}"},
        {"nnterp": f"causalab-nnterp {nnterp_run['causalab']['distributions']['causalab-nnterp']['version']}"})
    # run.json's causalab is the run's own distributions (#48): the two differ by the engine's alone.
    ours = [run.pop("causalab")["distributions"] for run in (hooks_run, nnterp_run)]
    assert set(ours[0]) ^ set(ours[1]) == {"causalab-hooks", "causalab-nnterp"}
    assert {k: v for k, v in ours[0].items() if k in ours[1]} == {k: v for k, v in ours[1].items() if k in ours[0]}
    assert {k: v for k, v in hooks_run.items() if k != "engine"} == {k: v for k, v in nnterp_run.items() if k != "engine"}
    assert nnterp_run["versions"]["nnsight"] and nnterp_run["versions"]["nnterp"]
