"""The house: no import circle among product modules, core imports no plugin, each module says its job."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent
PLUGIN_SOURCES = sorted(ROOT.glob("plugins/causalab-*/src"))


def product_modules() -> dict[str, Path]:
    """Module name -> file, for core and every product plugin (test tooling excluded)."""
    found = {}
    roots = [(ROOT, ROOT / "causalab_core")] + [(src, pkg) for src in PLUGIN_SOURCES for pkg in src.iterdir()
                                                 if pkg.is_dir() and pkg.name != "causalab_testing"]
    for base, package in roots:
        for path in sorted(package.rglob("*.py")):
            parts = path.relative_to(base).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(path: Path, name: str, typing: bool = False) -> set[str]:
    """Modules ``path`` imports anywhere in the file (absolute names): a lazy import closes a circle too.
    ``typing``: with the imports under ``if TYPE_CHECKING`` (annotations only: never run, but still a knot)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    typing_only = set() if typing else {
        id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
        and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING" for n in ast.walk(block)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
    return found


def circles(modules: dict[str, Path], typing: bool = False) -> list[list[str]]:
    """Every import circle among ``modules`` a depth-first walk meets."""
    graph = {name: {m for m in imports(path, name, typing) if m in modules and m != name}
             for name, path in modules.items()}
    # A package's __init__ importing its own submodules is how packages work, not a circle.
    for name in graph:
        graph[name] = {m for m in graph[name] if not m.startswith(f"{name}.")}
    state: dict[str, str] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_no_import_circle_among_product_modules():
    assert circles(product_modules()) == []


def test_no_import_circle_in_core_even_for_type_annotations():
    """Core's modules import one way, annotation-only imports included (registry.py <-> provenance.py was one)."""
    core = {name: path for name, path in product_modules().items() if name.split(".")[0] == "causalab_core"}
    assert circles(core, typing=True) == []


def test_a_planted_circle_is_found(tmp_path):
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import b\n")
    (tmp_path / "b.py").write_text("import a\n")
    planted = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    assert circles(planted) == []
    assert circles(planted, typing=True) == [["a", "b", "a"]]


def test_core_imports_no_plugin():
    plugins = {pkg.name for src in PLUGIN_SOURCES for pkg in src.iterdir() if pkg.is_dir()}
    found = [f"{path.relative_to(ROOT)}: {m}" for name, path in product_modules().items() if name.startswith("causalab_core")
             for m in imports(path, name) if m.split(".")[0] in plugins]
    assert found == []


def test_each_product_module_starts_with_one_line_saying_its_job():
    missing = []
    for name, path in product_modules().items():
        doc = ast.get_docstring(ast.parse(path.read_text()))
        first = (doc or "").split("\n")[0]
        if not first or not first.endswith((".", ")", "?", "`")):
            missing.append(name)
    assert missing == []


def test_causalab_ndif_uses_only_the_public_api_of_causalab_nnterp():
    import causalab_nnterp

    used = set()
    for path in sorted((ROOT / "plugins" / "causalab-ndif").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("causalab_nnterp"):
                used |= {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                used |= {a.name for a in node.names if a.name.startswith("causalab_nnterp.")}
    public = {f"causalab_nnterp.{name}" for name in causalab_nnterp.__all__}
    assert used and used <= public, used - public


def test_contributings_layout_matches_the_tree():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    layout = text.split("## Layout")[1].split("```")[1]
    listed = set()
    for line in layout.splitlines():
        if line.startswith("  ") and not line.startswith("   "):  # one level under causalab_core/
            names = line.strip().split("  ")[0]  # "api.py, cli.py" or "ir/"
            listed |= {n.strip().rstrip("/").removesuffix(".py") for n in names.split(",")}
    core = ROOT / "causalab_core"
    present = {p.stem for p in core.glob("*.py") if p.stem not in ("__init__", "__main__")}
    present |= {p.parent.name for p in core.glob("*/__init__.py")}
    assert listed == present
