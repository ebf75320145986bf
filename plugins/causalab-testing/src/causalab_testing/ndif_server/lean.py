"""A lean server environment: this one's packages, but of causalab only the distributions a server needs.

Installing torch, transformers, Ray and ndif afresh would take minutes and a
gigabyte, so the lean environment is a virtual environment whose
site-packages links this environment's entries one by one, leaving out every
causalab distribution not asked for (its metadata and its editable path
hook): to ``importlib.metadata`` and to causalab's registry those are simply
not installed. The test harness (this package) stays importable by path, with
no metadata, because the server's CPU actors live in it; it is never listed as
installed. Console scripts (ray, gunicorn, moto_server) are copied with the
lean interpreter in their first line, so every server process runs lean.

Given wheels, the kept causalab distributions are installed from them (``pip
install --no-deps``, no ``-e``), as the server image's Dockerfile does: the
server then holds copies of this checkout's files, never links to them.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

HARNESS = "causalab_testing"


def _owner(entry: str) -> str | None:
    """The causalab import name a site-packages entry belongs to, if any."""
    for prefix in ("_editable_impl_", "__editable__."):
        if entry.startswith(prefix + "causalab_"):
            return entry.removeprefix(prefix).split(".")[0].split("-")[0]
    if entry.startswith("causalab_") and entry.endswith(".dist-info"):
        return entry.split("-")[0]
    return None


def build_wheels(folder: Path, sources: list[Path]) -> list[Path]:
    """Wheels of the distributions at ``sources`` (source folders), built offline with the build backend
    installed here (``--no-build-isolation``), as the Dockerfile's first stage builds them."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(folder), *map(str, sources)], check=True)
    return sorted(folder.glob("*.whl"))


def lean_environment(folder: Path, distributions: set[str], without: tuple[str, ...] = (),
                     wheels: list[Path] = ()) -> Path:
    """Build the environment in ``folder`` keeping only ``distributions`` of causalab, and none of the
    other packages named in ``without`` (by import name, e.g. ``nnterp``); returns its python. With
    ``wheels``, those distributions are installed from them instead of linked from this environment."""
    keep = {name.replace("-", "_") for name in distributions}
    linked = set() if wheels else keep
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    here = Path(sysconfig.get_paths()["purelib"])
    for entry in here.iterdir():
        owner = _owner(entry.name)
        harness_hook = owner == HARNESS and not entry.name.endswith(".dist-info")
        if entry.name.split("-")[0].removesuffix(".py") in without:
            continue
        if owner is None or owner in linked or harness_hook:
            (site / entry.name).symlink_to(entry)
    bin_here = Path(sys.executable).parent
    for script in bin_here.iterdir():
        if script.is_file() and not (folder / "bin" / script.name).exists():
            head = script.read_bytes()[:200]
            if head.startswith(b"#!") and str(bin_here).encode() in head.split(b"\n")[0]:
                body = script.read_text().split("\n", 1)[1]
                target = folder / "bin" / script.name
                target.write_text(f"#!{python}\n{body}")
                target.chmod(0o755)
    if wheels:
        chosen = [w for w in wheels if w.name.split("-")[0] in keep]
        assert len(chosen) == len(keep), f"wheels {[w.name for w in wheels]} do not hold all of {sorted(keep)}"
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        "--disable-pip-version-check", "--no-warn-script-location", *map(str, chosen)], check=True)
    return python


def installed_causalab(python: Path) -> list[str]:
    """The causalab distributions ``python`` has installed, by name."""
    code = ("import importlib.metadata as m; print('\\n'.join(sorted({d.metadata['Name'] for d in m.distributions() "
            "if d.metadata['Name'].startswith('causalab')})))")
    return subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True).stdout.split()
