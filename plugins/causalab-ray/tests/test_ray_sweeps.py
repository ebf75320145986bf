"""A sweep on Ray workers writes the bytes of one process; a killed worker or client loses nothing; refusals are one line.

Every run here uses the session's one cluster (two CPUs on 127.0.0.1, `conftest.py`):
in-process runs as their process's own cluster, command-line runs by `--ray-address`.
The shipped weekdays layer sweep (24 points, 60 rows) runs in two chunks of 12 on
two workers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from causalab_core import api, hookimpl
from causalab_core.errors import EngineError
from causalab_core.plugins.registry import build_registry
from causalab_core.results.resume import store_path

ROOT = Path(__file__).resolve().parents[3]
CAUSALAB = str(Path(sys.executable).parent / "causalab")
SWEEP = ROOT / "documents/real/weekdays_layer_sweep.json"
SMALL = ROOT / "documents/real/weekdays_ablation_all.json"  # 8 points


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def same_run(out: Path, whole: Path) -> dict:
    """``out`` holds ``whole``'s files byte for byte, but run.json, which differs only by its ``ray``; that ``ray``."""
    mine, theirs = tree(out), tree(whole)
    assert sorted(mine) == sorted(theirs)
    differ = [rel for rel in mine if mine[rel] != theirs[rel]]
    assert set(differ) <= {"run.json", "manifest.json"}, differ
    run, base = json.loads(mine["run.json"]), json.loads(theirs["run.json"])
    ray = run.pop("ray")
    assert run == base
    return ray


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "sweep"
    api.run(SWEEP, out=out)
    return out


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CAUSALAB, "run", *args], capture_output=True, text=True, timeout=300)


def test_two_workers_write_the_bytes_of_one_process(ray_cluster, one_process, tmp_path):
    out = tmp_path / "w2"
    api.run(SWEEP, out=out, workers=2)
    ray = same_run(out, one_process)
    assert sorted(c["points"] for c in ray["chunks"]) == ["0-11", "12-23"]
    assert {c["worker"] for c in ray["chunks"]} == {0, 1}  # each chunk on its own worker
    assert len({w["pid"] for w in ray["workers"]}) == 2 and all(w["node"] == "127.0.0.1" for w in ray["workers"])
    assert not store_path(out).exists()


def test_a_worker_killed_mid_chunk_costs_only_its_chunk(ray_cluster, one_process, tmp_path):
    out = tmp_path / "killed"
    run = subprocess.Popen([CAUSALAB, "run", str(SWEEP), "--out", str(out), "--ray-address", ray_cluster.address,
                            "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = None
    deadline = time.monotonic() + 180
    while victim is None and time.monotonic() < deadline and run.poll() is None:
        victim = next((pid for pid in descendants(os.getpid()) if cmdline(pid).startswith("ray::ChunkWorker.run")),
                      None)
        time.sleep(0.05)
    assert victim is not None, run.communicate()
    os.kill(victim, signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr
    warnings = [line for line in stderr.splitlines() if "points done" not in line]
    assert len(warnings) == 1 and f"(pid {victim} on 127.0.0.1) died running points" in warnings[0], stderr
    assert "they run again on another of the 1 left" in warnings[0]
    only_files(stdout, out)
    ray = same_run(out, one_process)
    died = [c for c in ray["chunks"] if c.get("died")]
    assert len(died) == 1 and ray["workers"][died[0]["worker"]]["pid"] == victim
    rerun = [c for c in ray["chunks"] if c["points"] == died[0]["points"] and not c.get("died")]
    assert len(rerun) == 1 and rerun[0]["worker"] != died[0]["worker"]  # on the worker still alive


def only_files(stdout: str, out: Path) -> None:
    """What causalab promises on stdout: the files it wrote, one a line; nothing of Ray's (no colour codes)."""
    assert "\x1b" not in stdout and "raylet" not in stdout.lower()
    lines = stdout.splitlines()
    assert lines and all(Path(line).is_file() and Path(line).is_relative_to(out) for line in lines), stdout


def ray_workers_running(count: int, deadline_s: float = 180) -> list[int]:
    deadline, found = time.monotonic() + deadline_s, []
    while len(found) < count and time.monotonic() < deadline:
        found = [pid for pid in descendants(os.getpid()) if cmdline(pid).startswith("ray::ChunkWorker.run")]
        time.sleep(0.05)
    return found


def test_every_worker_killed_is_one_line_and_no_promise(ray_cluster, tmp_path):
    """Both workers killed together: one line saying every worker died, not first a line that the points run
    again on another worker; stdout holds nothing of Ray's."""
    out = tmp_path / "all"
    run = subprocess.Popen([CAUSALAB, "run", str(SWEEP), "--out", str(out), "--ray-address", ray_cluster.address,
                            "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victims = ray_workers_running(2)
    assert len(victims) == 2, run.communicate()
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 1 and stdout == ""
    lines = [line for line in stderr.splitlines() if "points done" not in line]
    assert len(lines) == 1 and "every Ray worker died" in lines[0] and "stay for --resume" in lines[0], stderr
    assert not out.exists()


def test_a_killed_client_leaves_no_process_and_no_folder(tmp_path):
    """The client SIGKILLed while its own local cluster runs a chunk: within seconds no process the cluster
    started is left (Ray's agents would live on for a minute or more), and its session folder is gone."""
    import tempfile

    from causalab_ray import reaper

    before = set(Path(tempfile.gettempdir()).glob(f"{reaper.PREFIX}*"))
    run = subprocess.Popen([CAUSALAB, "run", str(SWEEP), "--out", str(tmp_path / "o"), "--workers", "1"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    folder, deadline = None, time.monotonic() + 180
    while folder is None and time.monotonic() < deadline and run.poll() is None:
        made = set(Path(tempfile.gettempdir()).glob(f"{reaper.PREFIX}*")) - before
        folder = next((f for f in made if (f / reaper.OWNER).is_file()), None)
        time.sleep(0.05)
    assert folder is not None
    while time.monotonic() < deadline and not any(cmdline(p).startswith("ray::ChunkWorker")
                                                  for p in reaper.marked(str(folder))):
        time.sleep(0.05)
    started = reaper.marked(str(folder))
    assert len(started) >= 4  # gcs, raylet, agents, the worker...
    run.kill()
    run.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (reaper.marked(str(folder)) or folder.exists()):
        time.sleep(0.1)
    assert reaper.marked(str(folder)) == [] and not folder.exists()


def test_a_killed_client_resumes_without_the_cluster(ray_cluster, one_process, tmp_path):
    out = tmp_path / "resumed"
    # One worker: the chunks (16 and 8 points) run one after the other, and the client dies between them.
    run = subprocess.Popen([CAUSALAB, "run", str(SWEEP), "--out", str(out), "--ray-address", ray_cluster.address,
                            "--workers", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    points = store_path(out) / "points"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and run.poll() is None:
        if points.is_dir() and any(p.name.isdigit() for p in points.iterdir()):
            break
        time.sleep(0.02)
    assert run.poll() is None, run.communicate()
    run.kill()
    run.communicate(timeout=60)
    kept = sorted(int(p.name) for p in points.iterdir() if p.name.isdigit())
    assert 0 < len(kept) < 24, kept

    told = []
    api.run(SWEEP, out=out, resume=True, points_done=lambda done, total: told.append((done, total)))
    assert told[0] == (len(kept), 24)  # what the cluster finished is not run again
    ray = same_run(out, one_process)
    assert [c["points"] for c in ray["chunks"]] == ["0-15"]  # run.json says which points ran on the cluster


def test_no_cluster_at_the_address_is_one_line_before_any_work(tmp_path):
    out = tmp_path / "o"
    done = cli(str(SMALL), "--out", str(out), "--ray-address", "127.0.0.1:1")
    assert done.returncode != 0
    assert done.stderr.splitlines() == [
        "EngineError: --ray-address '127.0.0.1:1': no Ray cluster answers there (Connection refused)"]
    assert not out.exists() and not store_path(out).exists()


@pytest.fixture
def listener():
    """Something other than Ray on a loopback port: ``answer`` (bytes) sent back to what connects, or silence."""
    import socket
    import threading

    def serve(answer):
        server = socket.create_server(("127.0.0.1", 0))

        def loop():
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                conn.recv(64)
                if answer:
                    conn.sendall(answer)
                threading.Timer(30, conn.close).start()

        threading.Thread(target=loop, daemon=True).start()
        servers.append(server)
        return f"127.0.0.1:{server.getsockname()[1]}"

    servers: list = []
    yield serve
    for server in servers:
        server.close()


@pytest.mark.parametrize("answer,said", [
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "it answered b'HTTP/1.1 '"),
    (None, "nothing came back within 5 s"),
], ids=["http", "silent"])
def test_something_else_at_the_address_is_one_line_within_seconds(listener, answer, said, tmp_path):
    address, out = listener(answer), tmp_path / "o"
    started = time.monotonic()
    done = cli(str(SMALL), "--out", str(out), "--ray-address", address)
    assert done.returncode != 0 and time.monotonic() - started < 60
    assert done.stderr.splitlines() == [f"EngineError: --ray-address '{address}': what listens there is not a Ray "
                                        f"cluster ({said}); give the address `ray start --head` printed"]
    assert done.stdout == "" and not out.exists() and not store_path(out).exists()


def test_an_impossible_count_of_workers_is_one_line_naming_the_option(tmp_path):
    out = tmp_path / "o"
    done = cli(str(SMALL), "--out", str(out), "--workers", "1000000000")
    cpus = os.cpu_count()
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.splitlines() == [f"EngineError: --workers 1000000000: the cluster has {cpus} CPUs, so at most "
                                        f"{4 * cpus} workers (4 a CPU)"]
    assert not out.exists() and not store_path(out).exists()


def test_a_client_of_another_ray_version_is_one_line(ray_cluster, tmp_path):
    out = tmp_path / "o"
    pretend = ("import sys, ray; ray.__version__ = '2.59.0'; from causalab_core.cli import app; "
               "sys.argv[0] = 'causalab'; app()")
    done = subprocess.run([sys.executable, "-c", pretend, "run", str(SMALL), "--out", str(out), "--ray-address",
                           ray_cluster.address], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    [line] = done.stderr.splitlines()
    assert line.startswith(f"EngineError: --ray-address '{ray_cluster.address}': the cluster runs Ray 2.60.0 on "
                           f"Python {sys.version.split()[0]}, this client Ray 2.59.0"), line
    assert not out.exists() and not store_path(out).exists()


def test_a_worker_without_the_plugins_the_plan_needs_is_refused_before_any_work(ray_cluster, tmp_path):
    from causalab_metrics.answers import IIA

    class Here(IIA):
        name = "iia_here"

    only_here = types.ModuleType("only_here")  # a metric plugin this client has and the workers do not
    only_here.DISTRIBUTION = "causalab-only-here"
    only_here.causalab_metrics = hookimpl(lambda: [Here])
    document = json.loads(SMALL.read_text())
    document["metrics"]["iia_clean"]["kind"] = "iia_here"
    (tmp_path / "doc.json").write_text(json.dumps(document))
    out = tmp_path / "o"
    with pytest.raises(EngineError) as refused:
        api.run(tmp_path / "doc.json", out=out, workers=2, registry=build_registry(extra=(only_here,)))
    line = refused.value.one_line()
    assert "\n" not in line
    assert "does not have this client's causalab: causalab-only-here (client unknown " in line, line
    assert "worker not installed); install the same causalab and plugins on every node" in line
    assert not out.exists() and not store_path(out).exists()


def test_a_plugin_the_plan_does_not_use_is_none_of_the_workers_business(ray_cluster, tmp_path):
    """The preflight's rule is the run's identity (core, the engine, featurizers, interventions, metrics it uses):
    a plugin only the client has, which the plan does not use, does not stop the run."""
    from causalab_metrics.answers import IIA

    class Unused(IIA):
        name = "iia_unused"

    only_here = types.ModuleType("only_here")
    only_here.DISTRIBUTION = "causalab-only-here"
    only_here.causalab_metrics = hookimpl(lambda: [Unused])
    out = tmp_path / "o"
    api.run(SMALL, out=out, workers=2, registry=build_registry(extra=(only_here,)))
    record = json.loads((out / "run.json").read_text())
    assert "causalab-only-here" not in record["causalab"]["distributions"] and len(record["ray"]["workers"]) == 2


def test_a_workers_own_error_is_the_clients_one_line(ray_cluster, tmp_path):
    out = tmp_path / "o"
    with pytest.raises(EngineError) as refused:
        api.run(SMALL, out=out, workers=2, device_map="nowhere")
    assert refused.value.one_line().startswith("EngineError: cannot load causalab-toy/weekdays (--device-map nowhere)")
    assert not out.exists() and not store_path(out).exists()


def test_the_nnterp_engine_on_workers_writes_the_bytes_of_one_process(ray_cluster, one_process, tmp_path):
    """The local engines write the same metric files at float32: nnterp on two workers, hooks in one process."""
    out = tmp_path / "w2"
    api.run(SWEEP, out=out, engine="nnterp", workers=2)
    mine, theirs = tree(out), tree(one_process)
    assert sorted(mine) == sorted(theirs)
    assert [rel for rel in mine if mine[rel] != theirs[rel]] == ["manifest.json", "run.json"]
    run = json.loads(mine["run.json"])
    assert run["engine"] == "nnterp" and sorted(c["points"] for c in run["ray"]["chunks"]) == ["0-11", "12-23"]


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (the session cluster's workers are under its raylet, under this process)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.parametrize("points,workers,chunks", [
    (80, 2, [20] * 4), (24, 2, [12] * 2), (1000, 8, [63] * 15 + [55]), (40, 1, [16, 16, 8]), (33, 3, [11] * 3),
    (200, 2, [20] * 10), (1, 2, [1]),
])
def test_chunks_come_in_rounds_of_one_per_worker(points, workers, chunks):
    """The README's rule: a multiple of N chunks (at least ten, or fewer of at least 16 points each); one worker
    cuts as one process does."""
    from causalab_ray.runner import RayChunks

    runner = RayChunks(workers, None)
    runner.actors = [object()] * workers
    size = runner.chunk_size(points)
    assert [min(size, points - start) for start in range(0, points, size)] == chunks
