"""One real NDIF server for the whole test session, serving the causalab-toy checkpoints."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from causalab_ndif.testserver.stack import Deployment, TestServer

ROOT = Path(__file__).resolve().parents[3]
SERVED = ("weekdays", "entity")


def deployments() -> list[Deployment]:
    from causalab_core.compiler.shell import resolve_source
    from causalab_core.plugins import registry
    from causalab_nnterp import served_key

    found = []
    for name in SERVED:
        key = f"causalab-toy/{name}"
        source = resolve_source(key, None, registry())
        size = sum(p.stat().st_size for p in source.glob("*.safetensors"))
        found.append(Deployment(key, served_key(key, source.name), size))
    return found


@pytest.fixture(scope="session")
def ndif_server(tmp_path_factory):
    server = TestServer(tmp_path_factory.mktemp("ndif-server"))
    # A terminated test run still stops the server: SIGTERM unwinds to this fixture's teardown.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        server.start(deployments())
        yield server
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
    assert server.running() == [], f"test server processes still running: {server.running()}"

