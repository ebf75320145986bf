"""One real NDIF server for the whole test session: lean, serving the causalab-toy checkpoints.

The server's Python has, of causalab, only what ``causalab ndif server-requirements``
lists for the documents it serves (core, causalab-nnterp, causalab-featurizers):
every ndif test is a strict run against a lean server image. It also serves a
tiny GPT-2 in bfloat16, the deployment whose dtype is not a document's.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from causalab_testing.ndif_server.lean import lean_environment
from causalab_testing.ndif_server.stack import Deployment, TestServer

ROOT = Path(__file__).resolve().parents[3]
CAUSALAB = str(Path(sys.executable).parent / "causalab")
SERVED = ("weekdays", "entity")
# Every document the test server runs: the studies and the v2 examples on the toy models.
SERVED_DOCUMENTS = sorted([*ROOT.glob("documents/real/*.json"), *ROOT.glob("documents/v2/*.json")])


def server_requirements() -> list[str]:
    done = subprocess.run([CAUSALAB, "ndif", "server-requirements", *map(str, SERVED_DOCUMENTS)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def deployments() -> list[Deployment]:
    from causalab_core.compiler.shell import resolve_source
    from causalab_core.plugins import registry
    from causalab_nnterp import served_key
    from causalab_testing import models

    found = []
    for name in SERVED:
        key = f"causalab-toy/{name}"
        source = resolve_source(key, None, registry())
        found.append(Deployment(key, served_key(key, source.name), _size(source)))
    gpt2 = models.ensure("tiny-gpt2")  # served by its path: a document names it by that key
    found.append(Deployment(str(gpt2), served_key(str(gpt2), None), _size(gpt2), dtype="bfloat16"))
    return found


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


@pytest.fixture(scope="session")
def lean_requirements() -> list[str]:
    return server_requirements()


@pytest.fixture(scope="session")
def ndif_server(tmp_path_factory, lean_requirements):
    work = tmp_path_factory.mktemp("ndif-server")
    wanted = {line.split("==")[0] for line in lean_requirements if line.startswith("causalab")}
    server = TestServer(work, python=str(lean_environment(work / "venv", wanted)))
    # A terminated test run still stops the server: SIGTERM unwinds to this fixture's teardown.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        server.start(deployments())
        yield server
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
    assert server.running() == [], f"test server processes still running: {server.running()}"
    assert server.ray_dir is None or not server.ray_dir.exists(), f"{server.ray_dir} left behind"


@pytest.fixture
def restart_server(ndif_server):
    """Stop the session's server and start it again, serving the same deployments (~1 min)."""

    def restart() -> None:
        ndif_server.stop()
        ndif_server.start(deployments())

    return restart
