"""What a job sent without a connection held open costs against one waited for on a websocket.

    .venv/bin/python plugins/causalab-ndif/benchmarks/jobs.py [--repeats 5] [--doc documents/real/weekdays_layer_sweep.json]

Starts the NDIF test server (causalab_testing.ndif_server, ~65 s), then, in one
client process beside it, times interleaved end-to-end runs of the document with
``detach=false`` (nnsight's blocking websocket, the result on the socket) and the
default ``detach=true`` (POST, then polls of ``/response/ID``, the result
downloaded by url), and with ``max_job_s`` set so the jobs are cut small. Prints
a table of medians: wall seconds, jobs, and the jobs' summed time on the server
(their COMPLETED status's ``meta.runtime``; none with a websocket).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# Rows: name -> engine options.
VARIANTS = {"websocket (detach=false)": {"detach": False}, "detached (default)": {},
            "detached, max_job_s=0.2": {"max_job_s": 0.2}}


def measure(doc: str, repeats: int) -> dict:
    """Runs beside the server (inside its network namespace)."""
    import contextlib
    import io
    import time

    from causalab_core import api

    api.run(doc, engine="ndif")  # the server's first request of this plan
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    for _ in range(repeats):
        for name, options in VARIANTS.items():
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                result = api.run(doc, engine="ndif", options=options)
            seconds = time.perf_counter() - start
            jobs = result.run.get("jobs", [])
            runs[name].append({"seconds": seconds, "jobs": len(jobs),
                               "server_s": sum(job.get("runtime_s") or 0 for job in jobs) or None})
    return {"doc": doc, "repeats": repeats, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc", default=str(ROOT / "documents/real/weekdays_layer_sweep.json"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.doc, args.repeats)))
        return

    sys.path.insert(0, str(ROOT / "plugins/causalab-ndif/tests"))
    from conftest import deployments

    from causalab_testing.ndif_server.stack import TestServer

    server = TestServer(Path(tempfile.mkdtemp(prefix="ndif-jobs-bench-")))
    server.start(deployments())
    try:
        done = server.run([sys.executable, __file__, "--measure", "--doc", args.doc, "--repeats", str(args.repeats)])
    finally:
        server.stop()
    if done.returncode != 0:
        sys.exit(done.stderr[-3000:])
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{Path(args.doc).name}, end to end, median of {args.repeats} (interleaved)")
    print(f"{'':28}{'seconds':>9}{'vs websocket':>14}{'jobs':>6}{'on the server, s':>18}")
    base = statistics.median(run["seconds"] for run in report["runs"]["websocket (detach=false)"])
    for name, runs in report["runs"].items():
        seconds = statistics.median(run["seconds"] for run in runs)
        on_server = [run["server_s"] for run in runs if run["server_s"] is not None]
        shown = f"{statistics.median(on_server):18.3f}" if on_server else f"{'-':>18}"
        print(f"{name:28}{seconds:9.2f}{seconds / base:13.2f}x{statistics.median(run['jobs'] for run in runs):6.0f}{shown}")


if __name__ == "__main__":
    main()
