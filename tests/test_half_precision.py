"""float16 and bfloat16 documents on the local engines: what run.json says, engine agreement, DAS, the README's figures.

hooks and nnterp run the same modules' forwards in the same order at every dtype, so their metric files are
byte-identical in half precision too (tolerance 0). The README's half-precision figures are measured on CPU
against the float32 run of the toy weekdays sweep; they did not move at all over 1 and 2 threads and batch
sizes 1 to 64. A delta is rounding error, so another CPU's half kernels may move it by a fraction of itself:
each logit_diff figure is checked within a factor of 1.5 either way (which still fails if a half document
silently ran in float32, a delta of 0), and IIA within one flipped row (one row of 60 at a point).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from causalab_core import api
from causalab_core.plugins.contracts import Engine
from causalab_core.plugins.provenance import loaded_weights_dtype
from causalab_testing.conformance import ragged_rows
from causalab_testing.data import sweep_document
from causalab_testing.precision import at_dtype, deltas

ROOT = Path(__file__).parent.parent
SWEEP = ROOT / "documents" / "real" / "weekdays_layer_sweep.json"
HALF = ("float16", "bfloat16")
ONE_ROW = 1 / 60 + 1e-9  # the sweep scores 60 rows a point
FACTOR = 1.5


def same_folders(a: Path, b: Path) -> bool:
    diff = subprocess.run(["diff", "-r", "-x", "run.json", "-x", "manifest.json", a, b], capture_output=True)
    return diff.returncode == 0


def run_json(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
def test_a_half_document_runs_on_hooks_and_nnterp_with_the_same_bytes_and_records_its_loaded_dtype(
        arch, dtype, request, write_doc, tmp_path):
    document = sweep_document(str(request.getfixturevalue(arch)))
    document["model"]["dtype"] = dtype
    doc = write_doc(document, ragged_rows(42))  # padded batches: the half-precision mask too
    api.run(doc, out=tmp_path / "hooks", engine="hooks", batch_size=16)
    api.run(doc, out=tmp_path / "nnterp", engine="nnterp", batch_size=16)
    assert same_folders(tmp_path / "hooks", tmp_path / "nnterp")
    hooks, nnterp = run_json(tmp_path / "hooks"), run_json(tmp_path / "nnterp")
    assert hooks["loaded_dtype"] == nnterp["loaded_dtype"] == f"torch.{dtype}"
    # ... and the half run's numbers are its own, not a float32 run's
    float32 = write_doc(sweep_document(str(request.getfixturevalue(arch))), name="float32.json")
    api.run(float32, out=tmp_path / "float32", engine="hooks", batch_size=16)
    assert run_json(tmp_path / "float32")["loaded_dtype"] == "torch.float32"
    assert not same_folders(tmp_path / "hooks", tmp_path / "float32")


def test_loaded_dtype_is_read_off_the_weights_and_nothing_is_claimed_for_weights_on_meta(tiny_llama):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(tiny_llama)
    engine = Engine()
    engine.record_loaded(AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16))
    assert engine.details == {"loaded_dtype": "torch.bfloat16"}
    with torch.device("meta"):  # a session sent elsewhere: the weights here are a shell
        shell = AutoModelForCausalLM.from_config(config, dtype=torch.float16)
    engine.record_loaded(shell)
    assert engine.details == {}
    # A remote engine's word for the served weights is the run's loaded dtype; an engine's own reading wins.
    assert loaded_weights_dtype({"served_dtype": "torch.bfloat16"}) == "torch.bfloat16"
    assert loaded_weights_dtype({"loaded_dtype": "torch.float16", "served_dtype": "x"}) == "torch.float16"
    assert loaded_weights_dtype({}) is None


def das_document(model_key: str, dtype: str) -> dict:
    document = sweep_document(model_key, layers=[1], positions=[-4])
    document.pop("sweep")
    document["model"]["dtype"] = dtype
    train = {"data": {"path": "rows.jsonl"}, "label": "cf_answer", "epochs": 2, "batch_size": 8, "lr": 0.05, "seed": 3}
    document["featurizers"] = {"das": {"kind": "das", "rank": 2, "train": train}}
    for spec in (*document["reads"].values(), *document["writes"].values()):
        spec["layer"], spec["position"] = 1, -4
    document["writes"]["patch"]["featurizer"] = "das"
    return document


@pytest.mark.parametrize("dtype", HALF)
def test_das_trains_and_applies_in_float32_on_half_weights(dtype, write_doc, tiny_llama, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from causalab_featurizers.das import DAS
    from causalab_testing.data import weekday_rows

    seen = set()
    featurize = DAS.featurize

    def spy(self, x):
        features, error = featurize(self, x)
        training = self.rotation.requires_grad and torch.is_grad_enabled()
        seen.add((x.dtype, self.rotation.dtype, features.dtype, training))
        return features, error

    monkeypatch.setattr(DAS, "featurize", spy)
    rows = weekday_rows(24)
    half = write_doc(das_document(str(tiny_llama), dtype), rows)
    rotations = {}
    for engine in ("hooks", "nnterp"):
        seen.clear()
        api.run(half, out=tmp_path / engine, engine=engine)
        assert run_json(tmp_path / engine)["loaded_dtype"] == f"torch.{dtype}"
        # Half activations reach the featurizer as float32, on a float32 rotation: trained (with its
        # gradient) and then applied.
        assert seen == {(torch.float32, torch.float32, torch.float32, True),
                        (torch.float32, torch.float32, torch.float32, False)}
        rotations[engine] = load_file(tmp_path / engine / "das.safetensors")["rotation"]
        assert rotations[engine].dtype == torch.float32
    # Byte-identical forwards give the same Adam steps.
    assert torch.equal(rotations["hooks"], rotations["nnterp"])
    assert (tmp_path / "hooks" / "iia.json").read_bytes() == (tmp_path / "nnterp" / "iia.json").read_bytes()

    # It trained: away from where it started, and towards what float32 training finds.
    api.run(write_doc(das_document(str(tiny_llama), "float32"), name="float32.json"), out=tmp_path / "f32")
    float32 = load_file(tmp_path / "f32" / "das.safetensors")["rotation"]
    torch.manual_seed(3)  # training's seed draws the initial rotation (causalab_core.runtime.training)
    start = DAS(DAS.Params(rank=2), 32).rotation.detach()
    moved = (rotations["hooks"] - start).abs().max()
    assert moved > 0.1
    assert (rotations["hooks"] - float32).abs().max() < (start - float32).abs().max()


# -- the README's figures -------------------------------------------------------


def readme_figures() -> dict[str, dict[str, float]]:
    """The README's half-precision table: dtype -> the figure of each column."""
    section = (ROOT / "docs" / "guides.md").read_text().split("## Half precision")[1].split("\n## ")[0]
    lines = [line for line in section.splitlines() if line.startswith("| `")]
    keys = ("iia_flips", "iia_point", "logit_diff_point", "logit_diff_row")
    table = {}
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        table[cells[0].strip("`")] = dict(zip(keys, (float(c) for c in cells[1:])))
    return table


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """The toy weekdays sweep at each dtype on CPU (where the README's figures were measured), hooks and nnterp."""
    folder = tmp_path_factory.mktemp("half")
    outs = {}
    for dtype in ("float32", *HALF):
        doc = at_dtype(SWEEP, dtype, folder)
        for engine in ("hooks", "nnterp") if dtype in HALF else ("hooks",):
            outs[engine, dtype] = folder / f"{engine}-{dtype}"
            api.run(doc, out=outs[engine, dtype], engine=engine, device_map="cpu")
    return outs


@pytest.mark.parametrize("dtype", HALF)
def test_the_toy_sweep_in_half_precision_is_the_same_on_both_engines(sweeps, dtype):
    assert same_folders(sweeps["hooks", dtype], sweeps["nnterp", dtype])
    assert run_json(sweeps["nnterp", dtype])["loaded_dtype"] == f"torch.{dtype}"


@pytest.mark.parametrize("dtype", HALF)
def test_the_readme_says_how_far_half_precision_sits_from_float32(sweeps, dtype):
    said = readme_figures()[dtype]
    fresh = deltas(sweeps["hooks", dtype], sweeps["hooks", "float32"])
    assert abs(fresh["iia_flips"] - said["iia_flips"]) <= 1, (fresh, said)
    assert abs(fresh["iia_point"] - said["iia_point"]) <= ONE_ROW, (fresh, said)
    for figure in ("logit_diff_point", "logit_diff_row"):
        assert said[figure] / FACTOR <= fresh[figure] <= said[figure] * FACTOR, (figure, fresh, said)
