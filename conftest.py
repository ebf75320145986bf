"""What every test session shares: causalab-testing's fixtures, and the studies of documents/real/README.md,
run once as its commands are written (tests/test_readme_commands.py checks them; the studies' own tests read
their folders instead of running each study a second time)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path

import pytest

# Torch on one thread in the tests and every process they start (studies, servers, Ray workers), set before
# torch loads: CI's 2 cores are shared with other work, where two threads ran a study 1.6x slower (25 s
# against 15 s) and the report's studies 5x. Tests that compare thread counts set theirs.
os.environ.setdefault("OMP_NUM_THREADS", "1")

pytest_plugins = ["causalab_testing.fixtures"]

ROOT = Path(__file__).parent
STUDIES = ROOT / "documents" / "real" / "README.md"


def readme_commands(readme: Path = STUDIES) -> list[str]:
    """Every command line of a README's bash blocks, in order."""
    blocks = re.findall(r"```bash\n(.*?)```", readme.read_text(), re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip() and not line.startswith("#")]


def bodies(command: str) -> list[str]:
    """A command line as the commands it runs one after another: a `for` loop's body once per value."""
    loop = re.fullmatch(r"for (\w+) in ([^;]+); do (.*); done", command.strip())
    return [loop[3].replace(f"${loop[1]}", value) for value in loop[2].split()] if loop else [command]


def written_by(command: str) -> dict[str, str]:
    """Document file name -> the --out folder, for each `causalab run` a command line makes."""
    return {doc: out for body in bodies(command)
            for doc, out in re.findall(r"documents/real/(\S+\.json) --out (\S+)", body)}


class Ran:
    """A study the README's commands ran: its folder, run.json and plan (compiled again: no weights)."""

    def __init__(self, name: str, out: Path):
        self.name, self.out = name, out

    @cached_property
    def run(self) -> dict:
        from causalab_core import load

        return load(self.out).run

    @cached_property
    def plan(self):
        from causalab_core import api

        return api.plan(ROOT / "documents" / "real" / self.name)


@pytest.fixture(scope="session")
def studies(tmp_path_factory) -> dict[str, Ran]:
    """Each study documents/real/README.md's commands run, by document file name, run as written in a folder
    that holds what a checkout after the quick start holds (`documents/` and the `.venv`)."""
    checkout = tmp_path_factory.mktemp("studies")
    (checkout / "documents").symlink_to(ROOT / "documents")
    (checkout / ".venv").symlink_to(Path(sys.prefix))

    def run(body: str) -> dict[str, Ran]:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=checkout, capture_output=True,
                              text=True, timeout=1800)
        assert done.returncode == 0, f"{body!r} exited {done.returncode}:\n{done.stderr[-2000:]}"
        return {doc: Ran(doc, checkout / out) for doc, out in written_by(body).items()}

    # The studies write separate folders and read none of each other's: two at a time, one per core.
    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        ran = list(pool.map(run, [body for command in readme_commands() for body in bodies(command)]))
    return {doc: r for found in ran for doc, r in found.items()}
