"""Jobs that outlive the client: each job is sent without a connection held open, its id kept beside --out.

nnsight 0.8.1's non-blocking backend (``RemoteBackend(blocking=False)``) POSTs
the request and returns the id the server gave it; ndif (0.1.2) then saves each
status of a request that has no websocket to its object store, where
``GET /response/ID`` reads it back (404 until the first status lands, and for an
id it never had), and a COMPLETED status carries a presigned url of the result
(valid for an hour on ndif's defaults). So the client needs no connection while
a job runs: it sends every job of a chunk, keeps each id in the resume store as
soon as the server answers the POST (:meth:`causalab_core.results.resume.Store.note_job`),
then polls. A client killed meanwhile leaves the ids behind; ``--resume`` polls
them again, collecting what finished while it was away and sending only the
points no job holds.

A job is known by the names of its points (unique in a plan), so a resumed run
finds the jobs of the points it still needs whatever chunks they were sent in.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from causalab_ndif.remote_errors import StoppedWaiting

POLL_FIRST_S = 0.05
"""The first wait between two polls of a job; each next wait is half as long again, up to :data:`POLL_MAX_S`."""
POLL_MAX_S = 2.0
UNSEEN_S = 60.0
"""A job the server has kept no status of this long after it was sent is one it does not know (ndif saves
QUEUED as soon as its dispatcher takes the request, well within a second on an idle server)."""


class JobGone(Exception):
    """The server no longer knows a job, or its result can no longer be downloaded."""


@dataclass
class Job:
    """One job: its points' names, and what its sending and its collection measured."""

    id: str
    points: list[str]
    sent_bytes: int | None
    submitted: float
    """When it was sent (seconds since the epoch, this client's clock)."""
    code: dict[str, Any]
    by_this_run: bool = True
    received_bytes: int | None = None
    runtime_s: float | None = None
    """The server's own measure of the job's execution (its COMPLETED status's ``meta.runtime``)."""
    result: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """What the resume store keeps of it while it runs."""
        return {"points": self.points, "sent_bytes": self.sent_bytes, "submitted": self.submitted, "code": self.code}

    @classmethod
    def from_record(cls, job_id: str, record: dict[str, Any]) -> Job:
        return cls(job_id, list(record["points"]), record.get("sent_bytes"), float(record.get("submitted", 0)),
                   record.get("code") or {}, by_this_run=False)

    def summary(self) -> dict[str, Any]:
        """run.json's entry for it (``jobs``)."""
        return {"id": self.id, "points": len(self.points), "sent_bytes": self.sent_bytes,
                "received_bytes": self.received_bytes, "runtime_s": self.runtime_s,
                "collected": "as sent" if self.by_this_run else "by --resume"}


def collect(job: Job, model_key: str, host: str) -> dict[str, Any]:
    """Wait for ``job`` without a connection held open: poll ``/response/ID`` until it completes, then
    download its result (nnsight's saved values by name). An ERROR status raises nnsight's RemoteError (as
    a blocking job's would); a job the server does not know raises :class:`JobGone`; a poll that cannot
    reach the server raises :class:`StoppedWaiting` (the run's timeout still bounds the whole wait)."""
    import httpx
    from nnsight.schema.response import Status

    from causalab_ndif import shipping

    backend = _quiet()(model_key, host=host, blocking=False, job_id=job.id)
    wait = POLL_FIRST_S
    while True:
        try:
            with shipping.measured() as got:
                result = backend.poll()
        except httpx.HTTPStatusError as exc:
            if backend.status == Status.COMPLETED:  # the result's url: expired, or its object removed
                raise JobGone(f"its result can no longer be downloaded (HTTP {exc.response.status_code})") from None
            raise StoppedWaiting(job.id, f"HTTP {exc.response.status_code} from /response/{job.id}") from None
        except httpx.TransportError as exc:
            raise StoppedWaiting(job.id, f"{type(exc).__name__}: {exc or 'no answer'}") from None

        if result is not None:
            job.received_bytes = got.received_bytes
            meta = backend.meta or {}
            job.runtime_s = round(float(meta["runtime"]), 3) if isinstance(meta.get("runtime"), (int, float)) else None
            return result
        if backend.status is None and time.time() - job.submitted > UNSEEN_S:
            raise JobGone("it has no status of it")
        time.sleep(wait)
        wait = min(POLL_MAX_S, wait * 1.5)


@functools.cache
def _quiet():
    from nnsight.intervention.backends.remote import RemoteBackend

    class Quiet(RemoteBackend):
        """nnsight's poll, but the result is downloaded without a progress bar: a detached job's result always
        comes by url (a blocking job's small one rides on its websocket), and the job's own line says its size."""

        def download_result(self, url):
            if not isinstance(url, str) or not url:
                return super().download_result(url)
            import httpx

            with httpx.Client(timeout=httpx.Timeout(10.0, read=600.0)) as client:
                response = client.get(url)
            response.raise_for_status()
            return self.finalize(response.content)

    return Quiet


def points_per_job(cap_s: float, probe_s: float, probe_points: int) -> int:
    """How many points a job may hold to stay under ``cap_s``, from a first job of ``probe_points`` that ran
    ``probe_s`` on the server. The probe's time, its fixed costs included, is charged to its points alone, so
    the estimate errs long: a job of the chosen size is expected to take less than the cap."""
    per_point = max(probe_s, 1e-6) / probe_points
    return max(1, math.floor(cap_s / per_point))


def run_jobs(points: list[Any], *, ledger: dict[str, dict[str, Any]],
             note: Callable[[str, dict[str, Any] | None], None], submit: Callable[[list[Any]], Job],
             wait: Callable[[Job], dict[str, Any]], host: str, cap_s: float | None,
             sized: dict[str, Any] | None, warn: Callable[[str], None], waiting: set[str]) -> tuple[list[Job], dict[str, Any] | None]:
    """Every point of ``points`` collected from a job: the jobs, in the order they were collected, and how
    jobs are sized (``sized``, or the estimate made here).

    ``ledger``: the jobs kept by id (an interrupted run's among them); ``note(id, record)`` keeps one at once
    (``None`` forgets it); ``submit(points)`` sends a job; ``wait(job)`` collects it; ``warn(line)`` says a
    job was sent again; ``waiting`` holds, at every moment, the ids of the jobs sent (or kept by an
    interrupted run) and not collected yet. With a cap ``cap_s``
    and no estimate yet (``sized``), the first job is a probe of one point, collected alone: its time on the
    server sizes every later job (:func:`points_per_job`). Without a cap, one job holds every point left.
    """
    from nnsight.intervention.backends.remote import RemoteError

    wanted = {p.name: p for p in points}
    kept: list[Job] = []
    taken: set[str] = set()
    for job_id, record in ledger.items():  # sent by an interrupted run: collected, not sent again
        names = set(record.get("points", ()))
        if names and names <= wanted.keys() and not names & taken:
            kept.append(Job.from_record(job_id, record))
            waiting.add(job_id)
            taken |= names
    left = [p for p in points if p.name not in taken]

    def sent(chunk: list[Any]) -> Job:
        job = submit(chunk)
        note(job.id, job.record())  # before it is waited for: a client killed now leaves its id behind
        waiting.add(job.id)
        return job

    def finish(job: Job) -> Job:
        while True:
            try:
                job.result = wait(job)
                waiting.discard(job.id)
                return job
            except JobGone as gone:
                many = "s" if len(job.points) != 1 else ""
                warn(f"the NDIF server at {host} no longer knows job {job.id} ({len(job.points)} point{many}, sent "
                     f"by {'this' if job.by_this_run else 'an interrupted'} run): {gone}; its points are sent again")
                note(job.id, None)
                waiting.discard(job.id)
                job = sent([wanted[name] for name in job.points])
            except RemoteError:  # it failed there: over, and --resume would only read the same failure
                note(job.id, None)
                waiting.discard(job.id)
                raise

    done: list[Job] = []
    if cap_s is not None and sized is None and left:
        probe = finish(sent(left[:1]))
        done.append(probe)
        left = left[1:]
        took = max(0.001, round(probe.runtime_s if probe.runtime_s is not None else time.time() - probe.submitted, 3))
        sized = {"max_job_s": cap_s, "probe_points": 1, "probe_s": took,
                 "points_per_job": points_per_job(cap_s, took, 1)}
    per = sized["points_per_job"] if sized else max(1, len(left))
    fresh = [sent(left[i:i + per]) for i in range(0, len(left), per)]  # every one sent before any is waited for
    done += [finish(job) for job in [*kept, *fresh]]
    return done, sized
