"""A real NDIF server (ndif 0.1.2) on this machine, for tests: no Docker, no GPU, loopback only.

It starts redis, an S3 stand-in (moto), a Ray head, the NDIF controller and
the API, each as a process of this module's choosing, inside a private network
namespace (``unshare -n``) when the machine allows it, so fixed ports never
clash and nothing leaves loopback. Clients reach it through :meth:`command`,
which wraps a command line so that it runs inside the same namespace.

Ray daemonizes outside any process group, so every process started here is
marked with a token in its environment; :meth:`stop` kills exactly the
processes that carry it, and the ones it spawned itself (redis rewrites its
environment block to set its process title, so its mark cannot be read back),
by id (never ``ray stop``, which kills by name).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

MARK = "CAUSALAB_TESTSERVER"
API_PORT = 8001
HOST = f"http://127.0.0.1:{API_PORT}"


def namespaces_allowed() -> bool:
    """Whether this process may create a private network namespace."""
    if not shutil.which("unshare") or not shutil.which("nsenter"):
        return False
    return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0


def marked_pids(token: str) -> list[int]:
    """Every live process whose environment carries ``MARK=token``."""
    needle = f"{MARK}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def pids_using(folder: Path) -> list[int]:
    """Every live process with ``folder`` in its command line or an open file under it.

    Ray's agents are started without the environment that carries the mark,
    but each holds its log files in the session folder open.
    """
    needle = str(folder)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle.encode() in (entry / "cmdline").read_bytes() or any(
                    os.readlink(fd).startswith(needle) for fd in (entry / "fd").iterdir()):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@dataclass
class Deployment:
    """One checkpoint to serve: its remote model key, its weights' size in bytes, the dtype it is served in."""

    checkpoint: str
    model_key: str
    size_bytes: int
    dtype: str = "float32"


@dataclass
class TestServer:
    """Start with :meth:`start`, stop with :meth:`stop`; logs are under ``workdir``."""

    workdir: Path
    python: str = sys.executable
    extra_env: dict[str, str] = field(default_factory=dict)
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    isolated: bool = field(default_factory=namespaces_allowed)
    holder: subprocess.Popen | None = None
    spawned: list[subprocess.Popen] = field(default_factory=list)
    ray_dir: Path | None = None
    """Ray's session folder (sockets, logs); outside ``workdir`` because a socket path must stay short."""
    tmp_dir: Path | None = None
    """Every server process's TMPDIR (multiprocessing's ``pymp-*`` folders land there), removed by :meth:`stop`."""

    @property
    def host(self) -> str:
        return HOST

    def env(self) -> dict[str, str]:
        """The environment of every server process (and of clients run through :meth:`command`)."""
        bin_dir = str(Path(self.python).parent)
        return {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            MARK: self.token,
            "NDIF_REDIS_URL": "redis://127.0.0.1:6379",
            "NDIF_OBJECT_STORE_URL": "http://127.0.0.1:9000",
            "NDIF_OBJECT_STORE_ACCESS_KEY": "testing",
            "NDIF_OBJECT_STORE_SECRET_KEY": "testing",
            "NDIF_RAY_ADDRESS": "ray://127.0.0.1:10001",
            "NDIF_API_URL": HOST,
            "NDIF_MODEL_IMPORT_PATH": "causalab_testing.ndif_server.actors.CPUModelActor",
            "NDIF_CONTROLLER_IMPORT_PATH": "causalab_testing.ndif_server.actors.CPUControllerActor",
            "NDIF_DEFAULT_DTYPE": "float32",
            "NDIF_MINIMUM_DEPLOYMENT_TIME_SECONDS": "0",
            "GUNICORN_CMD_ARGS": f"--bind 127.0.0.1:{API_PORT}",
            "GRPC_ENABLE_FORK_SUPPORT": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
            # Ray 2.60 turns token auth on wherever ~/.ray/auth_token exists (a local ray.init() elsewhere writes
            # one), and the controller then cannot join the head: this loopback-only server runs without it.
            "RAY_AUTH_MODE": "disabled",
            "HF_HUB_OFFLINE": "1",
            "NDIF_HOST": HOST,
            "NDIF_API_KEY": "local",
            **({"TMPDIR": str(self.tmp_dir)} if self.tmp_dir is not None else {}),
            **self.extra_env,
        }

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` made to run where the server's loopback is."""
        if self.isolated and self.holder is not None:
            return ["nsenter", f"--net=/proc/{self.holder.pid}/ns/net", *argv]
        return list(argv)

    def run(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        """Run a client command beside the server; returns its completed process (text output)."""
        env = {**self.env(), **kwargs.pop("env", {})}
        return subprocess.run(self.command(argv), env=env, capture_output=True, text=True, **kwargs)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "ab")
        process = subprocess.Popen(self.command(argv), env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        self.spawned.append(process)
        return process

    def start(self, deployments: list[Deployment], timeout: float = 300) -> None:
        """Bring every service up and deploy ``deployments``; raises with the logs' tail if it cannot."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir = Path(tempfile.mkdtemp(prefix="cltmp-", dir="/tmp"))  # short: sockets are made in it
        if self.isolated:
            self.holder = subprocess.Popen(
                ["unshare", "-n", "sh", "-c", "ip link set lo up && exec sleep infinity"],
                env={**os.environ, MARK: self.token}, start_new_session=True)
            time.sleep(0.2)
        deadline = time.monotonic() + timeout
        try:
            self._spawn("redis", ["redis-server", "--bind", "127.0.0.1", "--port", "6379", "--save", "",
                                  "--appendonly", "no"])
            self._spawn("s3", [str(Path(self.python).parent / "moto_server"), "-H", "127.0.0.1", "-p", "9000"])
            self.ray_dir = Path(tempfile.mkdtemp(prefix="clray-", dir="/tmp"))
            resources = {"head": 10, "cuda_memory_bytes": 8 << 30, "cpu_memory_bytes": 8 << 30}
            head = self.run(["ray", "start", "--head", "--node-ip-address=127.0.0.1", "--port=6385",
                             "--num-gpus=1", f"--resources={json.dumps(resources)}",
                             "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--temp-dir={self.ray_dir}",
                             "--disable-usage-stats"], timeout=120)
            if head.returncode != 0:
                raise RuntimeError(f"ray start failed: {head.stdout[-2000:]}{head.stderr[-2000:]}")
            launch = self.run([self.python, "-m", "ndif.services.ray.deployments.controller.controller"],
                              env={"RAY_ADDRESS": "127.0.0.1:6385"}, timeout=120)
            if launch.returncode != 0:
                raise RuntimeError(f"the NDIF controller did not start: {launch.stderr[-2000:]}")
            self._spawn("api", [str(Path(self.python).parent / "gunicorn"), "--config",
                                "python:ndif.services.api.gunicorn_conf", "ndif.services.api.app:app"])
            self._wait_connected(deadline)
            self._deploy(deployments, deadline)
        except BaseException:
            self.stop()
            raise

    def _get(self, path: str, deadline: float) -> str | None:
        fetch = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"
        probe = self.run([self.python, "-c", fetch, f"{HOST}{path}"], timeout=max(1.0, deadline - time.monotonic()))
        return probe.stdout if probe.returncode == 0 else None

    def _wait_connected(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if (self._get("/connected", deadline) or "").find("connected") >= 0:
                return
            time.sleep(1)
        raise RuntimeError(f"the NDIF API never connected; see {self.workdir}/api.log")

    def _deploy(self, deployments: list[Deployment], deadline: float) -> None:
        specs = [{"checkpoint": d.checkpoint, "model_key": d.model_key, "size_bytes": d.size_bytes,
                  "dtype": d.dtype, "pinned": True, "padding_bias": 0} for d in deployments]
        script = ("import json, sys\nfrom ndif.cli.lib.deploy import deploy\n"
                  "result = deploy(json.loads(sys.argv[1]))\n"
                  "bad = [d for d in result['deployments'] if d['status'] != 'READY']\n"
                  "sys.exit(json.dumps(bad) if bad else 0)\n")
        done = self.run([self.python, "-c", script, json.dumps(specs)],
                        timeout=max(1.0, deadline - time.monotonic()))
        if done.returncode != 0:
            raise RuntimeError(f"deploy failed: {done.stdout[-2000:]}{done.stderr[-3000:]}")

    def running(self) -> list[int]:
        """Ids of this server's processes that are still alive."""
        spawned = [p.pid for p in self.spawned if p.poll() is None]
        ray = pids_using(self.ray_dir) if self.ray_dir is not None else []
        return sorted(set(marked_pids(self.token)) | set(spawned) | set(ray))

    def stop(self) -> list[int]:
        """Kill every process this server started, by id; returns the ids that were running."""
        pids = self.running()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.running():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            end = time.monotonic() + 10
            while self.running() and time.monotonic() < end:
                time.sleep(0.2)
        for process in [*self.spawned, *([self.holder] if self.holder else [])]:
            process.wait(timeout=10)
        if self.ray_dir is not None:  # its logs hold the server's environment, API key included
            shutil.rmtree(self.ray_dir, ignore_errors=True)
        if self.tmp_dir is not None:  # processes killed by signal leave their temporary folders behind
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
        return pids
