"""One real NDIF server for the whole test session: lean, serving the causalab-toy checkpoints.

The server's Python has, of causalab, only what ``causalab ndif server-requirements``
lists for the documents it serves (core, causalab-nnterp, causalab-featurizers),
installed from wheels built from this checkout as the server image's Dockerfile
installs them (the client is editable): every ndif test is a strict run against
a lean server image. It also serves a
tiny GPT-2 in bfloat16, the deployment whose dtype is not a document's.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from causalab_testing.ndif_server.lean import build_wheels, installed_causalab, lean_environment
from causalab_testing.ndif_server.stack import Deployment, TestServer, namespaces_allowed

ROOT = Path(__file__).resolve().parents[3]
CAUSALAB = str(Path(sys.executable).parent / "causalab")
SERVED = ("weekdays", "entity", "induction")
# Every document the test server runs: the studies and the v2 examples on the toy models.
SERVED_DOCUMENTS = sorted([*ROOT.glob("documents/real/*.json"), *ROOT.glob("documents/v2/*.json")])


def server_requirements() -> list[str]:
    done = subprocess.run([CAUSALAB, "ndif", "server-requirements", *map(str, SERVED_DOCUMENTS)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def deployments() -> list[Deployment]:
    from causalab_core.compiler.shell import resolve_source
    from causalab_core.plugins.registry import registry
    from causalab_ndif.shipping import plain_key
    from causalab_nnterp import served_key
    from causalab_testing import models

    found = []
    for name in SERVED:
        key = f"causalab-toy/{name}"
        source = resolve_source(key, None, registry())
        found.append(Deployment(key, served_key(key, source.name), _size(source)))
    # Also under nnsight's plain key, for a shipped block (``code=shipped``) on this server.
    weekdays = found[0]
    found.append(Deployment(weekdays.checkpoint, plain_key(weekdays.checkpoint, _revision(weekdays.model_key)),
                            weekdays.size_bytes))
    gpt2 = models.ensure("tiny-gpt2")  # served by its path: a document names it by that key
    found.append(Deployment(str(gpt2), served_key(str(gpt2), None), _size(gpt2), dtype="bfloat16"))
    return found


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


@pytest.fixture(scope="session")
def lean_requirements() -> list[str]:
    return server_requirements()


@contextlib.contextmanager
def serving(work: Path, python: Path, served: list[Deployment]):
    """A started test server on ``python``, stopped (every process of it) however the body ends."""
    server = TestServer(work, python=str(python))
    # A terminated test run still stops the server: SIGTERM unwinds to this fixture's teardown.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        server.start(served)
        yield server
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
    assert server.running() == [], f"test server processes still running: {server.running()}"
    assert server.ray_dir is None or not server.ray_dir.exists(), f"{server.ray_dir} left behind"
    assert server.tmp_dir is None or not server.tmp_dir.exists(), f"{server.tmp_dir} left behind"


@pytest.fixture(scope="session")
def causalab_wheels(tmp_path_factory, lean_requirements) -> list[Path]:
    """Wheels of the causalab distributions the lean server needs, built once per session from this checkout."""
    names = [line.split("==")[0] for line in lean_requirements if line.startswith("causalab")]
    sources = [ROOT if name == "causalab-core" else ROOT / "plugins" / name for name in names]
    return build_wheels(tmp_path_factory.mktemp("wheels"), sources)


@pytest.fixture(scope="session")
def ndif_server(tmp_path_factory, lean_requirements, causalab_wheels):
    work = tmp_path_factory.mktemp("ndif-server")
    wanted = {line.split("==")[0] for line in lean_requirements if line.startswith("causalab")}
    with serving(work, lean_environment(work / "venv", wanted, wheels=causalab_wheels), deployments()) as server:
        yield server


@pytest.fixture(scope="session")  # one for every module that needs it: starting one costs a venv and a Ray
def bare_server(tmp_path_factory):
    """A server whose Python has no causalab distribution at all (nor nnterp's wrapper): torch,
    transformers, nnsight and ndif. It serves the toy checkpoints under nnsight's plain model keys."""
    from causalab_ndif.shipping import plain_key

    if not namespaces_allowed():
        pytest.skip("two test servers need private network namespaces (unshare -n) to share their fixed ports")
    work = tmp_path_factory.mktemp("bare-server")
    python = lean_environment(work / "venv", set(), without=("nnterp",))
    assert installed_causalab(python) == []
    assert subprocess.run([str(python), "-c", "import nnterp"], capture_output=True).returncode != 0
    served = [Deployment(d.checkpoint, plain_key(d.checkpoint, _revision(d.model_key)), d.size_bytes)
              for d in deployments() if d.model_key.startswith("causalab_nnterp.")
              and d.checkpoint.startswith("causalab-toy/")]
    with serving(work, python, served) as server:
        yield server


def _revision(model_key: str) -> str | None:
    return json.loads(model_key.split(":", 1)[1])["revision"]


@pytest.fixture
def restart_server(ndif_server):
    """Stop the session's server and start it again, serving the same deployments (~1 min)."""

    def restart() -> None:
        ndif_server.stop()
        ndif_server.start(deployments())

    return restart


TAMPERED_CLIENT = """
import dataclasses, json, sys

from causalab_core import api
from causalab_core.errors import CausalabError
from causalab_core.ir import FeaturizerRef
from causalab_core.plugins.registry import registry


def tamper(obj):
    # A trained state whose bytes no longer match the digest the client recorded: what only the place
    # that uses the tensors can see (here, inside the block; remotely, on the server).
    if isinstance(obj, FeaturizerRef) and obj.state:
        return dataclasses.replace(obj, state=obj.state[:-1] + bytes([obj.state[-1] ^ 1]))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: tamper(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, (tuple, list)):
        return type(obj)(tamper(x) for x in obj)
    if isinstance(obj, dict):
        return {k: tamper(v) for k, v in obj.items()}
    return obj


plan = tamper(api.plan(sys.argv[1]))
told = {}
for engine in ("nnterp", "ndif"):
    try:
        registry().get("engine", engine)().execute(plan, featurizers=api.featurizer_classes(plan, registry()))
    except CausalabError as error:
        told[engine] = [type(error).__name__, error.one_line(), error.exit_code, bool(getattr(error, "server_traceback", None))]
print(json.dumps(told))
"""


@pytest.fixture
def server_only_error(tmp_path):
    """``told(server)``: how the nnterp and ndif engines each fail on a plan whose trained DAS state was
    altered after the client checked it (what only the block that uses the tensors can see):
    ``{engine: [class, one line, exit code, whether a server traceback came along]}``."""
    import torch
    from safetensors.torch import save_file

    from causalab_core import api
    from causalab_core.compiler.featurizers import identity
    from causalab_core.ir import FeaturizerRef

    document = json.loads((ROOT / "documents/real/weekdays_das.json").read_text())
    document["featurizers"]["das"] = {"kind": "das", "rank": 8, "load": "q.safetensors"}
    document["sweep"] = {"layer": [5], "pos": [-1]}
    path = tmp_path / "das.json"
    path.write_text(json.dumps(document))
    probe = api.plan(ROOT / "documents/real/weekdays_layer_sweep.json")
    site = next(w.site for p in probe.points for s in p.steps for w in getattr(s, "writes", ())
                if w.site.layer == 5 and w.site.component == "block_input")
    save_file({"rotation": torch.eye(64)}, tmp_path / "q.safetensors",
              metadata=identity(probe.model, site, -1, FeaturizerRef("das", "das", {"rank": 8})))

    def told(server):
        done = server.run([sys.executable, "-c", TAMPERED_CLIENT, str(path)])
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    return told
