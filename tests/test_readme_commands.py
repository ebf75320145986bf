"""Every command the READMEs (and the reference's pages) show, run as written, in the order they show them.

Each runs in a fresh folder that holds what a checkout after the quick start holds (the repository's
`documents/` and the `.venv` these tests run in), so a command that works only on the author's machine
(a folder left from an earlier command, a document the README describes but does not ship) fails here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
SETUP = "bash scripts/setup.sh && "


def blocks(readme: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", readme.read_text(), re.S)


def commands(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("checkout")
    (folder / "documents").symlink_to(ROOT / "documents")
    (folder / ".venv").symlink_to(Path(sys.prefix))
    return folder


def run(command: list[str] | str, cwd: Path, exit_code: int = 0) -> subprocess.CompletedProcess:
    shell = isinstance(command, str)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", command] if shell else command,
                          cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == exit_code, f"{command!r} exited {done.returncode}:\n{done.stderr[-2000:]}"
    return done


def test_the_quick_start_runs_and_writes_what_the_readme_lists(checkout):
    quick_start, tests = blocks(ROOT / "README.md", "bash")[:2]
    assert quick_start.startswith(SETUP) and tests.startswith(SETUP)
    for command in commands(quick_start.removeprefix(SETUP)):  # setup.sh has run: these tests run in its .venv
        run(command, checkout)
    # The second command is the one CI runs after the same setup.
    ci = (ROOT / ".ci" / "run").read_text()
    assert SETUP.removesuffix(" && ") in ci and tests.removeprefix(SETUP).strip() in ci
    readme = (ROOT / "README.md").read_text()
    listing = re.search(r"## What a run writes\n\n```\n(.*?)```", readme, re.S).group(1)
    shown = [line.split()[0] for line in listing.splitlines() if line.startswith("out/")]
    assert len(shown) >= 7
    for path in shown:
        assert (checkout / path).is_file(), f"the README lists {path}; the quick start did not write it"


def test_the_python_example_runs_after_the_quick_start(checkout):
    (example,) = blocks(ROOT / "README.md", "python")
    done = run([str(Path(sys.prefix) / "bin" / "python"), "-c", example + "\nprint(len(run.summaries))"], checkout)
    assert int(done.stdout.split()[-1]) == 24 * 3  # the sweep's points x its three IIA metrics


def test_the_working_with_results_commands_run_as_written(checkout):
    (block,) = [b for b in blocks(ROOT / "docs" / "results.md", "bash") if "causalab table" in b]
    *commands_, resume = commands(block)
    for command in commands_:
        run(command, checkout)
    # The README's last line resumes a run that finished: it says so, as the README says it does.
    assert "--resume" in resume and "nothing to resume" in run(resume, checkout, exit_code=2).stderr
    assert (checkout / "sweep.csv").read_text().startswith("layer,pos,point,metric")


def test_the_studies_readme_commands_run_as_written(studies):
    """The ``studies`` fixture (conftest.py) ran every command of documents/real/README.md as written, in a
    checkout of its own, each exiting 0; here: every document a command names ran to a whole folder."""
    runs = "".join(blocks(ROOT / "documents" / "real" / "README.md", "bash")).count("causalab run ")
    assert len(studies) >= runs >= 7  # a `for` loop's one command runs several documents
    for ran in studies.values():
        assert (ran.out / "manifest.json").is_file() and ran.run["engine"] == "hooks", ran.name
    for plotted in ("weekdays_layer_sweep.json", "entity_layer_sweep.json"):
        assert (studies[plotted].out / "iia_answer.png").is_file()
