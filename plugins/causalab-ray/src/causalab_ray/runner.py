"""The chunk runner: a sweep's chunks on the workers of a Ray cluster, each chunk's files back to the client.

``api.run_kept`` cuts the points into chunks (sized by :meth:`RayChunks.chunk_size`)
and keeps each chunk's points in the resume store as it comes back; the client
writes the folder in the fixed point order, so the metric files are a one-process
run's. A worker that dies (its process killed, its node lost) costs the chunk it
was running: that chunk runs again on a worker still alive, with one warning line.
"""

from __future__ import annotations

import math
import os
import sys
from collections import deque
from collections.abc import Iterator
from typing import Any

from causalab_core.errors import CausalabError, EngineError, clip
from causalab_core.results.resume import CHUNKS, MIN_CHUNK, chunk_size

START_S = 120
"""How long the workers may take to start and answer (an import of torch each; longer on a loaded machine)."""
PING_S = 10
"""How long a worker may take to say it is alive when another has died (it answers beside its chunk)."""
PER_CPU = 4
"""Workers a CPU at most (`--workers`)."""


def span(chunk: list[int]) -> str:
    """A chunk's point indices as run.json says them: ``0-11``, or ``0-3,8-11`` where a resume left gaps."""
    parts, start = [], chunk[0]
    for prev, cur in zip(chunk, [*chunk[1:], None]):
        if cur != prev + 1:
            parts.append(f"{start}-{prev}" if prev != start else str(start))
            start = cur
    return ",".join(parts)


class RayChunks:
    """``--workers N`` (a local cluster on 127.0.0.1) or ``--ray-address ADDRESS`` (N workers there, default one
    per GPU of the cluster, else one per CPU). Each worker takes an equal share of the cluster's CPUs (its torch
    threads) and, where the cluster has a GPU per worker, one GPU: ``--device-map`` is each worker's."""

    def __init__(self, workers: int | None, address: str | None):
        self.asked, self.address = workers, address
        self.cluster = None
        self.actors: list[Any] = []
        self.about: list[dict[str, Any]] = []

    # -- before any point runs ------------------------------------------------------------------------------

    def start(self, plan: Any, *, registry: Any, engine: str, options: dict[str, Any], batch_size: int | None,
              device_map: str | None) -> None:
        if registry.get("engine", engine).runs_remote:
            raise EngineError(f"--workers runs a local engine on each worker (hooks, nnterp); engine {engine!r} "
                              "sends its work to a server")
        from causalab_ray import cluster

        if self.address is None and self.asked is not None:  # before a cluster starts: a bad count is one line
            self._check_count(float(os.cpu_count() or 1))
        self.cluster = cluster.connect(self.address)
        import ray

        from causalab_ray.worker import ChunkWorker

        resources = ray.cluster_resources()
        cpus, gpus = resources.get("CPU", 1.0), resources.get("GPU", 0.0)
        self._check_count(cpus)
        n = self.asked or max(1, int(gpus) or int(cpus))
        # An equal share of the CPUs each (a fraction where there are more workers than CPUs), and a GPU each
        # where there are enough (else an equal share of them).
        share = math.floor(cpus / n) if cpus >= n else cpus / n
        each_gpu = 1 if gpus >= n else gpus / n
        actor = ray.remote(concurrency_groups={"ping": 1})(ChunkWorker).options(
            num_cpus=share, num_gpus=each_gpu, max_restarts=0, max_task_retries=0)
        threads = max(1, math.floor(share))
        self.actors = [actor.remote(engine, options, device_map, batch_size, threads) for _ in range(n)]
        self.about = self._wait([a.about.remote() for a in self.actors], "start")
        for info in self.about:
            info["threads"] = threads
        self._preflight(registry, plan, engine)
        shared = ray.put(plan)  # the plan travels once, as data; each chunk as its point indices
        self._wait([a.setup.remote(shared) for a in self.actors], "take the plan")

    def _check_count(self, cpus: float) -> None:
        """At most ``PER_CPU`` workers a CPU: each is a process with its own copy of the model, and more only wait
        on each other (Ray would refuse far more with an error about ``num_cpus``, or start them for minutes)."""
        if self.asked is not None and self.asked > PER_CPU * cpus:
            raise EngineError(f"{self._where()}: the cluster has {cpus:g} CPUs, so at most {int(PER_CPU * cpus)} "
                              f"workers ({PER_CPU} a CPU)")

    def _wait(self, refs: list[Any], what: str) -> list[Any]:
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        try:
            return ray.get(refs, timeout=START_S)
        except GetTimeoutError:
            raise EngineError(f"{self._where()}: the {len(refs)} Ray workers did not {what} within {START_S} s "
                              f"(the cluster offers {ray.cluster_resources().get('CPU', 0):g} CPUs)") from None
        except RayError as exc:
            raise self._failure(exc, f"a Ray worker could not {what}") from exc

    def _preflight(self, registry: Any, plan: Any, engine: str) -> None:
        """Every worker has the client's causalab where the plan runs on it: the distributions the run uses
        (``provenance.run_distributions``: core, the engine, featurizers, interventions and metrics), at the same
        versions and source digests; another plugin, installed or changed on either side, is not the run's."""
        from causalab_core.plugins.provenance import run_digests

        mine = run_digests(registry, plan, engine)["distributions"]
        for info in self.about:
            theirs = info["causalab"]
            skew = [f"{name} (client {_said(mine.get(name))}, worker {_said(theirs.get(name))})"
                    for name in sorted(mine) if mine.get(name) != theirs.get(name)]
            if skew:
                raise EngineError(f"{self._where()}: the Ray worker on {info['node']} (pid {info['pid']}) does not "
                                  f"have this client's causalab: {'; '.join(skew)}; install the same causalab and "
                                  "plugins on every node")

    def _where(self) -> str:
        return f"--ray-address {self.address}" if self.address else f"--workers {self.asked}"

    # -- the run --------------------------------------------------------------------------------------------

    def chunk_size(self, points: int) -> int:
        """Points per chunk, so that the count of chunks is a multiple of the N workers (every round keeps each
        worker busy): at least ``resume.CHUNKS`` chunks (N x ceil(10 / N)), or, where that would make chunks
        under ``resume.MIN_CHUNK`` points (each chunk repeats the clean and counterfactual forwards its points
        share), the most rounds of N chunks that keep them that long, and one round (N chunks) at the least. One
        worker cuts as one process does (``resume.chunk_size``)."""
        n = max(1, len(self.actors))
        if n == 1:
            return chunk_size(points)
        size = math.ceil(points / (n * math.ceil(CHUNKS / n)))
        if size < MIN_CHUNK:
            size = math.ceil(points / (n * max(1, points // (MIN_CHUNK * n))))
        return max(1, size)

    def run(self, plan: Any, chunks: list[list[int]], details: dict[str, Any]) -> Iterator[tuple[list[int], dict]]:
        import ray
        from ray.exceptions import RayActorError, RayError

        kept = details.setdefault("ray", {"workers": [], "chunks": []})
        first = len(kept["workers"])  # a resumed run's workers are numbered after the interrupted run's
        kept["workers"].extend({k: info[k] for k in ("node", "host", "pid", "threads", "gpus", "arithmetic")}
                               | {"cluster": self.cluster.address} for info in self.about)
        number = {id(a): first + i for i, a in enumerate(self.actors)}
        queue, idle, running = deque(chunks), list(self.actors), {}
        while queue or running:
            while queue and idle:
                worker, chunk = idle.pop(0), queue.popleft()
                running[worker.run.remote(chunk)] = (worker, chunk)
            [ref], _ = ray.wait(list(running), num_returns=1)
            worker, chunk = running.pop(ref)
            try:
                files, said = ray.get(ref)
            except RayActorError as exc:
                info = kept["workers"][number[id(worker)]]
                kept["chunks"].append({"points": span(chunk), "worker": number[id(worker)], "died": True})
                self._drop_dead(worker, idle)
                if not self.actors:  # one line for the event, never a promise first that no worker can keep
                    raise EngineError(f"{self._where()}: every Ray worker died (worker {number[id(worker)]}, pid "
                                      f"{info['pid']} on {info['node']}, was running points {span(chunk)}); the "
                                      "points kept so far stay for --resume") from exc
                print(f"causalab: Ray worker {number[id(worker)]} (pid {info['pid']} on {info['node']}) died running "
                      f"points {span(chunk)}; they run again on another of the {len(self.actors)} left",
                      file=sys.stderr, flush=True)
                queue.appendleft(chunk)
                continue
            except RayError as exc:
                raise self._failure(exc, f"points {span(chunk)}") from exc
            idle.append(worker)
            details.update(said)
            kept["chunks"].append({"points": span(chunk), "worker": number[id(worker)]})
            yield chunk, files

    def _drop_dead(self, worker: Any, idle: list[Any]) -> None:
        """Forget ``worker``, and every other that no longer answers (workers killed together die together)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        for other in list(self.actors):
            if other is not worker:
                try:
                    ray.get(other.alive.options(concurrency_group="ping").remote(), timeout=PING_S)
                    continue
                except (GetTimeoutError, RayError):
                    pass
            self.actors.remove(other)
            if other in idle:
                idle.remove(other)

    def _failure(self, exc: BaseException, what: str) -> CausalabError:
        """A worker's error: a causalab one as it was raised there (one line), anything else in one line."""
        cause = getattr(exc, "cause", None)
        if isinstance(cause, CausalabError):
            return cause
        shown = cause if isinstance(cause, BaseException) else exc
        lines = [line.strip() for line in str(shown).splitlines() if line.strip()]
        return EngineError(clip(f"{self._where()}: {what}: {type(shown).__name__}: {lines[-1] if lines else ''}"))

    def close(self) -> None:
        import ray

        if ray.is_initialized():
            for worker in self.actors:
                ray.kill(worker, no_restart=True)
        self.actors = []
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None


def _said(entry: dict[str, str] | None) -> str:
    return "not installed" if entry is None else f"{entry['version']} {entry['digest'][:12]}"
