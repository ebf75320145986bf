"""The server image recipe: the Dockerfile installs exactly what `causalab ndif server-requirements` prints.

No Docker daemon runs here; the lean server the other ndif tests run against is
the real thing (see conftest.py): a server environment holding only these
distributions of causalab, accepted by the strict preflight.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CAUSALAB = str(Path(sys.executable).parent / "causalab")
DOCKERFILE = ROOT / "plugins/causalab-ndif/server/Dockerfile"


def _run_lines(text: str) -> list[str]:
    """The Dockerfile's RUN instructions, continuation lines joined."""
    return [m.group(1) for m in re.finditer(r"^RUN (.*?)(?<!\\)$", text.replace("\\\n", " "), flags=re.M)]


def test_the_dockerfile_installs_exactly_the_printed_requirements(lean_requirements):
    runs = _run_lines(DOCKERFILE.read_text())
    install = next(r for r in runs if r.startswith("pip install --no-deps"))
    assert [w for w in install.split("&&")[0].split() if "==" in w] == lean_requirements

    causalab = [line.split("==")[0] for line in lean_requirements if line.startswith("causalab")]
    wheels = next(r for r in runs if r.startswith("pip wheel"))
    sources = [w for w in wheels.split() if w.startswith("/src")]
    assert sources == ["/src", *(f"/src/plugins/{name}" for name in causalab if name != "causalab-core")]
    imports = runs[-1]
    for name in causalab:
        assert f"{name.replace('-', '_')}" in imports, name


def test_server_requirements_lists_only_what_a_block_imports(lean_requirements):
    names = [line.split("==")[0] for line in lean_requirements]
    assert names[:5] == ["torch", "transformers", "nnsight", "nnterp", "pydantic"]
    # DAS documents need the featurizers' distribution; nothing that runs on the client is listed.
    assert names[5:] == ["causalab-core", "causalab-featurizers", "causalab-nnterp"]
    sweep_only = subprocess.run([CAUSALAB, "ndif", "server-requirements", str(ROOT / "documents/real/weekdays_layer_sweep.json")],
                                capture_output=True, text=True)
    assert sweep_only.returncode == 0, sweep_only.stderr
    assert [line.split("==")[0] for line in sweep_only.stdout.split()][5:] == ["causalab-core", "causalab-nnterp"]


def test_a_bad_document_is_one_line(tmp_path):
    done = subprocess.run([CAUSALAB, "ndif", "server-requirements", str(tmp_path / "missing.json")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("DocumentError: ") and done.stderr.count("\n") == 1


def test_the_lean_server_has_only_the_listed_distributions(ndif_server, lean_requirements):
    from causalab_testing.ndif_server.lean import installed_causalab

    listed = sorted(line.split("==")[0] for line in lean_requirements if line.startswith("causalab"))
    assert installed_causalab(Path(ndif_server.python)) == listed
