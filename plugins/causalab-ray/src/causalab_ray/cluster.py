"""Reaching a Ray cluster: one started on 127.0.0.1 for the run, or an existing one at an address.

Every way this fails is one ``EngineError`` line, before any point runs: a
cluster that cannot start, an address where nothing answers, a cluster whose Ray
or Python version this client cannot talk to. Ray is told to keep to loopback
(``_node_ip_address``), to send no usage report (``RAY_USAGE_STATS_ENABLED=0``)
and to serve no dashboard UI (its API server and node agents still start, on
127.0.0.1); a cluster started here keeps its session files in its own temporary
folder, and ends with the run, a killed client's too (``causalab_ray.reaper``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from causalab_core.errors import EngineError, clip, echo

from causalab_ray import reaper

LOOPBACK = "127.0.0.1"
SINGLE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@dataclass
class Cluster:
    """The cluster a run uses. ``owned``: this run called ``ray.init`` (and so shuts it down)."""

    address: str
    owned: bool
    temp_dir: str | None = None
    reaper: subprocess.Popen | None = None
    """Ends what the cluster started if this process dies without ``close`` (``causalab_ray.reaper``)."""

    def close(self) -> None:
        import ray

        if self.owned and ray.is_initialized():
            ray.shutdown()
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        if self.reaper is not None:
            self.reaper.kill()
            self.reaper.wait()


def _quiet() -> None:
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # Ray would otherwise report usage to an outside address
    import ray._private.worker

    # Ray's driver prints what its cluster publishes (a worker died, a raylet is gone) to stdout, in colour and
    # over many lines, whatever stdout is: the runner says each such event once, on stderr, and stdout keeps
    # to what causalab promises there (the files written).
    ray._private.worker.print_to_stdstream = lambda data, ignore_prefix: None


def _token_auth() -> None:
    """Send this user's Ray token (``~/.ray/auth_token``, ``RAY_AUTH_TOKEN``) where one exists and
    ``RAY_AUTH_MODE`` says nothing, as Ray's own ``address="auto"`` does: a cluster ``ray.init`` or ``ray start``
    started (Ray 2.5x and later) refuses a client without it, and Ray's explicit addresses do not send it."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication
        return
    log = logging.getLogger("ray._private.authentication.authentication_token_setup")
    level = log.level
    log.setLevel(logging.ERROR)  # its line that auth is on is Ray's business
    try:
        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    finally:
        log.setLevel(level)


def start_local(cpus: int | None = None, temp_dir: str | None = None) -> Cluster:
    """Start a Ray cluster in this process on 127.0.0.1 (``cpus``: what it offers, default this machine's)."""
    _quiet()
    import ray

    for old in reaper.leftovers():  # a killed client's cluster, if its reaper could not end it
        reaper.end(str(old))
    made = temp_dir is None
    try:
        temp_dir = temp_dir or tempfile.mkdtemp(prefix=reaper.PREFIX)
        (Path(temp_dir) / reaper.OWNER).write_text(str(os.getpid()))
    except OSError as exc:
        raise EngineError(f"--workers: cannot make a folder for a local Ray cluster's session: "
                          f"{exc.strerror or exc}") from None
    reaping = subprocess.Popen([sys.executable, reaper.__file__, str(os.getpid()), temp_dir], start_new_session=True,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ[reaper.MARK] = temp_dir  # inherited by every process the cluster starts: what the reaper ends
    try:
        with _one_machine():
            context = ray.init(address="local", num_cpus=cpus, include_dashboard=False, _node_ip_address=LOOPBACK,
                               _temp_dir=temp_dir, log_to_driver=False, logging_level=logging.ERROR,
                               configure_logging=True)
    except Exception as exc:  # noqa: BLE001 (whatever Ray raised, said in one line)
        reaping.kill()
        if made:
            reaper.end(temp_dir)
        raise EngineError(f"--workers: cannot start a local Ray cluster: {_said(exc)}") from exc
    finally:
        os.environ.pop(reaper.MARK, None)
    return Cluster(context.address_info["gcs_address"], owned=True, temp_dir=temp_dir if made else None,
                   reaper=reaping)


def connect(address: str | None) -> Cluster:
    """The cluster at ``address``, or a new local one; where this process is connected already, that one."""
    _quiet()
    import ray

    if ray.is_initialized():  # the caller's own cluster (a notebook's, a test session's): used, left running
        return Cluster(ray.get_runtime_context().gcs_address, owned=False)
    if address is None:
        return start_local()
    where = f"--ray-address {echo(address)}"
    host, sep, port = address.rpartition(":")
    if sep and port.isdigit() and "//" not in host:  # HOST:PORT: is anything there? (Ray would retry for a minute)
        try:
            answer = _grpc_answer(host, int(port))
        except OSError as exc:
            raise EngineError(f"{where}: no Ray cluster answers there ({exc.strerror or exc})") from None
        if answer is not None:  # Ray would wait minutes on it, printing its own logs
            raise EngineError(f"{where}: what listens there is not a Ray cluster ({answer}); give the address "
                              "`ray start --head` printed")
    _token_auth()
    try:
        # A cluster on loopback is this machine's: this client is a node of it as 127.0.0.1 (else Ray would wait
        # for a node of this machine's outside address, which that cluster does not have).
        with _one_machine() if host in ("127.0.0.1", "localhost") else contextlib.nullcontext():
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR, configure_logging=True)
    except Exception as exc:  # noqa: BLE001
        raise EngineError(f"{where}: {_said(exc)}") from exc
    return Cluster(address, owned=True)


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""What an HTTP/2 client sends first (the preface, then an empty SETTINGS frame): a Ray cluster's address is
its GCS, a gRPC server, which answers with a SETTINGS frame of its own."""


def _grpc_answer(host: str, port: int, timeout: float = 5.0) -> str | None:
    """None where a gRPC server answers at ``host:port``; else, in words, what did (an OSError where nothing
    listens). Seconds at most, where Ray's own client would retry for minutes."""
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.settimeout(timeout)
        try:
            conn.sendall(PREFACE)
            first = conn.recv(9)
        except TimeoutError:
            return f"nothing came back within {timeout:g} s"
        except OSError as exc:
            return f"the connection failed: {exc.strerror or exc}"
    if len(first) >= 4 and first[3] == 4:  # an HTTP/2 frame of type SETTINGS
        return None
    return f"it answered {first[:16]!r}" if first else "it closed the connection"


@contextlib.contextmanager
def _one_machine() -> Iterator[None]:
    """Ray's one-machine mode while a cluster starts or a client joins one: Ray takes 127.0.0.1 for "this
    machine" and puts its outside address in its place, except where clusters are off (Windows and macOS by
    default, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``). The switch is read when ray is imported (so it is set
    on the module too) and inherited by the processes the cluster starts; it is put back after: nothing reads
    it later."""
    import ray  # noqa: F401
    from ray._private import ray_constants

    before, mode = os.environ.get(SINGLE), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[SINGLE], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = mode
        if before is None:
            os.environ.pop(SINGLE, None)
        else:
            os.environ[SINGLE] = before


def _said(exc: BaseException) -> str:
    """Ray's error in one line; a version mismatch as the two versions on each side."""
    text = str(exc)
    found = re.search(r"started with:\s*Ray: (\S+)\s*Python: (\S+)\s*This process on .*? was started with:\s*"
                      r"Ray: (\S+)\s*Python: (\S+)", text, re.S)
    if "Version mismatch" in text and found:
        ray_c, py_c, ray_here, py_here = found.groups()
        return (f"the cluster runs Ray {ray_c} on Python {py_c}, this client Ray {ray_here} on Python {py_here}; "
                "Ray talks only to its own version: install the cluster's on the client (or start the cluster "
                "with the client's)")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return clip(f"{type(exc).__name__}: {lines[-1] if lines else ''}")
