"""PCA, the mask, boundless DAS and the SAE: the contract, independent references, engines, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from causalab_core import api
from causalab_core.errors import DocumentError, PlanError
from causalab_core.plugins.registry import registry
from causalab_testing.conformance import FeaturizerConformance
from causalab_testing.data import sweep_document, weekday_rows
from causalab_featurizers.boundless import BoundlessDAS
from causalab_featurizers.mask import Mask
from causalab_featurizers.pca import PCA
from causalab_featurizers.sae import SAE

SAELENS = Path(__file__).parent / "saelens"  # written by SAELens itself: benchmarks/saelens_fixtures.py
TRAIN = {"data": {"path": "rows.jsonl"}, "label": "cf_answer", "epochs": 2, "batch_size": 8, "lr": 0.05, "seed": 3}


class TestPCA(FeaturizerConformance):
    @pytest.fixture
    def featurizer(self):
        from causalab_testing.conformance.featurizers import fitted

        return fitted(PCA(PCA.Params(k=3), width=8))


class TestMask(FeaturizerConformance):
    @pytest.fixture
    def featurizer(self):
        return Mask(Mask.Params(), width=8)


class TestBoundlessDAS(FeaturizerConformance):
    @pytest.fixture
    def featurizer(self):
        return BoundlessDAS(BoundlessDAS.Params(seed=0), width=8)


class TestSAE(FeaturizerConformance):
    @pytest.fixture(params=["standard", "topk", "jumprelu"])
    def featurizer(self, request):
        params = SAE.Params(path=str(SAELENS / request.param), features=[1, 5, 9])
        sae = SAE(params, 32)
        sae.load_state(SAE.read_files(params, 32))
        return sae


@pytest.mark.parametrize("architecture", ["standard", "topk", "jumprelu"])
def test_the_sae_encodes_and_decodes_as_saelens_and_gives_an_untouched_input_back_bit_for_bit(architecture):
    from safetensors.torch import load_file

    params = SAE.Params(path=str(SAELENS / architecture))
    sae = SAE(params, 32)
    sae.load_state(SAE.read_files(params, 32))
    reference = load_file(SAELENS / architecture / "reference.safetensors")  # SAELens's encode and decode
    code, err = sae.featurize(reference["x"])
    torch.testing.assert_close(code, reference["code"], atol=1e-6, rtol=0)
    torch.testing.assert_close(sae.decode(code), reference["reconstruction"], atol=1e-6, rtol=0)
    assert torch.equal(sae.inverse(code, err), reference["x"])  # the reconstruction error is put back
    # A changed feature moves x by the decoder's change alone.
    moved = code.clone()
    moved[..., 3] += 2.0
    torch.testing.assert_close(sae.inverse(moved, err) - reference["x"],
                               (2.0 * sae.weights["W_dec"][3]).expand_as(reference["x"]), atol=1e-5, rtol=0)


def one_site(model: str, featurizers: dict, feature: str, rows: int = 24, layer: int = 1) -> dict:
    doc = sweep_document(model, layers=[layer], positions=[-4])
    doc.pop("sweep")
    for spec in (*doc["reads"].values(), *doc["writes"].values()):
        spec["layer"], spec["position"] = layer, -4
    doc["featurizers"] = featurizers
    doc["writes"]["patch"]["featurizer"] = feature
    return doc


def copy_sae(tmp_path: Path, architecture: str = "topk") -> str:
    import shutil

    shutil.copytree(SAELENS / architecture, tmp_path / architecture, dirs_exist_ok=True)
    return architecture


def test_pca_is_scikit_learns_on_the_reads_the_fit_sees(tmp_path, write_doc, tiny_llama):
    """The fit watches the training swap: the write's window on the base prompts and the read's on the
    counterfactuals. scikit-learn's PCA of those activations, from a plain transformers forward, row by row."""
    from safetensors.torch import load_file
    from sklearn.decomposition import PCA as Reference
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rows = weekday_rows(24)
    doc = one_site(str(tiny_llama), {"p": {"kind": "pca", "k": 4, "train": {"data": {"path": "rows.jsonl"}}}}, "p")
    api.run(write_doc(doc, rows), out=tmp_path / "out")
    fitted = load_file(tmp_path / "out" / "p.safetensors")

    model = AutoModelForCausalLM.from_pretrained(tiny_llama).eval()
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    seen = []
    with torch.no_grad():
        for row in rows:
            for prompt in (row["base"], row["counterfactual"]):
                hidden = model(**tok(prompt, return_tensors="pt"), output_hidden_states=True).hidden_states
                seen.append(hidden[2][0, -4].double())  # block 1's output
    reference = Reference(n_components=4).fit(torch.stack(seen).numpy())
    components = torch.from_numpy(reference.components_).float()
    torch.testing.assert_close(fitted["basis"][:, :4].T, components, atol=1e-5, rtol=0)
    torch.testing.assert_close(fitted["mean"], torch.from_numpy(reference.mean_).float(), atol=1e-5, rtol=0)
    torch.testing.assert_close(fitted["variance"][:4], torch.from_numpy(reference.explained_variance_).float(),
                               atol=1e-5, rtol=1e-5)


def soft_mask_reference(kind: str, width: int):
    """pyvene 0.1.8's intervention of the same kind, untrained."""
    import pyvene as pv

    if kind == "mask":
        return pv.SigmoidMaskIntervention(embed_dim=width)
    return pv.BoundlessRotatedSpaceIntervention(embed_dim=width)


@pytest.mark.parametrize("kind", ["mask", "boundless_das"])
def test_training_follows_pyvenes_intervention_on_the_same_model_rows_and_seed(kind, tmp_path, write_doc, tiny_llama):
    """The same loop written in the test around pyvene's SigmoidMaskIntervention or
    BoundlessRotatedSpaceIntervention: rows in the order of the fit's seeded permutation, the
    cross-entropy of the label through a hook at the write's position, plus the same penalty, Adam with the
    same settings, the temperature set by the same schedule (pyvene's is a parameter; it is not trained)."""
    pytest.importorskip("pyvene")
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rows = weekday_rows(24)
    params = {"seed": 5} if kind == "boundless_das" else {}
    doc = one_site(str(tiny_llama), {"f": {"kind": kind, **params, "train": TRAIN}}, "f")
    api.run(write_doc(doc, rows), out=tmp_path / "out")
    ours = load_file(tmp_path / "out" / "f.safetensors")

    model = AutoModelForCausalLM.from_pretrained(tiny_llama).eval().requires_grad_(False)
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    width = model.config.hidden_size
    reference = soft_mask_reference(kind, width)
    if kind == "boundless_das":
        start = BoundlessDAS(BoundlessDAS.Params(seed=5), width).rotation.detach()
        reference.rotate_layer.weight = start  # the same initial rotation, through the same parametrization
        trained = [p for n, p in reference.named_parameters() if "temperature" not in n and "population" not in n]
        first, last, sparsity = 50.0, 0.1, lambda: reference.intervention_boundaries.sum()
        temperature = reference
    else:
        trained = [reference.mask]
        first, last = 1.0, 0.01
        sparsity = lambda: torch.sigmoid(reference.mask / reference.temperature).mean()  # noqa: E731
        temperature = reference
    optimizer = torch.optim.Adam(trained, lr=TRAIN["lr"], eps=1e-5)
    order = torch.Generator().manual_seed(TRAIN["seed"])
    labels = [tok(r["cf_answer"]).input_ids[-1] for r in rows]
    steps = TRAIN["epochs"] * 3
    step = 0
    block = model.model.layers[1]
    for _ in range(TRAIN["epochs"]):
        permutation = torch.randperm(len(rows), generator=order).tolist()
        for batch in (permutation[i:i + 8] for i in range(0, len(rows), 8)):
            temperature.set_temperature(torch.tensor(first + (last - first) * step / (steps - 1)))
            optimizer.zero_grad()
            logits = []
            for i in batch:
                with torch.no_grad():
                    source = model(**tok(rows[i]["counterfactual"], return_tensors="pt"),
                                   output_hidden_states=True).hidden_states[2][:, -4]

                def patch(module, args, output, source=source):
                    hidden = output[0] if isinstance(output, tuple) else output
                    written = reference(hidden[:, -4].clone(), source)
                    hidden = hidden.clone()
                    hidden[:, -4] = written
                    return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

                handle = block.register_forward_hook(patch)
                try:
                    logits.append(model(**tok(rows[i]["base"], return_tensors="pt")).logits[0, -1])
                finally:
                    handle.remove()
            loss = torch.nn.functional.cross_entropy(torch.stack(logits), torch.tensor([labels[i] for i in batch]))
            torch.autograd.backward(loss + sparsity())  # not Tensor.backward, which nnsight takes over
            optimizer.step()
            step += 1
    if kind == "mask":
        torch.testing.assert_close(ours["logits"], reference.mask.detach(), atol=2e-4, rtol=0)
    else:
        torch.testing.assert_close(ours["boundary"], reference.intervention_boundaries.detach(), atol=2e-4, rtol=0)
        torch.testing.assert_close(ours["rotation"], reference.rotate_layer.weight.detach(), atol=2e-4, rtol=0)


def test_the_soft_swap_is_pyvenes_bit_for_bit():
    """With the same parameters and temperature, the training-time swap computes pyvene's values exactly."""
    pytest.importorskip("pyvene")
    from causalab_core.runtime import swap

    gen = torch.Generator().manual_seed(0)
    base, source = torch.randn(5, 16, generator=gen), torch.randn(5, 16, generator=gen)
    mask = Mask(Mask.Params(), 16)
    with torch.no_grad():
        mask.logits.copy_(torch.randn(16, generator=gen))
    mask.temperature = 0.3
    reference = soft_mask_reference("mask", 16)
    with torch.no_grad():
        reference.mask.copy_(mask.logits)
        reference.set_temperature(torch.tensor(0.3))
    boundless = BoundlessDAS(BoundlessDAS.Params(seed=1), 16)
    with torch.no_grad():
        boundless.boundary.fill_(0.4)
    boundless.temperature = 2.0
    other = soft_mask_reference("boundless_das", 16)
    other.rotate_layer.weight = boundless.rotation.detach()
    with torch.no_grad():
        other.intervention_boundaries.fill_(0.4)
        other.set_temperature(torch.tensor(2.0))
    with torch.enable_grad():  # training mode with gradients on: the soft mask
        assert torch.equal(swap(mask, base, source), reference(base, source))
        torch.testing.assert_close(swap(boundless, base, source), other(base, source), atol=1e-6, rtol=0)


@pytest.mark.parametrize("kind", ["pca", "mask", "boundless_das", "sae", "mask_over_sae"])
def test_hooks_and_nnterp_give_the_same_bytes(kind, tmp_path, write_doc, tiny_llama):
    features = {
        "pca": {"f": {"kind": "pca", "k": 4, "train": {"data": {"path": "rows.jsonl"}}}},
        "mask": {"f": {"kind": "mask", "train": TRAIN}},
        "boundless_das": {"f": {"kind": "boundless_das", "train": TRAIN}},
        "sae": {"f": {"kind": "sae", "path": copy_sae(tmp_path), "features": [0, 3, 7]}},
        "mask_over_sae": {"s": {"kind": "sae", "path": copy_sae(tmp_path)},
                          "f": {"kind": "mask", "over": "s", "train": TRAIN}},
    }[kind]
    path = write_doc(one_site(str(tiny_llama), features, "f"), weekday_rows(24))
    for engine in ("hooks", "nnterp"):
        api.run(path, out=tmp_path / engine, engine=engine)
    for name in sorted(p.name for p in (tmp_path / "hooks").iterdir() if p.suffix in (".json", ".safetensors")):
        if name not in ("run.json", "manifest.json"):  # run.json names the engine; the manifest its digest
            assert (tmp_path / "hooks" / name).read_bytes() == (tmp_path / "nnterp" / name).read_bytes(), name


def test_a_mask_over_an_saes_features_lists_the_features_it_keeps(tmp_path, write_doc, tiny_llama):
    path = write_doc(one_site(str(tiny_llama), {"s": {"kind": "sae", "path": copy_sae(tmp_path)},
                                               "f": {"kind": "mask", "over": "s", "train": TRAIN}}, "f"),
                     weekday_rows(24))
    run = api.run(path, out=tmp_path / "out")
    table = run.featurizers
    row = table.iloc[0] if hasattr(table, "iloc") else table[0]
    units = json.loads(row["units"])
    assert int(row["size"]) == len(units) and all(0 <= u < 64 for u in units)  # the SAE's 64 features
    assert json.loads(row["over"])[0][0] == "sae"  # what it was over, with the SAE's digest
    from safetensors.torch import load_file

    assert load_file(tmp_path / "out" / "f.safetensors")["logits"].shape == (64,)
    # Loaded back over the same SAE, the mask gives the same scores; over another SAE it is refused.
    doc = one_site(str(tiny_llama), {"s": {"kind": "sae", "path": "topk"},
                                     "f": {"kind": "mask", "over": "s", "load": str(tmp_path / "out" / "f.safetensors")}}, "f")
    api.run(write_doc(doc, name="again.json"), out=tmp_path / "again")
    assert (tmp_path / "out" / "iia.json").read_bytes() == (tmp_path / "again" / "iia.json").read_bytes()
    copy_sae(tmp_path, "standard")
    doc["featurizers"]["s"]["path"] = "standard"
    with pytest.raises(PlanError, match="was trained with over = "):
        api.plan(write_doc(doc, name="other.json"))
    del doc["featurizers"]["f"]["over"]  # the same mask over the units: refused, not read at another width
    with pytest.raises(PlanError, match=r"was trained with over = .*sae.*, this document has None"):
        api.plan(write_doc(doc, name="bare.json"))
    # A parameter stated at its default is the same identity as one left out.
    doc["featurizers"]["f"].update(over="s", sparsity=1.0, temperature=1.0)
    doc["featurizers"]["s"]["path"] = "topk"
    api.plan(write_doc(doc, name="stated.json"))


@pytest.mark.parametrize("change", [{"lr": 1e30}, {"temperature": 1e-300}])
def test_training_that_diverges_is_one_line_and_writes_nothing(change, tmp_path, write_doc, tiny_llama):
    from causalab_core.errors import EngineError

    featurizer = {"kind": "boundless_das", "train": {**TRAIN, "lr": change.get("lr", TRAIN["lr"])}}
    featurizer.update({k: v for k, v in change.items() if k != "lr"})
    path = write_doc(one_site(str(tiny_llama), {"f": featurizer}, "f"), weekday_rows(24))
    with pytest.raises(EngineError, match=r"featurizer 'f': training diverged \(.* not finite\); lower train.lr"):
        api.run(path, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_training_agrees_at_one_and_two_threads(tmp_path, write_doc, tiny_llama):
    import os
    import subprocess
    import sys

    path = write_doc(one_site(str(tiny_llama), {"f": {"kind": "boundless_das", "train": TRAIN}}, "f"), weekday_rows(24))
    for threads in (1, 2):
        code = f"from causalab_core import api; api.run({str(path)!r}, out={str(tmp_path / str(threads))!r})"
        subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    from safetensors.torch import load_file

    one, two = (load_file(tmp_path / t / "f.safetensors") for t in ("1", "2"))
    torch.testing.assert_close(one["rotation"], two["rotation"], atol=1e-4, rtol=0)
    assert torch.equal(one["units"], two["units"])
    assert (tmp_path / "1" / "iia.json").read_text() == (tmp_path / "2" / "iia.json").read_text()


REFUSALS = [
    ({"f": {"kind": "pca", "k": 32, "train": {"data": {"path": "rows.jsonl"}}}}, PlanError,
     r"\$\.featurizers\.f: `k` 32 is not below the site width 32"),
    ({"f": {"kind": "pca", "k": 4}}, DocumentError, r"\$\.featurizers\.f: .*fitted from the site's activations"),
    ({"f": {"kind": "pca", "k": 4, "train": {"data": {"path": "rows.jsonl"}, "labels": "shuffled"}}},
     DocumentError, r"\$\.featurizers\.f\.train\.labels: .*fitted from activations"),
    ({"f": {"kind": "pca", "k": 4, "train": {"data": {"path": "rows.jsonl"}, "epochs": 3, "label": "cf_answer"}}},
     DocumentError, r"\$\.featurizers\.f\.train\.epochs: .*fitted in one pass .* `epochs`, `label` do not apply"),
    ({"f": {"kind": "mask"}}, DocumentError, r"\$\.featurizers\.f: .*changes nothing untrained"),
    ({"f": {"kind": "mask", "load": "m.safetensors", "train": TRAIN}}, DocumentError,
     r"\$\.featurizers\.f: `train` and `load` together"),
    ({"f": {"kind": "sae", "path": "badk"}}, DocumentError,
     r"\$\.featurizers\.f\.path: .*a topk SAE's k 0 is not an integer from 1 to d_sae \(64\)"),
    ({"f": {"kind": "sae", "path": "topk", "features": [3, 3]}}, DocumentError,
     r"\$\.featurizers\.f\.path: `features` \[3, 3\] names a feature twice"),
    ({"f": {"kind": "mask", "train": {"data": {"path": "rows.jsonl"}}}}, DocumentError,
     r"\$\.featurizers\.f\.train\.label: .*name it"),
    ({"f": {"kind": "sae", "path": "wide"}}, DocumentError,
     r"\$\.featurizers\.f\.path: the SAE reads 64-wide activations \(d_in\), the activations it would see are 32 wide"),
    ({"f": {"kind": "sae", "path": "nofield"}}, DocumentError, r"\$\.featurizers\.f\.path: .*cfg\.json lacks d_sae"),
    ({"f": {"kind": "sae", "path": "gated"}}, DocumentError,
     r"\$\.featurizers\.f\.path: architecture 'gated' is not supported \(supported: standard, topk, jumprelu\)"),
    ({"f": {"kind": "sae", "path": "nowhere"}}, DocumentError, r"\$\.featurizers\.f\.path: .*cannot be read"),
    ({"f": {"kind": "sae"}}, DocumentError, r"\$\.featurizers\.f: .*reads its state from files: give `path`"),
    ({"f": {"kind": "sae", "path": "topk", "features": [64]}}, DocumentError,
     r"\$\.featurizers\.f\.path: `features` \[64\] are not features of this SAE \(0 to 63\)"),
    ({"b": {"kind": "boundless_das", "load": None}, "f": {"kind": "mask", "over": "b", "train": TRAIN}}, PlanError,
     r"\$\.featurizers\.f\.over: featurizer 'b' \(kind 'boundless_das'\) has no fixed set of features"),
    ({"f": {"kind": "mask", "over": "nothing", "train": TRAIN}}, DocumentError,
     r"\$\.featurizers\.f\.over: no featurizer named 'nothing'"),
    ({"f": {"kind": "mask", "over": "f", "train": TRAIN}}, DocumentError,
     r"\$\.featurizers\.f\.over: a featurizer cannot work over its own features"),
    ({"g": {"kind": "mask", "over": "f", "train": TRAIN}, "f": {"kind": "mask", "over": "g", "train": TRAIN}},
     PlanError, r"\$\.featurizers\.\w\.over: .* is trained in this document"),
    ({"f": {"kind": "pca", "k": 8, "train": {"data": {"path": "few.jsonl"}}}}, PlanError,
     r"\$\.featurizers\.f\.train\.data: 3 training rows give 6 activations, too few for 8 components"),
    ({"f": {"kind": "mask", "train": {**TRAIN, "data": {"path": "one.jsonl"}}}}, PlanError,
     r"\$\.featurizers\.f\.train\.data: 1 training row; .* give more"),
]


@pytest.mark.parametrize("featurizers,error,match", REFUSALS)
def test_what_cannot_work_is_one_line_naming_its_json_path_before_weights_load(
        featurizers, error, match, tmp_path, write_doc, tiny_llama, monkeypatch):
    copy_sae(tmp_path, "topk")
    copy_sae(tmp_path, "gated")
    (tmp_path / "wide").mkdir()
    cfg = json.loads((SAELENS / "topk" / "cfg.json").read_text())
    (tmp_path / "wide" / "cfg.json").write_text(json.dumps({**cfg, "d_in": 64}))
    (tmp_path / "badk").mkdir()
    (tmp_path / "badk" / "cfg.json").write_text(json.dumps({**cfg, "k": 0}))
    from safetensors.torch import save_file

    save_file({"logits": torch.zeros(32)}, tmp_path / "m.safetensors")
    (tmp_path / "nofield").mkdir()
    (tmp_path / "nofield" / "cfg.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "d_sae"}))
    for name, n in (("few.jsonl", 3), ("one.jsonl", 1)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in weekday_rows(n)))
    if "b" in featurizers:
        featurizers["b"].pop("load")
        featurizers["b"]["seed"] = 0
    import transformers

    def no_weights(*args, **kwargs):
        raise AssertionError("weights were loaded")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    with pytest.raises(error, match=match) as caught:
        api.plan(write_doc(one_site(str(tiny_llama), featurizers, "f"), weekday_rows(8)))
    assert "\n" not in str(caught.value)
