"""Engine ``ndif`` against a real NDIF server with no causalab (and no nnterp) installed: the code travels by value."""

from __future__ import annotations

import filecmp
import json
import sys
import sysconfig
from pathlib import Path

import pytest

from causalab_core.plugins.provenance import watched_versions

ROOT = Path(__file__).resolve().parents[3]
CAUSALAB = str(Path(sys.executable).parent / "causalab")
SWEEP = ROOT / "documents/real/weekdays_layer_sweep.json"


def run(server, document, out, *options):
    return server.run([CAUSALAB, "run", str(document), "--engine", "ndif", "--out", str(out), *options])


def run_local(document, out):
    import subprocess

    done = subprocess.run([CAUSALAB, "run", str(document), "--engine", "nnterp", "--out", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def same_files(local: Path, remote: Path) -> None:
    compared = filecmp.dircmp(local, remote, ignore=["run.json", "manifest.json"])

    def differing(c):
        return c.diff_files + c.left_only + c.right_only + [f for sub in c.subdirs.values() for f in differing(sub)]

    assert differing(compared) == []


def test_the_sweep_runs_with_its_code_shipped_and_writes_the_local_files_byte_for_byte(bare_server, tmp_path):
    from causalab_ndif.shipping import Shipment

    done = run(bare_server, SWEEP, tmp_path / "r")  # code=auto: the server's /env has no causalab-core
    assert done.returncode == 0, done.stderr
    run_local(SWEEP, tmp_path / "l")
    same_files(tmp_path / "l", tmp_path / "r")
    assert len(list((tmp_path / "r").rglob("iia*.json"))) == 24 * 3  # three IIA metrics per point

    record = json.loads((tmp_path / "r" / "run.json").read_text())
    code = record["code"]
    assert code["travelled"] == "by value"
    # Only the modules the block uses went, none of the client-only plugins (metrics, positions, ndif).
    assert {"causalab_nnterp.block", "causalab_nnterp.sites", "causalab_core.runtime.windows"} <= set(code["modules"])
    assert {m.split(".")[0] for m in code["modules"]} == {"causalab_core", "causalab_nnterp"}
    assert not any(m.startswith(("causalab_core.compiler", "causalab_core.api")) for m in code["modules"])
    import importlib

    for name in code["modules"]:
        importlib.import_module(name)
    assert code["digest"] == Shipment(set(code["modules"])).digest()  # the digest of these sources, here
    # The server's own packages, from its /env: the client's versions, and no nnterp.
    versions = record["server"]["versions"]
    assert versions["nnterp"] is None
    assert {k: versions[k] for k in ("torch", "transformers", "nnsight")} == {
        k: watched_versions()[k] for k in ("torch", "transformers", "nnsight")}
    assert record["server_causalab"] is None and record["served_dtype"] == "torch.float32"


def test_anchored_and_chat_documents_come_home_the_same(bare_server, tmp_path):
    for name in ("entity_patch", "chat_turn"):
        doc = ROOT / "documents/v2" / f"{name}.json"
        done = run(bare_server, doc, tmp_path / f"r-{name}")
        assert done.returncode == 0, done.stderr
        run_local(doc, tmp_path / f"l-{name}")
        same_files(tmp_path / f"l-{name}", tmp_path / f"r-{name}")


def test_das_trains_on_a_server_without_causalab(bare_server, tmp_path):
    """As on a server with causalab (test_ndif_engine): the server's actor runs torch on one thread, so a
    trained rotation is within training's spread of a local fit, not bit-identical."""
    document = json.loads((ROOT / "documents/real/weekdays_das.json").read_text())
    document["sweep"].update(rank=[8], seed=[0])
    path = tmp_path / "das.json"
    path.write_text(json.dumps(document))
    done = run(bare_server, path, tmp_path / "r")
    assert done.returncode == 0, done.stderr
    run_local(path, tmp_path / "l")
    point = "layer=5,pos=-1,rank=8,seed=0"
    iia = [json.loads((tmp_path / side / point / "iia_answer.json").read_text())["summary"]["mean"] for side in "lr"]
    assert min(iia) >= 0.9 and abs(iia[0] - iia[1]) <= 0.05, iia
    code = json.loads((tmp_path / "r" / "run.json").read_text())["code"]
    assert "causalab_featurizers.das" in code["modules"]


def test_an_error_raised_by_shipped_code_on_the_server_is_the_local_line(bare_server, server_only_error):
    told = server_only_error(bare_server)
    line = "EngineError: featurizer 'das': its trained state does not match the digest the client recorded"
    assert told["nnterp"] == ["EngineError", line, 1, False]
    assert told["ndif"] == ["EngineError", line, 1, True]


def test_asking_for_the_installed_code_on_a_server_without_it_is_refused_in_one_line(bare_server, tmp_path):
    done = run(bare_server, SWEEP, tmp_path / "o", "--option", "code=installed")
    assert done.returncode == 1
    assert done.stderr.startswith(f"EngineError: the NDIF server at {bare_server.host} does not have what this "
                                  "client would run there: causalab-core (client "), done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "o").exists()
    assert done.stderr.rstrip().endswith("or --option code=shipped to send this client's causalab code with the request")


def test_another_nnsight_on_the_client_is_refused_before_any_work(bare_server, tmp_path):
    """The shipped code runs on the server's torch, transformers and nnsight: their versions must be the client's."""
    site = tmp_path / "site"
    site.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith("nnsight-"):
            (site / entry.name).symlink_to(entry)
    installed = watched_versions()["nnsight"]
    info = site / f"nnsight-{installed}.post1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nnsight\nVersion: {installed}.post1\n")
    code = ("import site, sys; site.addsitedir(sys.argv[1]); sys.argv = sys.argv[1:];"
            "from causalab_core.cli import main; main()")
    done = bare_server.run([sys.executable, "-S", "-c", code, str(site), "run", str(SWEEP), "--engine", "ndif",
                            "--out", str(tmp_path / "o")])
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(
        f"EngineError: the NDIF server at {bare_server.host} does not have what this client would run there: "
        f"nnsight (client {installed}.post1, server {installed}). "), done.stderr
    assert "code=shipped" not in done.stderr  # shipping cannot help: the shipped code runs on the server's nnsight
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("asked", ["shipped", "auto"])
def test_the_mode_is_what_was_asked_or_what_the_server_needs(ndif_server, tmp_path, asked):
    """On a server with causalab: ``auto`` runs its installed copy; ``shipped`` ships anyway, same bytes."""
    done = run(ndif_server, SWEEP, tmp_path / asked, "--option", f"code={asked}")
    assert done.returncode == 0, done.stderr
    travelled = json.loads((tmp_path / asked / "run.json").read_text())["code"]["travelled"]
    assert travelled == {"shipped": "by value", "auto": "installed"}[asked]
    if asked == "shipped":
        run_local(SWEEP, tmp_path / "l")
        same_files(tmp_path / "l", tmp_path / asked)


def test_ndif_env_shows_a_server_without_causalab(bare_server):
    done = bare_server.run([CAUSALAB, "ndif", "env", "--host", bare_server.host], env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    rows = {line.split("│")[1].strip(): line for line in done.stdout.splitlines() if line.count("│") > 3}
    assert "not installed" in rows["causalab-core"] and "not installed" in rows["nnterp"]
    assert "differs" not in rows["torch"] and "differs" not in rows["nnsight"]
    assert "causalab-toy/weekdays" in done.stdout
    # What the installed mode would need there is not "client only"; what never runs there is.
    assert rows["causalab-core"].split("│")[4].strip() == "needed for code=installed"
    assert rows["causalab-nnterp"].split("│")[4].strip() == "needed for code=installed"
    assert rows["causalab-featurizers"].split("│")[4].strip() == (
        "needed for code=installed by documents using its featurizers")
    assert rows["causalab-metrics"].split("│")[4].strip() == "client only"
    assert "code=auto picks shipped: the server's /env lists no causalab-core, so the block's code travels by value" \
        in done.stdout


def featurizers_document(tmp_path: Path) -> Path:
    """The answer's controls study made small: PCA, the mask, boundless DAS, DAS and a mask over an SAE's
    features, trained on 64 pairs for 2 epochs, and the SAE alone (forward only)."""
    document = json.loads((ROOT / "documents/real/weekdays_featurizers_answer_controls.json").read_text())
    document.pop("sweep")
    kinds = ["pca", "mask", "boundless", "das", "sae_mask", "sae"]
    for name, spec in document["featurizers"].items():
        if "train" in spec:
            spec["train"]["data"]["causal_model"]["rows"] = 64
            if "label" in spec["train"]:  # trained by interchange (PCA is fitted in one pass)
                spec["train"].update(epochs=2)
            spec["train"].pop("labels", None)
        if name == "sae":
            spec["path"] = str(ROOT / "documents/real" / spec["path"])
    document["inputs"] = ["base", "counterfactual", *kinds]
    document["columns"] = {k: "base" for k in kinds}
    site = {k: document["reads"]["cf_resid"][k] for k in ("layer", "site", "position")}
    document["writes"] = {f"via_{k}": {"input": k, "source": "cf_resid", **site, "featurizer": k} for k in kinds}
    document["metrics"] = {f"iia_{k}": {**document["metrics"]["iia_pca"], "input": k} for k in kinds}
    document["featurizers"] = {k: v for k, v in document["featurizers"].items() if not k.startswith("random")}
    path = tmp_path / "featurizers.json"
    path.write_text(json.dumps(document))
    return path


def test_every_featurizer_kind_runs_on_servers_with_and_without_causalab(ndif_server, bare_server, tmp_path):
    """What is fitted without a backward pass (PCA) and what only runs forward (the SAE) comes home byte for
    byte; what is trained comes home within training's spread (the server's actor runs torch on one thread),
    with the same identity."""
    from safetensors import safe_open

    path = featurizers_document(tmp_path)
    run_local(path, tmp_path / "l")
    for server, side in ((ndif_server, "installed"), (bare_server, "shipped")):
        done = run(server, path, tmp_path / side)
        assert done.returncode == 0, done.stderr
        for name in ("iia_sae.json", "iia_pca.json", "pca.safetensors"):
            assert (tmp_path / "l" / name).read_bytes() == (tmp_path / side / name).read_bytes(), (side, name)
        for kind in ("mask", "boundless", "das", "sae_mask"):
            iia = [json.loads((tmp_path / s / f"iia_{kind}.json").read_text())["summary"]["mean"] for s in ("l", side)]
            assert abs(iia[0] - iia[1]) <= 0.1, (side, kind, iia)
            with safe_open(tmp_path / "l" / f"{kind}.safetensors", "pt") as a, \
                 safe_open(tmp_path / side / f"{kind}.safetensors", "pt") as b:
                drop = ("units", "size")  # what training chose: within its spread, not bit for bit
                assert {k: v for k, v in a.metadata().items() if k not in drop} == \
                       {k: v for k, v in b.metadata().items() if k not in drop}
    code = json.loads((tmp_path / "shipped" / "run.json").read_text())["code"]
    assert {"causalab_featurizers.pca", "causalab_featurizers.mask", "causalab_featurizers.boundless",
            "causalab_featurizers.sae"} <= set(code["modules"])
