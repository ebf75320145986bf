"""A failure on the server, told the way the same failure is told locally.

nnsight raises a server-side exception as one ``RemoteError`` whose text is the
server's traceback. A causalab error (its last line names the class) becomes
that same class with the same message, so the CLI prints the same one line and
exits with the same code; anything else is an EngineError naming the host. The
server's traceback rides along as ``server_traceback`` for ``--verbose``.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import signal
import threading

from causalab_core.errors import CausalabError, EngineError

LAST_LINE = re.compile(r"^(?P<cls>[A-Za-z_][\w.]*): (?P<message>.*)$")


def _causalab_class(qualified: str) -> type[CausalabError] | None:
    module, _, name = qualified.rpartition(".")
    if not module.startswith("causalab"):
        return None
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return cls if isinstance(cls, type) and issubclass(cls, CausalabError) else None


# What ndif says when the model actor running a job died or was lost (a request it could not re-queue).
DEPLOYMENT_LOST = "Error submitting request to model deployment"
# What websocket-client, httpx and the socket layer raise when an open connection drops.
CONNECTION_LOST = ("WebSocketConnectionClosedException", "ConnectionResetError", "BrokenPipeError",
                   "RemoteProtocolError", "ReadError", "WebSocketBadStatusException")


def local_error(exc: BaseException, host: str, kept: int = 0) -> CausalabError:
    """The causalab error to raise on the client for ``exc`` from a remote session: one line saying what
    happened. ``kept``: how many jobs' ids the resume store keeps, still on the server (the line says that
    ``--resume`` collects them where the client only stopped waiting)."""
    if isinstance(exc, CausalabError):
        return exc
    error = _classify(exc, host)
    if kept and isinstance(exc, (JobTimeout, StoppedWaiting)):
        error = EngineError(f"{error}; {kept} job{'s' if kept != 1 else ''} sent stay{'s' if kept == 1 else ''} "
                            "on the server, kept beside --out: --resume collects what finished")
    error.server_traceback = str(exc).strip() if type(exc).__name__ == "RemoteError" else None
    return error


def _classify(exc: BaseException, host: str) -> CausalabError:
    text = str(exc).strip()
    kind = type(exc).__name__
    if isinstance(exc, StoppedWaiting):
        return EngineError(f"the NDIF server at {host} stopped answering while collecting job {exc.job_id} "
                           f"({exc.reason})")
    if isinstance(exc, JobTimeout):
        return EngineError(f"the job on the NDIF server at {host} did not finish within {exc.seconds:g} s "
                           "(the server stopped answering, or the job is slower than that; --option timeout=SECONDS)")
    if kind in CONNECTION_LOST:
        return EngineError(f"the connection to the NDIF server at {host} was lost mid-job ({kind}: {text or 'closed'})")
    if kind != "RemoteError":
        return EngineError(f"the request to the NDIF server at {host} failed: {kind}: {text}")
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and lines[-1].startswith(DEPLOYMENT_LOST):
        return EngineError(f"the model deployment on the NDIF server at {host} was lost mid-job (its actor died "
                           f"or stopped); the server said: {lines[-1]}")
    last = LAST_LINE.match(lines[-1]) if lines else None
    cls = _causalab_class(last["cls"]) if last else None
    if cls is not None:
        return cls(last["message"])
    return EngineError(f"the NDIF server at {host} failed running the plan: {lines[-1] if lines else 'no reason given'}")


class StoppedWaiting(Exception):
    """A poll of a job sent without a connection held open got no answer (no connection, a dropped one, an
    HTTP error, or none within the timeout)."""

    def __init__(self, job_id: str, reason: str):
        super().__init__(reason)
        self.job_id = job_id
        self.reason = reason


class JobTimeout(Exception):
    """The remote job ran past the ndif engine's ``timeout``."""

    def __init__(self, seconds: float):
        super().__init__(seconds)
        self.seconds = seconds


@contextlib.contextmanager
def bounded(seconds: float, host: str):
    """Raise :class:`JobTimeout` once the body has run ``seconds``, wherever it is waiting.

    nnsight waits for a job's status on a websocket with no deadline of its own,
    so a server that stops answering would hold the client forever. A SIGALRM
    interrupts that wait; it can be set only from the main thread, so elsewhere
    the body runs unbounded.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        raise JobTimeout(seconds)

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
