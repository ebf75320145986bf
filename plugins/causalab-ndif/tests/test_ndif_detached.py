"""Jobs that outlive the client (#36): each job is sent without a connection held open and its id kept beside
--out; a client killed while a job runs leaves the id, and --resume collects what the server finished."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CAUSALAB = str(Path(sys.executable).parent / "causalab")
SWEEP = ROOT / "documents/real/weekdays_layer_sweep.json"


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def same_run(here: dict[str, bytes], there: dict[str, bytes]) -> tuple[list, list]:
    """(files that differ but run.json and the manifest, run.json's keys that differ but its jobs)."""
    files = sorted(set(here) ^ set(there)) + [n for n in here if n in there and n not in ("run.json", "manifest.json")
                                               and here[n] != there[n]]
    mine, theirs = json.loads(here["run.json"]), json.loads(there["run.json"])
    return files, sorted(k for k in mine.keys() | theirs.keys() if k != "jobs" and mine.get(k) != theirs.get(k))


WAIT_COMPLETED = """
import json, sys, time, urllib.error, urllib.request
deadline, status = time.monotonic() + 120, None
while status != "COMPLETED" and time.monotonic() < deadline:
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=10) as response:
            status = json.loads(response.read())["status"]
    except urllib.error.HTTPError as exc:
        status = None if exc.code == 404 else exc.code
    time.sleep(0.1)
print(status)
"""


def completed(server, job_id: str) -> str:
    """What the server's ``/response/ID`` says of a job once it completed (or after two minutes), asked where
    the server's loopback is."""
    done = server.run([sys.executable, "-c", WAIT_COMPLETED, f"{server.host}/response/{job_id}"])
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


# What a model actor logs of each job it completed (the server's own count of the jobs it ran).
COMPLETED = re.compile(r"request_id=(\w+) .*stage=completed prev_stage=running")


def ran_on_server(server) -> set[str]:
    """Every job id the server's model actors logged as completed."""
    return {found[1] for log in (server.ray_dir / "session_latest/logs").glob("worker-*.out")
            for found in COMPLETED.finditer(log.read_text(errors="replace"))}


def actors(server) -> list[int]:
    found = []
    for pid in server.running():
        try:
            if "CPUModelDeployment" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                found.append(pid)
        except OSError:
            pass
    return found


def test_a_job_sent_before_the_client_was_killed_is_collected_by_resume(ndif_server, tmp_path):
    """The first chunk is kept; the second is sent (the model actor held stopped, so it cannot finish first)
    and the client is killed. The server finishes it meanwhile; --resume collects that very job (no job is
    sent again) and writes the uninterrupted run's bytes. A store whose job the server does not know sends
    its points again with one warning line."""
    from causalab_core.results.resume import store_path

    whole = ndif_server.run([CAUSALAB, "run", str(SWEEP), "--engine", "ndif", "--out", str(tmp_path / "whole")])
    assert whole.returncode == 0, whole.stderr
    before = ran_on_server(ndif_server)
    out = tmp_path / "o"
    process = subprocess.Popen(ndif_server.command([CAUSALAB, "run", str(SWEEP), "--engine", "ndif", "--out", str(out)]),
                               env=ndif_server.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(iter(lambda: process.stderr.read(1), "")), daemon=True)
    reader.start()
    state_file = store_path(out) / "resume.json"

    def sent() -> dict:
        try:
            return json.loads(state_file.read_text()).get("remote_jobs", {})
        except (OSError, ValueError):
            return {}

    stopped: list[int] = []
    try:
        deadline = time.monotonic() + 120
        # The first job's results are home (its line is said before its points are kept): hold the model
        # actors, so the next job is sent and cannot finish before the client is killed.
        while "job of 16 points" not in "".join(stderr) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        stopped = actors(ndif_server)
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        while len(sent()) < 2 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process.poll() is None, "".join(stderr)
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    reader.join(5)
    jobs = sent()
    first, second = list(jobs)
    assert [len(jobs[first]["points"]), len(jobs[second]["points"])] == [16, 8]
    points = store_path(out) / "points"
    assert len([p for p in points.iterdir() if p.name.isdigit()]) == 16 and not out.exists()

    # A copy of the store whose second job the server never had (and was sent long ago).
    other = tmp_path / "other"
    shutil.copytree(store_path(out), store_path(other))
    state = json.loads((store_path(other) / "resume.json").read_text())
    unknown = str(uuid.uuid4())
    state["remote_jobs"][unknown] = {**state["remote_jobs"].pop(second), "submitted": 0}
    (store_path(other) / "resume.json").write_text(json.dumps(state))

    # The server finishes the second job with no client connected.
    assert completed(ndif_server, second) == "COMPLETED"

    resumed = ndif_server.run([CAUSALAB, "run", str(SWEEP), "--engine", "ndif", "--out", str(out), "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert "warning" not in resumed.stderr
    assert same_run(tree(out), tree(tmp_path / "whole")) == ([], [])
    # Both jobs are the interrupted client's, by their ids: the first kept as points, the second collected
    # now. No job was sent by the resumed run: the server ran two jobs for this sweep, as for the whole run.
    record = json.loads((out / "run.json").read_text())
    assert [(job["id"], job["points"], job["collected"]) for job in record["jobs"]] == [
        (first, 16, "as sent"), (second, 8, "by --resume")]
    assert len(json.loads((tmp_path / "whole" / "run.json").read_text())["jobs"]) == 2
    # The server's own log: it ran exactly those two jobs for the interrupted run and its --resume.
    deadline = time.monotonic() + 20
    while not {first, second} <= ran_on_server(ndif_server) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # an actor logs a job just after answering it: a third one would be there by now
    assert ran_on_server(ndif_server) - before == {first, second}
    assert [line for line in resumed.stderr.splitlines() if line.startswith("job of")] == [
        f"job of 8 points (collected by --resume): sent {jobs[second]['sent_bytes']:,} bytes, "
        f"received {record['jobs'][1]['received_bytes']:,} bytes"]

    again = ndif_server.run([CAUSALAB, "run", str(SWEEP), "--engine", "ndif", "--out", str(other), "--resume"])
    assert again.returncode == 0, again.stderr
    warned = [line for line in again.stderr.splitlines() if line.startswith("warning")]
    assert warned == [f"warning: the NDIF server at {ndif_server.host} no longer knows job {unknown} (8 points, sent by "
                      "an interrupted run): it has no status of it; its points are sent again"]
    assert same_run(tree(other), tree(tmp_path / "whole")) == ([], [])
    resent = json.loads((other / "run.json").read_text())["jobs"]
    assert [job["id"] for job in resent][0] == first and resent[1]["id"] not in (first, second, unknown)
    assert [job["collected"] for job in resent] == ["as sent", "as sent"]
    assert not store_path(out).exists() and not store_path(other).exists()


def test_max_job_s_sizes_jobs_from_a_first_job_of_one_point(ndif_server, tmp_path):
    """A cap: the first job holds one point, its time on the server sizes every later job, run.json says
    both, and the bytes are a run's without a cap."""
    capped = ndif_server.run([CAUSALAB, "run", str(SWEEP), "--engine", "ndif", "--out", str(tmp_path / "c"),
                              "--option", "max_job_s=0.5"])
    assert capped.returncode == 0, capped.stderr
    plain = ndif_server.run([CAUSALAB, "run", str(SWEEP), "--engine", "ndif", "--out", str(tmp_path / "p")])
    assert plain.returncode == 0, plain.stderr
    files, keys = same_run(tree(tmp_path / "c"), tree(tmp_path / "p"))
    assert files == [] and keys == ["job_size"]
    record = json.loads((tmp_path / "c" / "run.json").read_text())
    size = record["job_size"]
    assert size["max_job_s"] == 0.5 and size["probe_points"] == 1 and size["probe_s"] > 0
    per = size["points_per_job"]
    assert per == max(1, math.floor(0.5 / size["probe_s"]))  # not 0.5 // 0.1, which is 4.0 in floats
    # The core's chunks (16 and 8 points), each cut into jobs of `per` points; the first job a probe of one.
    expected = [1] + [min(per, 15 - i) for i in range(0, 15, per)] + [min(per, 8 - i) for i in range(0, 8, per)]
    assert [job["points"] for job in record["jobs"]] == expected
    assert record["jobs"][0]["runtime_s"] == size["probe_s"]
    print(f"\nmax_job_s=0.5: first job of 1 point ran {size['probe_s']} s on the server; {per} points per job; "
          f"jobs {[job['points'] for job in record['jobs']]}, server runtimes {[job['runtime_s'] for job in record['jobs']]}")


def test_a_server_that_stops_answering_while_collecting_is_one_line(tmp_path):
    """A poll that cannot reach the server: one line naming the host and the job; the job's id stays kept."""
    from causalab_ndif.jobs import Job, collect
    from causalab_ndif.remote_errors import StoppedWaiting, local_error

    host = "http://127.0.0.1:9"  # the discard port: nothing listens on loopback there
    job = Job("d0b0e0f0", ["layer=0,pos=-1"], 1000, time.time(), {"travelled": "installed"})
    with pytest.raises(StoppedWaiting) as caught:
        collect(job, "some:key", host)
    line = local_error(caught.value, host, kept=1).one_line()
    assert line.startswith(f"EngineError: the NDIF server at {host} stopped answering while collecting job d0b0e0f0 "
                           "(ConnectError: ")
    assert line.endswith("; 1 job sent stays on the server, kept beside --out: --resume collects what finished")
    assert "\n" not in line


def test_the_readme_options_table_names_every_option():
    """The README's table of options is the engine's Options model: each field once, and nothing else."""
    from causalab_ndif.engine import NdifOptions

    text = (ROOT / "plugins/causalab-ndif/README.md").read_text()
    table = text[text.index("## Options"):text.index("## run.json")]
    named = [row.split("`")[1].split("=")[0] for row in table.splitlines() if row.startswith("| `")]
    assert sorted(named) == sorted(NdifOptions.model_fields)
