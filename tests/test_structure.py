"""Traced blocks must be runnable on a server: no bare `tokenizer`, no `self`, no client-side modules.

A traced block ships every name it loads. A client tokenizer would travel with
the request (and positions would resolve against it); `self` drags the engine
object along; a module the server has not installed fails there. The block
reaches `model.tokenizer`, and imports only what a server image installs.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
TRACING_METHODS = {"trace", "session", "generate", "scan", "edit"}
FORBIDDEN_NAMES = {"tokenizer", "self"}
# What a causalab server image installs (besides the standard library).
SERVER_PACKAGES = {"torch", "nnsight", "nnterp", "transformers", "causalab_core"} | {
    p.name.replace("-", "_") for p in (ROOT / "plugins").glob("causalab-*")
}


def _is_traced(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in TRACING_METHODS


def _client_modules(tree: ast.Module) -> set[str]:
    """Names bound by imports of packages a server would not have."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            pairs = [(a.name, a.asname or a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            pairs = [(node.module, a.asname or a.name) for a in node.names]
        else:
            continue
        for module, bound in pairs:
            top = module.split(".")[0]
            if top not in SERVER_PACKAGES and top not in sys.stdlib_module_names:
                names.add(bound)
    return names


def violations(source: str, filename: str = "<source>") -> list[str]:
    """Each load of a forbidden name inside a traced `with` block, as 'file:line: name'."""
    tree = ast.parse(source, filename)
    forbidden = FORBIDDEN_NAMES | _client_modules(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.With, ast.AsyncWith)) and any(_is_traced(i.context_expr) for i in node.items):
            for statement in node.body:
                for inner in ast.walk(statement):
                    if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load) and inner.id in forbidden:
                        found.add((inner.lineno, inner.col_offset, inner.id))
    return [f"{filename}:{line}: {name}" for line, _, name in sorted(found)]


def package_sources() -> list[Path]:
    return sorted([*ROOT.glob("causalab_core/**/*.py"), *ROOT.glob("plugins/causalab-*/src/**/*.py")])


def test_no_traced_block_in_the_packages_loads_a_forbidden_name():
    sources = package_sources()
    assert any("session(" in p.read_text() for p in sources), "expected at least one traced block to check"
    found = [v for p in sources for v in violations(p.read_text(), str(p.relative_to(ROOT)))]
    assert found == []


@pytest.mark.parametrize("planted,name", [
    ("with model.trace(ids):\n    n = len(tokenizer(text)['input_ids'])\n", "tokenizer"),
    ("class E:\n    def run(self, model):\n        with model.session(remote=True):\n            out = self.collect(model)\n", "self"),
    ("import rich\nwith model.trace(ids):\n    rich.print(model.logits)\n", "rich"),
    ("from tests.helpers import probe\nwith model.session():\n    with model.trace(x):\n        probe(model)\n", "probe"),
])
def test_a_planted_violation_is_found(planted, name):
    assert [v.rsplit(": ", 1)[1] for v in violations(planted)] == [name]


def test_model_tokenizer_and_installed_modules_are_allowed():
    fine = (
        "import torch\nfrom causalab_core.runtime import gather\n"
        "with model.trace(ids):\n    t = model.tokenizer\n    g = gather(torch.zeros(1), (), ())\n"
    )
    assert violations(fine) == []


# -- the core's stages: one import direction -------------------------------------------------------------------

CORE = ROOT / "causalab_core"
STAGES = ("errors", "ir", "plugins", "document", "runtime", "results", "compiler", "api", "cli")
"""The core's stages, lowest first: a module imports only from its own stage or one below it. The package root
(its lazy API) and ``__main__`` stand above them all, and nothing imports back up to them."""


def stage_of(module: str) -> str:
    """``causalab_core.results.folder`` -> ``results``; the root and ``__main__`` -> ``root``."""
    parts = module.split(".")
    return "root" if len(parts) == 1 or parts[1] in ("__init__", "__main__") else parts[1]


def core_imports(source: str, module: str) -> list[tuple[str, str]]:
    """(module imported, name taken from it or '') for every causalab_core import in ``source``, resolved."""
    package = module.rpartition(".")[0] if not module.endswith("__init__") else module.removesuffix(".__init__")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for alias in node.names:  # `from causalab_core.results import folder` imports the module folder
                sub = f"{base}.{alias.name}"
                found.append((sub, "") if sub.replace(".", "/") + ".py" in SUBMODULES
                             or (sub.replace(".", "/") + "/__init__.py") in SUBMODULES else (base, alias.name))
    return [(m, n) for m, n in found if m.split(".")[0] == "causalab_core"]


SUBMODULES = {p.relative_to(ROOT).as_posix() for p in CORE.rglob("*.py")}


def stage_violations(source: str, module: str) -> list[str]:
    """What an import in ``module`` does against the stages: reach a stage above its own, reach the package
    root, or take a private name from another stage."""
    own = stage_of(module)
    found = []
    for target, name in core_imports(source, module):
        there = stage_of(target)
        if there == "root":
            found.append(f"{module}: imports the package root ({name or 'causalab_core'})")
        elif own != "root" and STAGES.index(there) > STAGES.index(own):
            found.append(f"{module}: imports {target} from {there}, a stage above {own}")
        elif name.startswith("_") and there != own:
            found.append(f"{module}: takes the private {name} from {target}")
    return found


def core_modules() -> dict[str, Path]:
    return {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in sorted(CORE.rglob("*.py"))}


def test_the_core_top_level_holds_the_stages_the_api_the_cli_and_the_errors():
    top = {p.stem for p in CORE.glob("*.py")} | {p.parent.name for p in CORE.glob("*/__init__.py")}
    assert top == set(STAGES) | {"__init__", "__main__"}


def test_no_core_module_imports_upward_or_a_private_name_of_another_stage():
    found = [v for name, path in core_modules().items() if stage_of(name) != "root"
             for v in stage_violations(path.read_text(), name)]
    assert found == []


@pytest.mark.parametrize("module,planted,why", [
    ("causalab_core.compiler.compile", "from causalab_core.api import run\n", "a stage above"),
    ("causalab_core.plugins.registry", "import causalab_core\n", "package root"),
    ("causalab_core.document.load", "from causalab_core import run\n", "package root"),
    ("causalab_core.results.table", "from causalab_core.compiler.sweep import _compact\n", "a stage above"),
    ("causalab_core.compiler.steps", "from causalab_core.results.folder import _step\n", "private _step"),
    ("causalab_core.ir.nodes", "from ..plugins import contracts\n", "a stage above"),
])
def test_a_planted_upward_import_is_found(module, planted, why):
    (found,) = stage_violations(planted, module)
    assert why in found


def test_an_import_down_or_within_a_stage_is_allowed():
    fine = ("from causalab_core.errors import PlanError\nfrom causalab_core.results import folder\n"
            "from causalab_core.results.folder import _step\nfrom . import manifest\n")
    assert stage_violations(fine, "causalab_core.results.added") == []


def test_no_core_module_is_long():
    """About 400 lines at most (the contracts of every component kind, one job, take 423): a module that grows
    past it holds two jobs, and splits."""
    long = {name: n for name, path in core_modules().items() if (n := len(path.read_text().splitlines())) > 425}
    assert long == {}
