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
