"""Engine ``ndif`` against a real NDIF server started on this machine (loopback only)."""

from __future__ import annotations

import filecmp
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from causalab_core.plugins.registry import registry
from causalab_core.plugins.provenance import causalab_digests, watched_versions

ROOT = Path(__file__).resolve().parents[3]
CAUSALAB = str(Path(sys.executable).parent / "causalab")
SWEEP = ROOT / "documents/real/weekdays_layer_sweep.json"


def run_local(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CAUSALAB, "run", *map(str, args)], capture_output=True, text=True)


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_sweep_through_the_server_writes_the_local_files_byte_for_byte(ndif_server, tmp_path):
    remote = ndif_server.run([CAUSALAB, "run", str(SWEEP), "--engine", "ndif", "--out", str(tmp_path / "r")])
    assert remote.returncode == 0, remote.stderr
    local = run_local(SWEEP, "--engine", "nnterp", "--out", tmp_path / "l")
    assert local.returncode == 0, local.stderr

    # stdout lists what was written (nnsight's job status goes to stderr), the same list as a local run
    assert remote.stdout.replace(str(tmp_path / "r"), "OUT") == local.stdout.replace(str(tmp_path / "l"), "OUT")
    here, there = tree(tmp_path / "l"), tree(tmp_path / "r")
    # document, run, manifest and the generated data.jsonl; per point, its document and three metric files
    assert sorted(here) == sorted(there) and len(here) == 4 + 24 * 4
    assert [name for name in here if name not in ("run.json", "manifest.json") and here[name] != there[name]] == []

    mine, theirs = json.loads(here["run.json"]), json.loads(there["run.json"])
    assert {k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)} == {
        "engine", "remote", "server", "served_dtype", "server_causalab", "code", "components", "jobs", "causalab"} | (
        {"arithmetic"} if mine["arithmetic"] != theirs["arithmetic"] else set())
    # causalab: the run's own distributions (#48), which differ by the engine's alone
    assert set(mine["causalab"]["distributions"]) ^ set(theirs["causalab"]["distributions"]) == {"causalab-ndif"}
    # Each job's points and bytes on the wire, as run.json keeps them and the run's stderr says them.
    jobs = theirs["jobs"]
    assert [job["points"] for job in jobs] == [16, 8]  # chunks of the 24 points
    assert all(job["sent_bytes"] > 1000 and job["received_bytes"] > 1000 for job in jobs)
    said = [line for line in remote.stderr.splitlines() if line.startswith("job of ")]
    assert said == [f"job of {j['points']} points: sent {j['sent_bytes']:,} bytes, "
                    f"received {j['received_bytes']:,} bytes" for j in jobs]
    assert theirs["components"]["engine"] == {"ndif": f"causalab-ndif {theirs['causalab']['distributions']['causalab-ndif']['version']}"}
    assert (mine["remote"], theirs["remote"]) == (False, True)
    assert theirs["server"] == {"asked": ndif_server.host, "python": sys.version.split()[0],
                                "versions": watched_versions()}
    assert theirs["served_dtype"] == "torch.float32"
    # The block ran the server's installed causalab: none of it travelled with the request.
    assert theirs["code"] == {"travelled": "installed"}
    # The server computed its own digest of its installed causalab: a lean image, whose every
    # distribution is this client's, byte for byte.
    assert sorted(theirs["server_causalab"]) == ["causalab-core", "causalab-featurizers", "causalab-nnterp"]
    client = causalab_digests(registry())["distributions"]
    assert theirs["server_causalab"] == {name: client[name] for name in theirs["server_causalab"]}


def test_ragged_and_chat_documents_come_home_the_same(ndif_server, tmp_path):
    for name in ("entity_patch", "chat_turn"):
        doc = ROOT / "documents/v2" / f"{name}.json"
        remote = ndif_server.run([CAUSALAB, "run", str(doc), "--engine", "ndif", "--out", str(tmp_path / f"r-{name}")])
        assert remote.returncode == 0, remote.stderr
        assert run_local(doc, "--engine", "nnterp", "--out", tmp_path / f"l-{name}").returncode == 0
        compared = filecmp.dircmp(tmp_path / f"l-{name}", tmp_path / f"r-{name}", ignore=["run.json", "manifest.json"])
        assert compared.diff_files == [] and compared.left_only == [] and compared.right_only == []



def test_das_trains_inside_the_servers_session(ndif_server, tmp_path):
    """The rotation is trained on the server and comes home with its identity.

    Not bit-identical to a local fit: the server's model actor runs torch on one
    thread (Ray's default for an actor), and a backward pass sums its gradients
    in an order that depends on the thread count. Forward-only documents are
    byte-identical (the tests above).
    """
    from safetensors import safe_open

    document = json.loads((ROOT / "documents/real/weekdays_das.json").read_text())
    document["sweep"].update(rank=[8], seed=[0])
    path = tmp_path / "das.json"
    path.write_text(json.dumps(document))
    remote = ndif_server.run([CAUSALAB, "run", str(path), "--engine", "ndif", "--out", str(tmp_path / "r")])
    assert remote.returncode == 0, remote.stderr
    assert run_local(path, "--engine", "nnterp", "--out", tmp_path / "l").returncode == 0

    point = "layer=5,pos=-1,rank=8,seed=0"
    assert sorted(tree(tmp_path / "l")) == sorted(tree(tmp_path / "r"))
    iia = [json.loads((tmp_path / side / point / "iia_answer.json").read_text())["summary"]["mean"] for side in "lr"]
    assert min(iia) >= 0.9 and abs(iia[0] - iia[1]) <= 0.05, iia
    with safe_open(tmp_path / "l" / point / "das.safetensors", "pt") as a, \
         safe_open(tmp_path / "r" / point / "das.safetensors", "pt") as b:
        assert a.metadata() == b.metadata()
        assert a.get_tensor("rotation").shape == b.get_tensor("rotation").shape == (64, 64)


def test_a_write_with_nothing_to_write_fails_with_the_local_message(ndif_server, write_doc, tmp_path):
    document = json.loads((ROOT / "documents/v2/entity_patch.json").read_text())
    rows = [json.loads(line) for line in (ROOT / "documents/data/entity/test.jsonl").read_text().splitlines()[:4]]
    rows[2]["entity"] = "Zed"
    document["data"] = {"path": "rows.jsonl"}
    path = write_doc(document, rows)
    local = run_local(path, "--engine", "nnterp", "--out", tmp_path / "l")
    remote = ndif_server.run([CAUSALAB, "run", str(path), "--engine", "ndif", "--out", str(tmp_path / "r")])
    assert local.returncode == remote.returncode == 1
    assert remote.stderr == local.stderr
    assert local.stderr.startswith(f"PlanError: {path}: write 'patch' has nothing to write on row(s) "
                                   "{'rows.jsonl:3': 'alignment_missing'}")
    assert not (tmp_path / "l").exists() and not (tmp_path / "r").exists()


def test_a_model_the_server_does_not_serve_is_refused_with_what_it_serves(ndif_server, sweep_doc, tiny_llama, tmp_path):
    done = ndif_server.run([CAUSALAB, "run", str(sweep_doc), "--engine", "ndif", "--out", str(tmp_path / "o")])
    assert done.returncode == 1
    line = done.stderr.strip()
    assert line.startswith(f"PlanError: model {tiny_llama} is not served by the NDIF server at "
                           f"{ndif_server.host}; it serves: "), line
    assert "causalab-toy/entity@" in line and "causalab-toy/weekdays@" in line and "\n" not in line
    assert not (tmp_path / "o").exists()


def test_a_document_without_the_served_revision_is_told_the_revision_to_pin(ndif_server, write_doc, tmp_path):
    document = json.loads(SWEEP.read_text())
    served, revision = document["model"].pop("revision"), None
    document["sweep"] = {"layer": [0], "pos": [-1]}
    done = ndif_server.run([CAUSALAB, "run", str(write_doc(document)), "--engine", "ndif", "--out", str(tmp_path / "o")])
    assert done.returncode == 1
    asked = f"at revision {revision}" if revision else "with no model.revision"
    shown = f"causalab-toy/weekdays@{revision}" if revision else "causalab-toy/weekdays"
    assert done.stderr.startswith(
        f"PlanError: model {shown} is not served by the NDIF server at {ndif_server.host} (the document asks for it "
        f"{asked}; the server has it at revision {served}: pin one in the document, "
        f'"model": {{"revision": "{served}"}}); it serves: '), done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "o").exists()


def test_another_revision_than_served_is_told_too_and_another_model_is_not():
    from causalab_core.errors import PlanError
    from causalab_ndif.preflight import refuse_unserved

    def key(repo, revision, cls="causalab_nnterp.model.ServedTransformer"):
        return f'{cls}:{json.dumps({"repo_id": repo, "revision": revision, "task": "text-generation"})}'

    served = {key("org/m", "aaa"): {}, key("org/m", "bbb"): {}, key("org/other", "ccc"): {},
              key("org/m", "ddd", "nnsight.modeling.transformers.TransformersModel"): {}}
    with pytest.raises(PlanError) as told:
        refuse_unserved(key("org/m", "zzz"), served, "http://h", "org/m@zzz", "zzz")
    assert "(the document asks for it at revision zzz; the server has it at revision aaa or bbb: pin one" in str(told.value)
    with pytest.raises(PlanError) as told:
        refuse_unserved(key("org/new", None), served, "http://h", "org/new")
    assert str(told.value) == ("model org/new is not served by the NDIF server at http://h; it serves: org/m@aaa, "
                               "org/m@bbb, org/m@ddd, org/other@ccc")


def test_an_unreachable_host_is_one_line_naming_it(sweep_doc, tmp_path):
    done = subprocess.run([CAUSALAB, "run", str(sweep_doc), "--engine", "ndif", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, env={**os.environ, "NDIF_HOST": "http://127.0.0.1:9"})
    assert done.returncode == 1
    assert done.stderr.startswith("EngineError: cannot reach the NDIF server at http://127.0.0.1:9:")
    assert done.stderr.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_the_timeout_bounds_the_first_request_to_a_server_that_never_answers(sweep_doc, tmp_path):
    """A socket that accepts and never answers: the run ends within its timeout, the /env request included."""
    import socket
    import time

    def run(host: str, *options: str) -> tuple[subprocess.CompletedProcess, float]:
        began = time.monotonic()
        done = subprocess.run([CAUSALAB, "run", str(sweep_doc), "--engine", "ndif", "--out", str(tmp_path / "o"),
                               *options], capture_output=True, text=True, env={**os.environ, "NDIF_HOST": host})
        return done, time.monotonic() - began

    _, baseline = run("http://127.0.0.1:9")  # start-up and compiling, refused at once
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshake; nobody ever reads or writes
        host = f"http://127.0.0.1:{silent.getsockname()[1]}"
        done, seconds = run(host, "--option", "timeout=3")
    assert done.returncode == 1
    assert done.stderr == (f"EngineError: the NDIF server at {host} did not answer /env within 3 s "
                           "(--option timeout=SECONDS)\n")
    assert seconds < baseline + 3 + 3, (seconds, baseline)
    assert not (tmp_path / "o").exists()


# -- skew: a client whose causalab differs from the server's --------------------------------------


def _installed(package: str) -> str:
    return importlib.metadata.version(package.replace("_", "-"))


def _other(package: str) -> str:
    """A version of ``package`` that is not the installed one."""
    return _installed(package) + ".post1"


def _client_site(tmp_path: Path, *, package: str = "causalab_metrics", version: str | None = None, edit: bool = False,
                 extra_plugin: bool = False) -> Path:
    """A site folder: this environment, but with its own copy of one causalab package (and maybe one more plugin)."""
    import importlib
    import sysconfig

    site = tmp_path / "site"
    site.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith((f"{package}-", f"_editable_impl_{package}.", f"__editable__.{package}-")):
            (site / entry.name).symlink_to(entry)
    copy = site / package
    shutil.copytree(Path(importlib.import_module(package).__file__).parent, copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    if edit:
        with open(copy / "__init__.py", "a") as f:
            f.write("# a local change the server does not have\n")
    short = package.removeprefix("causalab_")
    _dist_info(site, f"causalab-{short}", version or _installed(package), f"{short} = {package}")
    if extra_plugin:
        (site / "causalab_extra.py").write_text('"""A plugin only the client has."""\n')
        _dist_info(site, "causalab-extra", "0.0.1", "extra = causalab_extra")
    return site


def _dist_info(site: Path, name: str, version: str, entry_point: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[causalab]\n{entry_point}\n")


def _run_from(site: Path, server, *args: str):
    code = ("import site, sys; site.addsitedir(sys.argv[1]); sys.argv = sys.argv[1:];"
            "from causalab_core.cli import main; main()")
    return server.run([sys.executable, "-S", "-c", code, str(site), "run", *map(str, args)])


@pytest.mark.parametrize("package", ["causalab_nnterp", "causalab_featurizers"])
def test_a_server_with_other_versions_of_what_the_block_runs_is_refused_before_any_work(ndif_server, tmp_path, package):
    site = _client_site(tmp_path, package=package, version=_other(package))
    document = ROOT / "documents/real/weekdays_das.json"  # its block runs nnterp's code and featurizers' DAS
    done = _run_from(site, ndif_server, document, "--engine", "ndif", "--out", tmp_path / "o")
    assert done.returncode == 1, done.stderr
    line = done.stderr.strip()
    named = f"{package.replace('_', '-')} (client {_other(package)}, server {_installed(package)})"
    assert line.startswith(f"EngineError: the NDIF server at {ndif_server.host} does not have what this client "
                           f"would run there: {named}. "), line
    assert not (tmp_path / "o").exists()


def test_a_server_without_client_only_plugins_is_accepted_without_a_flag(ndif_server, tmp_path):
    """Metrics, positions and engines run on the client: their versions and sources are none of the server's business."""
    site = _client_site(tmp_path, package="causalab_metrics", version=_other("causalab_metrics"), edit=True,
                        extra_plugin=True)
    done = _run_from(site, ndif_server, SWEEP, "--engine", "ndif", "--out", tmp_path / "o")
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "o" / "run.json").read_text())
    assert "skew" not in record and set(record["server_causalab"]) >= {"causalab-core", "causalab-nnterp"}
    assert record["components"]["metric"]["iia"] == f"causalab-metrics {_other('causalab_metrics')}"


def test_same_version_other_sources_is_caught_by_the_servers_own_digest(ndif_server, tmp_path):
    site = _client_site(tmp_path, package="causalab_nnterp", edit=True)
    done = _run_from(site, ndif_server, SWEEP, "--engine", "ndif", "--out", tmp_path / "o")
    assert done.returncode == 1, done.stderr
    line = done.stderr.strip().splitlines()[-1]  # above it: nnsight's job status lines
    assert line.startswith("EngineError: the server's causalab sources differ from the client's: causalab-nnterp "
                           f"(client {_installed('causalab_nnterp')} "), line
    assert "Traceback" not in done.stderr and not (tmp_path / "o").exists()

    verbose = _run_from(site, ndif_server, SWEEP, "--engine", "ndif", "--out", tmp_path / "o", "--verbose")
    assert "The server's traceback:" in verbose.stderr and "causalab_core.errors.EngineError" in verbose.stderr

    allowed = _run_from(site, ndif_server, SWEEP, "--engine", "ndif", "--out", tmp_path / "o", "--option", "allow_skew=true")
    assert allowed.returncode == 0, allowed.stderr
    record = json.loads((tmp_path / "o" / "run.json").read_text())
    assert list(record["skew"]) == ["causalab-nnterp"]


def test_ndif_env_shows_client_and_server_side_by_side(ndif_server):
    done = ndif_server.run([CAUSALAB, "ndif", "env", "--host", ndif_server.host], env={"COLUMNS": "160"})
    assert done.returncode == 0, done.stderr
    table = done.stdout
    for name in ("torch", "nnsight", "causalab-core", "causalab-metrics"):
        assert any(line.split("│")[1].strip() == name for line in table.splitlines() if line.count("│") > 3), name
    assert "differs" not in table
    assert "causalab-toy/weekdays" in table and "causalab-toy/entity" in table and "float32" in table
    core = importlib.metadata.version("causalab-core")
    assert (f"code=auto picks installed: the server's /env lists causalab-core {core}, so the block runs the "
            "server's own copy") in table


DECOY_CLIENT = """
import json, sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from causalab_core import api
from causalab_core.plugins.registry import registry

document, rotation = Path(sys.argv[1]), Path(sys.argv[2])
plan = api.plan(document)  # the client reads the trained file here, once
with safe_open(rotation, "pt") as f:
    identity = f.metadata()
save_file({"rotation": torch.eye(64)}, rotation, metadata=identity)  # a decoy at the same path
results = registry().get("engine", "ndif")().execute(plan, featurizers=api.featurizer_classes(plan, registry()))
rotation.unlink()  # and no file at all
again = registry().get("engine", "ndif")().execute(plan, featurizers=api.featurizer_classes(plan, registry()))
step = plan.points[0].steps[-1].path
print(json.dumps([results[step]["answer_logits"].tolist(), again[step]["answer_logits"].tolist()]))
"""


def test_a_loaded_featurizer_travels_to_the_server_and_a_decoy_at_its_path_changes_nothing(ndif_server, tmp_path):
    import torch
    from safetensors.torch import save_file

    from causalab_core import api
    from causalab_core.compiler.featurizers import identity
    from causalab_core.ir import FeaturizerRef

    document = json.loads((ROOT / "documents/real/weekdays_das.json").read_text())
    document["featurizers"]["das"] = {"kind": "das", "rank": {"sweep": "rank"}, "load": "q.safetensors"}
    document["sweep"]["rank"] = [8]
    del document["sweep"]["seed"]
    path = tmp_path / "das.json"
    path.write_text(json.dumps(document))
    probe = api.plan(SWEEP)
    site = next(w.site for p in probe.points for s in p.steps for w in getattr(s, "writes", ())
                if w.site.layer == 5 and w.site.component == "block_input")
    torch.manual_seed(3)
    save_file({"rotation": torch.linalg.qr(torch.randn(64, 64))[0].contiguous()}, tmp_path / "q.safetensors",
              metadata=identity(probe.model, site, -1, FeaturizerRef("das", "das", {"rank": 8})))
    plan = api.plan(path)
    local = registry().get("engine", "nnterp")().execute(plan, featurizers=api.featurizer_classes(plan, registry()))
    expected = local[plan.points[0].steps[-1].path]["answer_logits"].tolist()

    done = ndif_server.run([sys.executable, "-c", DECOY_CLIENT, str(path), str(tmp_path / "q.safetensors")])
    assert done.returncode == 0, done.stderr
    with_decoy, without_file = json.loads(done.stdout.strip().splitlines()[-1])
    # The server used the client's trained rotation: the numbers of a local run with the real file, bit for bit.
    assert with_decoy == without_file == expected


# -- the served dtype, said aloud ---------------------------------------------------------------------


def _gpt2_document(write_doc, tiny_gpt2):
    from causalab_testing.data import sweep_document, weekday_rows

    return write_doc(sweep_document(str(tiny_gpt2), layers=(1, 2)), weekday_rows(8))


def test_a_deployment_in_another_dtype_warns_in_one_line_and_is_recorded(ndif_server, write_doc, tiny_gpt2, tmp_path):
    document = _gpt2_document(write_doc, tiny_gpt2)  # a float32 document; the server holds tiny-gpt2 in bfloat16
    done = ndif_server.run([CAUSALAB, "run", str(document), "--engine", "ndif", "--out", str(tmp_path / "o")])
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: the NDIF server at {ndif_server.host} serves {tiny_gpt2} in bfloat16, not the "
                        "document's float32: its numbers are not those of a float32 run (recorded in run.json; "
                        "--option require_dtype=true refuses)"]
    record = json.loads((tmp_path / "o" / "run.json").read_text())
    assert record["dtype_mismatch"] == {"document": "float32", "served": "bfloat16"}
    assert record["served_dtype"] == "torch.bfloat16"


def test_require_dtype_refuses_another_dtype_before_any_work(ndif_server, write_doc, tiny_gpt2, tmp_path):
    document = _gpt2_document(write_doc, tiny_gpt2)
    done = ndif_server.run([CAUSALAB, "run", str(document), "--engine", "ndif", "--out", str(tmp_path / "o"),
                            "--option", "require_dtype=true"])
    assert done.returncode == 1
    assert done.stderr == (f"EngineError: the NDIF server at {ndif_server.host} serves {tiny_gpt2} in bfloat16, not "
                           "the document's float32: its numbers are not those of a float32 run\n")
    assert not (tmp_path / "o").exists()


def test_a_deployment_in_the_documents_dtype_says_nothing(ndif_server, tmp_path):
    done = ndif_server.run([CAUSALAB, "run", str(SWEEP), "--engine", "ndif", "--out", str(tmp_path / "o"),
                            "--option", "require_dtype=true"])
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
    assert "dtype_mismatch" not in json.loads((tmp_path / "o" / "run.json").read_text())


def test_an_error_only_the_server_can_see_is_the_local_line_and_exit_code(ndif_server, server_only_error):
    told = server_only_error(ndif_server)
    line = "EngineError: featurizer 'das': its trained state does not match the digest the client recorded"
    assert told["nnterp"] == ["EngineError", line, 1, False]
    assert told["ndif"] == ["EngineError", line, 1, True]  # raised on the server; its traceback came along


def test_a_remote_sweep_killed_midway_resumes_to_the_same_bytes(ndif_server, tmp_path):
    """Each chunk of points is its own job; a run killed after some are kept finishes with --resume."""
    import signal
    import time

    from causalab_core.results.resume import store_path

    whole = ndif_server.run([CAUSALAB, "run", str(SWEEP), "--engine", "ndif", "--out", str(tmp_path / "whole")])
    assert whole.returncode == 0, whole.stderr
    out = tmp_path / "o"
    process = subprocess.Popen(ndif_server.command([CAUSALAB, "run", str(SWEEP), "--engine", "ndif", "--out", str(out)]),
                               env=ndif_server.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    points, deadline = store_path(out) / "points", time.monotonic() + 180
    while process.poll() is None and time.monotonic() < deadline and not (
            points.is_dir() and any(p.name.isdigit() for p in points.iterdir())):
        time.sleep(0.02)
    assert process.poll() is None
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    kept = len([p for p in points.iterdir() if p.name.isdigit()])
    assert not out.exists() and 0 < kept < 24
    resumed = ndif_server.run([CAUSALAB, "run", str(SWEEP), "--engine", "ndif", "--out", str(out), "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    here, there = tree(out), tree(tmp_path / "whole")
    assert sorted(here) == sorted(there)
    assert [name for name in here if name not in ("run.json", "manifest.json") and here[name] != there[name]] == []
    # run.json is the whole run's but for its jobs: the interrupted run's first job is listed, then the jobs
    # of the points it had not kept (bytes on the wire are measured, not decided: they vary by a few bytes).
    mine, theirs = json.loads(here["run.json"]), json.loads(there["run.json"])
    assert [job["points"] for job in theirs.pop("jobs")] == [16, 8]
    left = 24 - kept
    assert [job["points"] for job in mine.pop("jobs")] == [16, *([16, left - 16] if left > 16 else [left])]
    assert mine == theirs



def test_metrics_that_read_the_vocabulary_and_the_clean_runs_come_home_the_same(ndif_server, write_doc, tmp_path):
    """kl (full log-probabilities of two runs travel), answer_rank (reduced on the server) and
    normalized_logit_diff (three runs' answer columns) give the local bytes."""
    document = json.loads(SWEEP.read_text())
    document["sweep"] = {"layer": [2, 5], "pos": [-1]}
    document["data"]["causal_model"]["rows"] = 20
    document["metrics"] = {
        "kl": {"kind": "kl"}, "kl_base": {"kind": "kl", "reference": "base"},
        "rank": {"kind": "answer_rank", "answer": "cf_answer"},
        "nld": {"kind": "normalized_logit_diff", "target": "cf_answer", "other": "base_answer"},
    }
    path = write_doc(document)
    remote = ndif_server.run([CAUSALAB, "run", str(path), "--engine", "ndif", "--out", str(tmp_path / "r")])
    assert remote.returncode == 0, remote.stderr
    local = run_local(path, "--engine", "nnterp", "--out", tmp_path / "l")
    assert local.returncode == 0, local.stderr
    here, there = tree(tmp_path / "l"), tree(tmp_path / "r")
    assert sorted(here) == sorted(there) and len([n for n in here if n.endswith("/kl.json")]) == 2
    assert [name for name in here if name not in ("run.json", "manifest.json") and here[name] != there[name]] == []
