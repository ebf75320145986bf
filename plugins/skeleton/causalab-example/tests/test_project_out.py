"""The example intervention: a hand computation, the conformance suite, a run end to end on a tiny model."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from causalab_core import api
from causalab_core.plugins.registry import build_registry, registry
from causalab_testing.conformance import InterventionConformance
from causalab_testing.data import sweep_document, weekday_rows

# tiny_llama, tiny_gpt2, write_doc, sweep_doc (a plugin's own conftest.py at its root may say this instead)
pytest_plugins = ["causalab_testing.fixtures"]

ROOT = Path(__file__).resolve().parents[1]


def _module():
    """The plugin module: installed (``pip install -e .``), or else loaded from ``src/`` as causalab's CI does."""
    try:
        import causalab_example
    except ImportError:
        spec = importlib.util.spec_from_file_location("causalab_example", ROOT / "src/causalab_example/__init__.py")
        causalab_example = importlib.util.module_from_spec(spec)
        sys.modules["causalab_example"] = causalab_example
        spec.loader.exec_module(causalab_example)
    return causalab_example


example = _module()
ProjectOut = example.ProjectOut


def _installed() -> bool:
    try:
        importlib.metadata.distribution("causalab-example")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.fixture(scope="module")
def plugins():
    """The registry a run uses: the installed entry points, with this plugin's module where it is not installed."""
    return registry() if _installed() else build_registry(extra=(example,))


def test_project_out_removes_the_component_along_the_direction_and_keeps_the_rest():
    """By hand, in two dimensions: u = (1, 0) (the file may hold any length of it); x = (3, 4) -> (0, 4)."""
    x = torch.tensor([[[3.0, 4.0], [-2.0, 0.5]], [[0.0, 1.0], [5.0, 5.0]]])  # [2 rows, 2 positions, width 2]
    v = torch.tensor([2.0, 0.0]).expand(2, 2, 2)  # the file's vector at every row and position
    got = ProjectOut().apply(x, v, ProjectOut.Params(vector="u.safetensors"))
    assert got.tolist() == [[[0.0, 4.0], [0.0, 0.5]], [[0.0, 1.0], [0.0, 5.0]]]
    # in any width: nothing is left along u, what is orthogonal to u stays, and removing it twice is removing it once
    gen = torch.Generator().manual_seed(0)
    x, u = torch.randn(3, 4, 16, generator=gen), torch.randn(16, generator=gen)
    once = ProjectOut().apply(x, u.expand(3, 4, 16), ProjectOut.Params(vector="u.safetensors"))
    unit = u / u.norm()
    torch.testing.assert_close(once @ unit, torch.zeros(3, 4), rtol=0, atol=1e-5)
    torch.testing.assert_close(once, x - (x @ unit).unsqueeze(-1) * unit, rtol=0, atol=1e-6)
    twice = ProjectOut().apply(once, u.expand(3, 4, 16), ProjectOut.Params(vector="u.safetensors"))
    torch.testing.assert_close(twice, once, rtol=0, atol=1e-6)


def test_the_recipe_needs_the_file_and_combines_by_apply():
    recipe = ProjectOut().recipe(ProjectOut.Params(vector="refusal.safetensors"))
    assert (recipe.needs, recipe.combine, recipe.tensor) == ("tensor", "custom", "refusal.safetensors")


class TestConformance(InterventionConformance):
    """Params refuse unknown keys, a plain recipe, apply row by row, position by position and deterministic;
    end to end on the tiny Llama, the site changes at the window alone and rows not eligible move no other row."""

    @pytest.fixture
    def intervention(self):
        return ProjectOut()

    @pytest.fixture
    def params(self):
        return [{"vector": "direction.safetensors"}]


def test_a_document_ablates_a_direction_end_to_end(plugins, write_doc, tiny_llama, tmp_path):
    """On the tiny Llama with the hooks engine: block 1's output at the last token with the direction removed
    scores what a plain transformers forward with that edit scores (p_answer within 1e-5)."""
    from transformers import AutoModelForCausalLM

    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    doc["writes"]["patch"] = {"input": "base", "layer": 1, "site": "block_output", "position": -1,
                              "intervention": {"kind": "example_project_out", "vector": "direction.safetensors"}}
    doc["metrics"] = {"p": {"kind": "p_answer", "answer": "base_answer"}}
    del doc["sweep"], doc["reads"]
    path = write_doc(doc, weekday_rows(8))
    direction = torch.randn(32, generator=torch.Generator().manual_seed(1))
    save_file({"direction": direction}, str(path.parent / "direction.safetensors"))
    api.run(path, out=tmp_path / "o", registry=plugins)
    got = json.loads((tmp_path / "o" / "p.json").read_text())["values"]

    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval().requires_grad_(False)
    unit = direction / direction.norm()

    def ablate(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        hidden = hidden.clone()
        hidden[0, -1] -= (hidden[0, -1] @ unit) * unit
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    plan = api.plan(path, registry=plugins)
    expected, clean = [], []
    for ids, (answer,) in zip(plan.prompts["base"], plan.points[0].steps[-1].scoring.token_ids):
        with torch.no_grad():
            clean.append(torch.softmax(model(input_ids=torch.tensor([ids])).logits[0, -1], -1)[answer].item())
            handle = model.model.layers[1].register_forward_hook(ablate)
            try:
                expected.append(torch.softmax(model(input_ids=torch.tensor([ids])).logits[0, -1], -1)[answer].item())
            finally:
                handle.remove()
    assert got == pytest.approx(expected, abs=1e-5)
    assert got != pytest.approx(clean, abs=1e-3)  # the ablation moves the answer's probability
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert "example_project_out" in json.dumps(run["components"]["intervention"])


def test_a_vector_of_another_width_is_one_line(plugins, write_doc, tiny_llama):
    """The compiler checks the file before any weights load: one line naming the write and the widths."""
    from causalab_core.errors import CausalabError

    doc = sweep_document(str(tiny_llama), layers=[1], positions=[-1])
    doc["writes"]["patch"] = {"input": "base", "layer": 1, "site": "block_output", "position": -1,
                              "intervention": {"kind": "example_project_out", "vector": "short.safetensors"}}
    del doc["sweep"], doc["reads"]
    path = write_doc(doc, weekday_rows(4))
    save_file({"direction": torch.ones(7)}, str(path.parent / "short.safetensors"))
    with pytest.raises(CausalabError) as caught:
        api.plan(path, registry=plugins)
    assert "$.writes.patch.intervention.vector" in str(caught.value) and "[32]" in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.skipif(not _installed(), reason="causalab-example is not installed (pip install -e plugins/skeleton/causalab-example)")
def test_installed_it_is_found_through_its_entry_point():
    assert registry().provider("intervention", "example_project_out").distribution == "causalab-example"
