"""One sweep run locally (engine nnterp) and through a real NDIF test server (engine ndif), side by side.

    .venv/bin/python benchmarks/remote.py [--repeats 3] [--doc documents/real/weekdays_layer_sweep.json]

Starts the test server (causalab_testing.ndif_server, ~65 s), then, in one client
process beside it, times interleaved repeats of: compiling the document (load,
weightless shell, tokenize: the client's share of a remote run), a local run
end to end (loading the weights, as a user's run does), the local engine's
execute alone with weights loaded, and a remote run end to end; and reads the
request payload and result sizes from nnsight's debug log. The remote run is
timed with each reuse setting (``optimize=false``: one trace per step per batch,
as the block ran before #19; ``positions=false``: shared reads and prefix reuse;
the default, the planner's pick), with the time the job ran on the server, from
the model actor's own log.
Prints a table of medians and writes benchmarks/remote.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# Remote runs by reuse setting: name -> engine options.
REMOTE = {"remote, no reuse": {"optimize": False, "positions": False},
          "remote, no positions": {"positions": False}, "remote": {}}


def measure(doc: str, repeats: int, ray_dir: str) -> dict:
    """Runs beside the server (inside its network namespace)."""
    import contextlib
    import io
    import re
    import time

    from nnsight import CONFIG

    from causalab_core import api

    from causalab_core.plugins.registry import registry
    from heatmap import completed_jobs

    times: dict[str, list[float]] = {"compile": [], "local": [], "local execute": [], **{n: [] for n in REMOTE}}
    server: dict[str, list[float]] = {name: [] for name in REMOTE}
    payload = result = None
    warm = registry().get("engine", "nnterp")()
    warm.execute(api.plan(doc))  # loads its weights once
    api.run(doc, engine="ndif")  # the server's first request of this plan
    for _ in range(repeats):
        start = time.perf_counter()
        plan = api.plan(doc)
        times["compile"].append(time.perf_counter() - start)
        start = time.perf_counter()
        warm.execute(plan)
        times["local execute"].append(time.perf_counter() - start)
        start = time.perf_counter()
        api.run(doc, engine="nnterp")
        times["local"].append(time.perf_counter() - start)
        for name, options in REMOTE.items():
            before = completed_jobs(Path(ray_dir))
            CONFIG.APP.DEBUG = True
            log = io.StringIO()
            start = time.perf_counter()
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                api.run(doc, engine="ndif", options=options)
            times[name].append(time.perf_counter() - start)
            CONFIG.APP.DEBUG = False
            time.sleep(2)  # the actor's log line follows its response
            server[name].append(sum(ms for job, ms in completed_jobs(Path(ray_dir)).items() if job not in before) / 1000)
        found = re.search(r"payload: ([\d,]+) bytes \((\w+)\)", log.getvalue())
        payload = (int(found[1].replace(",", "")), found[2]) if found else None
        found = re.search(r"result: ([\d,]+) bytes", log.getvalue())
        result = int(found[1].replace(",", "")) if found else None
    medians = {name: statistics.median(values) for name, values in times.items()}
    server_medians = {name: statistics.median(values) for name, values in server.items()}
    return {"doc": doc, "repeats": repeats, "seconds": medians, "server_s": server_medians, "all": times,
            "payload": payload, "result": result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc", default=str(ROOT / "documents/real/weekdays_layer_sweep.json"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ray-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.doc, args.repeats, args.ray_dir)))
        return

    sys.path.insert(0, str(ROOT / "plugins/causalab-ndif/tests"))
    from conftest import deployments

    from causalab_testing.ndif_server.stack import TestServer

    server = TestServer(Path(tempfile.mkdtemp(prefix="ndif-bench-")))
    server.start(deployments())
    try:
        done = server.run([sys.executable, __file__, "--measure", "--doc", args.doc, "--repeats", str(args.repeats),
                           "--ray-dir", str(server.ray_dir)])
    finally:
        server.stop()
    if done.returncode != 0:
        sys.exit(done.stderr[-3000:])
    report = json.loads(done.stdout.strip().splitlines()[-1])
    s = report["seconds"]
    print(f"{Path(args.doc).name}, median of {args.repeats}")
    print(f"{'':50}{'seconds':>9}{'vs local':>10}{'server-side s':>15}")
    rows = (("local", "local run (nnterp; loads the weights)"),
            ("remote, no reuse", "remote run, optimize=false (as before #19)"),
            ("remote, no positions", "remote run, positions=false"),
            ("remote", "remote run (ndif; the planner's pick)"),
            ("local execute", "local execute only (weights already loaded)"),
            ("compile", "client compile + tokenize"))
    for name, label in rows:
        on_server = f"{report['server_s'][name]:15.2f}" if name in report["server_s"] else ""
        print(f"{label:50}{s[name]:9.2f}{s[name] / s['local']:9.2f}x{on_server}")
    print(f"compile + tokenize is {s['compile'] / s['remote']:.0%} of the remote run")
    if report["payload"]:
        print(f"request payload: {report['payload'][0]:,} bytes ({report['payload'][1]})")
    if report["result"]:
        print(f"result: {report['result']:,} bytes")
    (ROOT / "benchmarks/remote.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
