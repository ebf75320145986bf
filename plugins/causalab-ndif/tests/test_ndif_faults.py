"""Faults injected into the real test server mid-job: each is one line within its bound, exit 1, no output
folder, nothing left running on the client. The last test restarts the server and runs on it again, so
whatever runs after finds it whole."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CAUSALAB = str(Path(sys.executable).parent / "causalab")
SWEEP = ROOT / "documents/real/weekdays_layer_sweep.json"


def _long_document(tmp_path: Path) -> Path:
    """A job that runs long enough on the server to be hit mid-way: DAS training at four ranks."""
    document = json.loads((ROOT / "documents/real/weekdays_das.json").read_text())
    document["sweep"].update(rank=[1, 2, 4, 8], seed=[0])
    path = tmp_path / "long.json"
    path.write_text(json.dumps(document))
    return path


def _processes(server, needle: str) -> list[int]:
    found = []
    for pid in server.running():
        try:
            if needle in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                found.append(pid)
        except OSError:
            pass
    return found


def _run_with_fault(server, tmp_path, fault, *options: str, bound: float):
    """Start a long job, inject ``fault`` once the server says it runs; (exit code, last stderr line, seconds)."""
    out = tmp_path / "o"
    process = subprocess.Popen(server.command([CAUSALAB, "run", str(_long_document(tmp_path)), "--engine", "ndif",
                                               "--out", str(out), *options]),
                               env=server.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(iter(lambda: process.stderr.read(1), "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 180
    while "RUNNING" not in "".join(stderr) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "".join(stderr)
    fault()
    hit = time.monotonic()
    try:
        process.wait(timeout=bound)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(f"the client was still waiting {bound} s after the fault: {''.join(stderr)[-500:]}")
    seconds = time.monotonic() - hit
    reader.join(5)
    text = "".join(stderr)
    assert not out.exists()
    print(f"\nfault table: {seconds:5.1f} s after the fault, exit {process.returncode}: {text.splitlines()[-1]}")
    return process.returncode, text.splitlines()[-1], text, seconds


def _signal(pids: list[int], sig: int) -> None:
    assert pids, "nothing to signal"
    for pid in pids:
        os.kill(pid, sig)


def test_a_model_actor_killed_mid_job_is_named(ndif_server, tmp_path):
    code, line, text, seconds = _run_with_fault(
        ndif_server, tmp_path, lambda: _signal(_processes(ndif_server, "CPUModelDeployment"), signal.SIGKILL), bound=60)
    assert code == 1
    assert line.startswith(f"EngineError: the model deployment on the NDIF server at {ndif_server.host} was lost "
                           "mid-job (its actor died or stopped)"), text[-800:]
    # The job failed there: its id is forgotten (a --resume would only read the same failure), and with no
    # point kept the run leaves nothing beside --out.
    assert not (tmp_path / ".o.resume").exists()


def test_a_model_actor_that_stops_answering_is_bounded_by_the_timeout(ndif_server, tmp_path):
    # The deployment is up again (a killed actor is provisioned anew by the next job): the timeout then
    # bounds a job that runs and stops answering, not one still waiting for a model.
    warm = ndif_server.run([CAUSALAB, "run", str(SWEEP), "--engine", "ndif", "--out", str(tmp_path / "warm")])
    assert warm.returncode == 0, warm.stderr
    stopped: list[int] = []

    def stop():
        stopped.extend(_processes(ndif_server, "CPUModelDeployment"))
        _signal(stopped, signal.SIGSTOP)

    try:
        code, line, text, seconds = _run_with_fault(ndif_server, tmp_path, stop, "--option", "timeout=20", bound=60)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    assert code == 1
    # The job was sent without a connection held open: it stays on the server, its id kept for --resume.
    assert line == (f"EngineError: the job on the NDIF server at {ndif_server.host} did not finish within 20 s (the "
                    "server stopped answering, or the job is slower than that; --option timeout=SECONDS); 1 job sent "
                    "stays on the server, kept beside --out: --resume collects what finished"), text[-800:]
    assert seconds < 20 + 10  # the timeout counts from sending the job; then the client exits
    # The spinner's line was ended before the error: the error is a line of its own.
    assert text.endswith("\n" + line + "\n")
    # No point was kept, but the job's id was: once the actor answers again, --resume collects that job.
    sent = list(json.loads((tmp_path / ".o.resume" / "resume.json").read_text())["remote_jobs"])
    assert len(sent) == 1
    resumed = ndif_server.run([CAUSALAB, "run", str(tmp_path / "long.json"), "--engine", "ndif", "--out",
                               str(tmp_path / "o"), "--option", "timeout=20", "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert [(job["id"], job["collected"]) for job in json.loads((tmp_path / "o" / "run.json").read_text())["jobs"]] == [
        (sent[0], "by --resume")]


def test_redis_killed_mid_job_is_named_and_a_restarted_server_runs_again(ndif_server, restart_server, tmp_path):
    # A job waited for on a websocket (detach=false): its statuses reach the client through redis's pub/sub.
    # (A detached job's statuses and result go through the object store, not redis.)
    code, line, text, seconds = _run_with_fault(
        ndif_server, tmp_path, lambda: _signal(_processes(ndif_server, "redis-server"), signal.SIGKILL),
        "--option", "timeout=60", "--option", "detach=false", bound=90)
    assert code == 1
    assert line.startswith("EngineError: ") and ndif_server.host in line, text[-800:]
    restart_server()
    done = ndif_server.run([CAUSALAB, "run", str(SWEEP), "--engine", "ndif", "--out", str(tmp_path / "after")])
    assert done.returncode == 0, done.stderr
