"""Engine ``ndif``: the nnterp engine's session, run on an NDIF server that already holds the weights."""

from __future__ import annotations

import contextlib
import functools
import io
import sys
import time
from dataclasses import replace
from typing import Literal

from pydantic import Field

from causalab_core.plugins.contracts import ReuseOptions, remote_host
from causalab_core.errors import EngineError
from causalab_nnterp import NnterpEngine

from causalab_ndif import jobs, preflight, shipping
from causalab_ndif.environment import auto_code
from causalab_ndif.remote_errors import JobTimeout, bounded, local_error
from causalab_ndif.server import resolved_host, served_models, server_env


class NdifOptions(ReuseOptions):
    """The nnterp engine's reuse options (the server does the same work a local run does), and the server's."""

    allow_skew: bool = False
    """Run even where the server's packages or causalab sources differ from this client's (recorded in run.json)."""
    require_dtype: bool = False
    """Refuse, rather than warn, when the deployment serves another dtype than the document's."""
    timeout: float = Field(default=600, gt=0)
    """Seconds the whole remote job may take, from sending it to its results being home."""
    code: Literal["auto", "installed", "shipped"] = "auto"
    """How the block's code reaches the server: its installed causalab, or shipped by value with the
    request (``auto``: shipped exactly when the server's /env has no causalab-core)."""
    detach: bool = True
    """Send each job without a connection held open and poll for it, its id kept beside --out, so a job
    outlives the client (``false``: one websocket held open per job, for a server without ``/response/ID``)."""
    max_job_s: float | None = Field(default=None, gt=0)
    """Seconds one job may run on the server (its cap): a first job of one point sizes the rest to fit."""


class NdifEngine(NnterpEngine):
    """Checks the server, sends the plan in one remote session, and brings home only the results."""

    name = "ndif"
    capabilities = frozenset({"remote", "heads", "training"})
    runs_remote = True
    Options = NdifOptions
    waiting: set[str] = frozenset()
    """The ids of the chunk's jobs sent (or kept by an interrupted run) and not collected yet."""
    store = None
    """The resume store of a run with --out (``causalab_core.results.resume.Store``; set by ``api.run``): where each
    job's id is kept as soon as it is sent, for a ``--resume`` to collect it."""

    def model(self, plan):
        """The weightless shell the request is built from; it names the deployment by key and revision."""
        from causalab_nnterp import ServedTransformer

        return ServedTransformer(plan.model.source, key=plan.model.key, revision=plan.model.revision,
                                 dtype=plan.model.dtype)

    def run(self, plan, remote, batch_size, classes, positions):
        """Check the server, send the session, and keep what it said about itself in ``details``. The
        ``timeout`` bounds every wait of it: the ``/env`` and ``/status`` requests, and the job."""
        if plan.model.init_seed is not None:
            raise EngineError("$.model.init: random weights are built locally; an NDIF server serves the trained "
                              "checkpoint. Run this document on hooks or nnterp")
        host = remote_host(remote) or resolved_host()
        started = time.monotonic()
        try:
            with bounded(self.options.timeout, host):
                return self._run(plan, host, batch_size, classes, positions,
                                 lambda: max(0.001, self.options.timeout - (time.monotonic() - started)))
        except JobTimeout as exc:  # the deadline fell between two waits
            raise local_error(exc, host, kept=self._kept_jobs()) from None

    def _run(self, plan, host, batch_size, classes, positions, left):
        told = self.options.timeout
        packages = server_env(host, left(), told).get("packages", {})
        reuse = {"optimize": self.options.optimize, "positions": positions}
        asked = self.options.code
        shipped = asked == "shipped" or (asked == "auto" and auto_code(packages)[0] == "shipped")
        if shipped:
            wanted = shipping.server_requirements()
            model = shipping.PlainModel(plan.model.source, key=plan.model.key, revision=plan.model.revision,
                                        dtype=plan.model.dtype)
            session = functools.partial(shipping.run_shipped, model, plan, batch_size, classes, host, **reuse)
            sender = lambda part, backend: shipping.run_shipped(  # noqa: E731
                model, part, batch_size, classes, host, **reuse, backend=backend)
        else:
            client, wanted = self._installed_requirements(classes)
            model = self.model(plan)
            session = functools.partial(run_remote, model, plan, batch_size, classes, host, client,
                                        self.options.allow_skew, **reuse)
            sender = lambda part, backend: run_remote(  # noqa: E731
                model, part, batch_size, classes, host, client, self.options.allow_skew, **reuse, backend=backend)
        skew = preflight.check(host, wanted, packages, self.options.allow_skew)
        shown = f"{plan.model.key}@{plan.model.revision}" if plan.model.revision else plan.model.key
        deployments = served_models(host, left(), told)
        preflight.refuse_unserved(model.to_model_key(), deployments, host, shown, plan.model.revision)
        announced = deployments[model.to_model_key()].get("dtype")
        mismatch = self._check_dtype(announced, plan.model.dtype, host, shown)
        status = StatusLine(sys.stderr)
        try:
            with contextlib.redirect_stdout(status):
                if self.options.detach:
                    results, served, code, said = self._detached(plan, host, model, sender, status)
                else:
                    results, served, shipment = session()
                    code = shipment.record()
                    said = [{"points": len(plan.points), "sent_bytes": shipment.payload_bytes,
                             "received_bytes": shipment.received_bytes}]
        except Exception as exc:  # what the server raised, or what stopped the request
            raise local_error(exc, host, kept=self._kept_jobs()) from None
        finally:
            status.end_line()
        # What each job cost on the wire, under its status lines; run.json keeps every job's (a resumed run's
        # engine starts from what the interrupted one kept).
        for job in said:
            collected = " (collected by --resume)" if job.get("collected") == "by --resume" else ""
            print(f"job of {job['points']} point{'s' if job['points'] != 1 else ''}{collected}: sent "
                  f"{job['sent_bytes'] or 0:,} bytes, received {job['received_bytes'] or 0:,} bytes", file=sys.stderr)
        if dtype_name(served["served_dtype"]) != dtype_name(announced):  # /status said otherwise, or nothing
            mismatch = self._check_dtype(served["served_dtype"], plan.model.dtype, host, shown)
        self.details = {
            "host": host,
            "served_dtype": served["served_dtype"],
            "dtype_mismatch": mismatch,
            "server_causalab": served.get("causalab"),
            "skew": {name: list(pair) for name, pair in {**skew, **served.get("skew", {})}.items()},
            "code": code,
            "jobs": [*self.details.get("jobs", []), *said],
            **({"job_size": self.details["job_size"]} if "job_size" in self.details else {}),
        }
        return results

    def _detached(self, plan, host, model, sender, status):
        """The plan's points as jobs sent without a connection held open (:mod:`causalab_ndif.jobs`): the
        merged results, what the block said of the server, how the code travelled, each job's summary."""
        from nnsight.intervention.backends.remote import RemoteBackend

        model_key = model.to_model_key()

        def submit(points):
            backend = RemoteBackend(model_key, host=host, env=model._remoteable_get_env(), blocking=False)
            sent_at = time.time()
            job_id, _, shipment = sender(replace(plan, points=tuple(points)), backend)
            return jobs.Job(job_id, [p.name for p in points], shipment.payload_bytes, sent_at, shipment.record())

        def note(job_id, record):
            if self.store is not None:
                self.store.note_job(job_id, record)

        def warn(line):
            status.end_line()
            print(f"warning: {line}", file=sys.stderr)

        ledger = dict(self.store.remote_jobs()) if self.store is not None else {}
        self.waiting = set()
        done, sized = jobs.run_jobs(list(plan.points), ledger=ledger, note=note, submit=submit,
                                    wait=lambda job: jobs.collect(job, model_key, host), host=host,
                                    cap_s=self.options.max_job_s, sized=self.details.get("job_size"), warn=warn,
                                    waiting=self.waiting)
        if sized is not None:
            self.details["job_size"] = sized
        results = {}
        for job in done:
            results.update(job.result["results"])
        served = done[0].result["served"]
        return results, served, done[0].code, [job.summary() for job in done]

    def _kept_jobs(self) -> int:
        """How many jobs of the chunk were sent and not collected, their ids in the resume store (a failure's
        line says --resume collects them)."""
        return len(self.waiting) if self.store is not None else 0

    @staticmethod
    def _installed_requirements(classes):
        """The block's causalab distributions (name -> version and digest) and what the server must have."""
        from causalab_core.plugins.registry import registry
        from causalab_core.plugins.provenance import causalab_digests

        installed = registry()  # what this client has installed; the run's own registry chose ``classes``
        block = preflight.block_distributions(installed, classes)
        client = {name: d for name, d in causalab_digests(installed)["distributions"].items() if name in block}
        return client, preflight.server_requirements(installed, classes)

    def _check_dtype(self, served: str | None, asked: str, host: str, shown: str) -> dict[str, str] | None:
        """Say it aloud when the deployment's dtype is not the document's (refuse with ``require_dtype``)."""
        if served is None or dtype_name(served) == asked:
            return None
        message = (f"the NDIF server at {host} serves {shown} in {dtype_name(served)}, not the document's {asked}: "
                   f"its numbers are not those of a {asked} run")
        if self.options.require_dtype:
            raise EngineError(message)
        warned = self.__dict__.setdefault("warned", set())  # a run in several chunks (jobs) says it once
        if message not in warned:
            warned.add(message)
            print(f"warning: {message} (recorded in run.json; --option require_dtype=true refuses)", file=sys.stderr)
        return {"document": asked, "served": dtype_name(served)}


class StatusLine(io.TextIOBase):
    """Where nnsight's job status goes: stderr, since stdout is for what a run wrote. nnsight redraws one
    line in place and ends it only on a final status, so a job cut short leaves it open: ``end_line``."""

    def __init__(self, stream):
        self.stream = stream
        self.open = False

    def write(self, text: str) -> int:
        if text:
            self.open = not text.endswith("\n")
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def end_line(self) -> None:
        if self.open:
            self.stream.write("\n")
            self.open = False


def dtype_name(dtype: str | None) -> str | None:
    """``bfloat16`` for ``torch.bfloat16`` or ``bfloat16``."""
    return None if dtype is None else str(dtype).removeprefix("torch.")


def run_remote(model, plan, batch_size, classes, host, client, allow_skew, *, optimize=True, positions=False,
               backend=None):
    """The remote session. It loads only its arguments and modules every causalab server installs. With a
    non-blocking ``backend``, the job is only sent: ``(its id, None, shipment)``."""
    import nnsight

    from causalab_core.plugins.registry import installed_causalab
    from causalab_core.plugins.provenance import digest_skew
    from causalab_nnterp import run_plan

    with shipping.measured() as shipment:
        with model.session(remote=host, backend=backend):
            installed = installed_causalab()
            skew = digest_skew(client, installed)
            if skew and not allow_skew:
                raise EngineError("the server's causalab sources differ from the client's: " + "; ".join(
                    f"{name} (client {mine}, server {theirs})" for name, (mine, theirs) in sorted(skew.items())))
            served = nnsight.save({"served_dtype": str(model.lm_head.weight.dtype), "causalab": installed, "skew": skew})
            results = nnsight.save(run_plan(model, plan, batch_size, classes, optimize=optimize, positions=positions))
    if backend is not None and not backend.blocking:
        return backend.job_id, None, shipment
    return results, served, shipment
