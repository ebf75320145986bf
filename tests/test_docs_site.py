"""The reference site (mkdocs.yml, docs/) builds with warnings as errors, and covers every document field,
every public function and every hook spec; a field or a docstring left without words fails the build."""

from __future__ import annotations

import html
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

import causalab_core
from causalab_core.document.schema import json_schema
from causalab_core.plugins import hookspecs

ROOT = Path(__file__).parents[1]


def hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "-d", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page.read_text()))


def test_every_document_field_has_a_row_with_its_description(site):
    page = (site / "documents" / "index.html").read_text()
    schema = json_schema()
    for name, model in {"Document": schema, **schema["$defs"]}.items():
        if "properties" not in model:
            continue
        section = page.split(f'id="{name.lower()}"')[1].split("<h3")[0]
        rows = {re.sub(r"<[^>]+>", "", cells[0]): cells[3] for cells in
                (re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", section, re.S)) if len(cells) == 4}
        assert set(rows) == set(model["properties"]), name
        for field, prop in model["properties"].items():
            assert html.unescape(re.sub(r"<[^>]+>", "", rows[field])).split() , (name, field)


def test_every_public_function_and_hook_spec_is_on_the_site(site):
    api, plugins = text(site / "python" / "index.html"), (site / "plugins" / "index.html").read_text()
    for name in ("run", "plan", "validate", "load", "to_json", "LoadedRun", "RunResult", "Document", "save", "plot"):
        assert re.search(rf"\b{name}\b", api), name
    for name in causalab_core.__all__:
        if name not in ("hookimpl", "hookspec"):
            assert re.search(rf"\b{name}\b", api), name
    specs = [n for n in vars(hookspecs) if n.startswith("causalab_")]
    assert len(specs) >= 11
    for name in specs:
        assert f'id="causalab_core.plugins.hookspecs.{name}"' in plugins, name


def test_a_field_without_a_description_or_a_function_without_a_docstring_is_found(monkeypatch):
    checks = hooks()

    class Spec(BaseModel):
        said: int = Field(0, description="has words")
        silent: int = 0

    assert checks.missing_descriptions(Spec.model_json_schema()) == ["Document.silent"]
    assert checks.missing_descriptions(json_schema()) == []

    def undocumented():
        pass

    monkeypatch.setattr(causalab_core, "undocumented", undocumented, raising=False)
    monkeypatch.setattr(causalab_core, "__all__", [*causalab_core.__all__, "undocumented"])
    assert checks.public_without_docstrings() == ["causalab_core.undocumented"]
