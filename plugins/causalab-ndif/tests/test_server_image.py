"""The server image recipe: the Dockerfile installs exactly what `causalab ndif server-requirements` prints.

No Docker daemon runs here; the lean server the other ndif tests run against is
the real thing (see conftest.py): a server environment holding only these
distributions of causalab, accepted by the strict preflight.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
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


# -- the digest of a server installed from wheels ----------------------------------------------------


DIGESTS = ("import json, sys; sys.path[:0] = sys.argv[1:]; from causalab_core.plugins.registry import installed_causalab; "
           "print(json.dumps({k: v['digest'] for k, v in installed_causalab().items()}))")


def _digests(*paths: Path) -> dict[str, str]:
    done = subprocess.run([sys.executable, "-c", DIGESTS, *map(str, paths)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_same_files_digest_alike_however_they_were_installed(causalab_wheels, tmp_path):
    """Wheels installed without -e (RECORD paths), a plain source tree on sys.path (no metadata of its own) and
    this editable client: the same bytes, the same digests; one edited file in the tree changes its
    distribution's digest alone."""
    from causalab_core.plugins.registry import installed_causalab

    editable = {k: v["digest"] for k, v in installed_causalab().items()}
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(wheels),
                    "--disable-pip-version-check", *map(str, causalab_wheels)], check=True)
    tree = tmp_path / "tree"
    for name in ("causalab_core", "causalab_nnterp", "causalab_featurizers"):
        shutil.copytree((wheels / name), tree / name)
    names = ["causalab-core", "causalab-featurizers", "causalab-nnterp"]
    assert [_digests(wheels)[n] for n in names] == [editable[n] for n in names]

    with open(tree / "causalab_nnterp" / "sites.py", "a") as f:
        f.write("# one line the client does not have\n")
    edited = _digests(tree)
    assert [n for n in names if edited[n] != editable[n]] == ["causalab-nnterp"]


def _server_site(server) -> Path:
    return next((Path(server.python).parent.parent / "lib").glob("python*/site-packages"))


def _reload_model_actors(server) -> None:
    """Kill the model actors: each next job provisions its deployment anew, importing the server's causalab afresh."""
    for pid in server.running():
        try:
            if "CPUModelDeployment" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def _run_fresh(server, argv: list[str]) -> subprocess.CompletedProcess:
    """``argv`` run on the server; a job sent while a killed actor is still being replaced is told so
    (`was lost mid-job`) and is sent again, a few times at most."""
    for _ in range(5):
        done = server.run(argv)
        if "was lost mid-job" not in done.stderr:
            return done
        time.sleep(2)
    return done


def test_the_wheel_installed_server_runs_strict_and_an_edit_on_it_is_refused(ndif_server, tmp_path):
    site = _server_site(ndif_server)
    assert (site / "causalab_core" / "__init__.py").is_file() and not (site / "causalab_core").is_symlink()
    run = [CAUSALAB, "run", str(ROOT / "documents/real/weekdays_layer_sweep.json"), "--engine", "ndif"]
    edited = site / "causalab_nnterp" / "sites.py"
    original = edited.read_bytes()
    try:
        edited.write_bytes(original + b"# an operator's local change\n")
        _reload_model_actors(ndif_server)
        done = _run_fresh(ndif_server, [*run, "--out", str(tmp_path / "edited")])
        assert done.returncode == 1, done.stderr
        line = done.stderr.strip().splitlines()[-1]
        assert line.startswith("EngineError: the server's causalab sources differ from the client's: causalab-nnterp "
                               "(client 0.1.0 "), line
        assert not (tmp_path / "edited").exists()
    finally:
        edited.write_bytes(original)
        _reload_model_actors(ndif_server)
    done = _run_fresh(ndif_server, [*run, "--out", str(tmp_path / "strict")])  # the file back: strict passes again
    assert done.returncode == 0, done.stderr
