"""Every intervention kind on `hooks` against a plain-torch reference written here from the model's own
modules (a plain transformers forward per row, with its own hook; not causalab's runtime), within 1e-5,
at block_output, attn_output, mlp_output and head, on tiny Llama, tiny GPT-2 and a grouped-query Qwen2;
and `nnterp` byte-identical to `hooks`."""

from __future__ import annotations

import functools

import pytest
import torch
from safetensors.torch import save_file

from causalab_core import api
from causalab_core.plugins.registry import registry
from causalab_testing import families
from causalab_testing.data import sweep_document, weekday_rows

LAYER, HEAD, SEED, SCALE, ALPHA = 1, 1, 7, 0.5, 1.5
KINDS = ("swap", "zero", "mean", "resample", "noise", "add_vector", "add_means")
SITES = ("block_output", "attn_output", "mlp_output", "head")
ROWS = weekday_rows(8, seed=3)


@pytest.fixture(scope="session")
def tiny_qwen2():
    return families.ensure("qwen2")


def site_hook(model, component: str, layer: int, edit):
    """A hook on the model's own module for a site; ``edit(tensor)`` changes it in place."""
    blocks = model.transformer.h if hasattr(model, "transformer") else model.model.layers
    block = blocks[layer]
    attn = block.attn if hasattr(block, "attn") else block.self_attn
    if component == "head":  # the output projection's input, one head's slice of it
        proj = attn.c_proj if hasattr(attn, "c_proj") else attn.o_proj
        width = proj.in_features if hasattr(proj, "in_features") else proj.weight.shape[0]
        dim = width // model.config.num_attention_heads

        def pre(mod, args):
            hidden = args[0].clone()
            edit(hidden[..., HEAD * dim:(HEAD + 1) * dim])
            return (hidden, *args[1:])
        return proj.register_forward_pre_hook(pre)
    module = {"block_output": block, "attn_output": attn, "mlp_output": block.mlp}[component]

    def post(mod, args, output):
        hidden = (output[0] if isinstance(output, tuple) else output).clone()
        edit(hidden)
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden
    return module.register_forward_hook(post)


@functools.cache
def plain_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval().requires_grad_(False)


@functools.cache
def engine(name: str, positions: bool | None = None):
    """One engine instance per options for the session: it keeps its loaded weights between plans."""
    cls = registry().get("engine", name)
    return cls(options=cls.Options(**({} if positions is None else {"positions": positions})))


def reference(model_dir, plan, component: str, kind: str, vector: torch.Tensor | None):
    """Last-token logits per row: each row alone through a plain forward, its site edited at the last token."""
    model = plain_model(model_dir)

    def captured(prompts, position):
        found = []
        for ids in prompts:
            handle = site_hook(model, component, LAYER, lambda h: found.append(h[0, position].clone()))
            with torch.no_grad():
                model(input_ids=torch.tensor([ids]))
            handle.remove()
        return found

    cf = captured(plan.prompts["counterfactual"], -1)
    mean = torch.stack(cf).mean(0)
    other_mean = torch.stack(captured(plan.prompts["counterfactual"], 0)).mean(0)
    drawn = next(w for s in plan.points[0].steps for w in s.writes).intervention
    out = []
    for i, ids in enumerate(plan.prompts["base"]):
        def edit(h, i=i):
            x = h[0, -1]
            if kind == "swap":
                x[:] = cf[i]
            elif kind == "zero":
                x[:] = 0
            elif kind == "mean":
                x[:] = mean
            elif kind == "resample":
                assert drawn.rows[i] != i
                x[:] = cf[drawn.rows[i]]
            elif kind == "noise":  # the documented draw: a CPU generator seeded (seed * 0x9E3779B1 + row) mod 2**32
                generator = torch.Generator().manual_seed((SEED * 0x9E3779B1 + i) % 2**32)
                x += SCALE * torch.randn((1, x.shape[-1]), generator=generator)[0]
            elif kind == "add_vector":
                x += ALPHA * vector
            elif kind == "add_means":
                x += ALPHA * (mean - other_mean)
        handle = site_hook(model, component, LAYER, edit)
        with torch.no_grad():
            out.append(model(input_ids=torch.tensor([ids])).logits[0, -1])
        handle.remove()
    return torch.stack(out)


def document(model_dir, component: str, kind: str, folder) -> tuple[dict, torch.Tensor | None]:
    doc = sweep_document(str(model_dir), layers=[LAYER], positions=[-1])
    doc["reads"]["cf_first"] = {"input": "counterfactual", "layer": {"sweep": "layers"}, "position": 0}
    for spec in (*doc["reads"].values(), doc["writes"]["patch"]):
        spec["site"] = component
        if component == "head":
            spec["head"] = HEAD
    write, vector = doc["writes"]["patch"], None
    if kind == "add_vector":
        config = plain_model(model_dir).config
        width = config.hidden_size // (config.num_attention_heads if component == "head" else 1)
        vector = torch.randn(width, generator=torch.Generator().manual_seed(5))
        save_file({"v": vector}, folder / "steer.safetensors")
    write["intervention"] = {
        "swap": {"kind": "swap"}, "zero": {"kind": "zero"}, "mean": {"kind": "mean"},
        "resample": {"kind": "resample", "seed": SEED}, "noise": {"kind": "noise", "scale": SCALE, "seed": SEED},
        "add_vector": {"kind": "add", "alpha": ALPHA, "vector": "steer.safetensors"},
        "add_means": {"kind": "add", "alpha": ALPHA, "minus": "cf_first"},
    }[kind]
    if kind in ("zero", "noise", "add_vector"):
        del write["source"]
    doc["metrics"] = {"p": {"kind": "p_answer", "answer": "cf_answer"}}
    return doc, vector


def scored(plan, results):
    return results[plan.points[0].steps[-1].path]


def check(model_dir, component, kind, write_doc, tmp_path):
    doc, vector = document(model_dir, component, kind, tmp_path)
    plan = api.plan(write_doc(doc, ROWS))
    plain = scored(plan, engine("hooks", False).execute(plan, batch_size=3))
    picked = scored(plan, engine("hooks").execute(plan))  # prefix reuse, and position reuse where the planner picks it
    expected = reference(model_dir, plan, component, kind, vector)
    token_ids = torch.tensor(plan.points[0].steps[-1].scoring.token_ids)
    for got in (plain, picked):
        torch.testing.assert_close(got["answer_logits"], expected.gather(1, token_ids), atol=1e-5, rtol=0)
        torch.testing.assert_close(got["logsumexp"], expected.logsumexp(-1), atol=1e-5, rtol=0)
    return plan, plain


@pytest.mark.parametrize("component", SITES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
def test_each_kind_matches_a_plain_torch_reference(arch, kind, component, request, write_doc, tmp_path):
    check(request.getfixturevalue(arch), component, kind, write_doc, tmp_path)


@pytest.mark.parametrize("component", SITES)
@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_matches_the_reference_with_grouped_query_attention(kind, component, tiny_qwen2, write_doc,
                                                                     tmp_path):
    check(tiny_qwen2, component, kind, write_doc, tmp_path)


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_changes_the_logits(kind, tiny_llama, write_doc, tmp_path):
    """Guards the references above: an intervention that did nothing would match a reference that did nothing."""
    doc, _ = document(tiny_llama, "block_output", kind, tmp_path)
    plan = api.plan(write_doc(doc, ROWS))
    clean = reference(tiny_llama, plan, "block_output", "none", None)
    got = scored(plan, engine("hooks").execute(plan))["answer_logits"]
    token_ids = torch.tensor(plan.points[0].steps[-1].scoring.token_ids)
    assert (got - clean.gather(1, token_ids)).abs().max() > 1e-3


@pytest.mark.parametrize("component", SITES)
@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
def test_nnterp_gives_the_bytes_hooks_gives(arch, component, request, write_doc, tmp_path):
    model_dir = request.getfixturevalue(arch)
    for kind in KINDS:
        doc, _ = document(model_dir, component, kind, tmp_path)
        plan = api.plan(write_doc(doc, ROWS))
        for positions in (False, None):
            a = engine("hooks", positions).execute(plan, batch_size=3)
            b = engine("nnterp", positions).execute(plan, batch_size=3)
            assert a.keys() == b.keys()
            for path in a:
                for name in a[path]:
                    assert torch.equal(a[path][name], b[path][name]), (kind, positions, path, name)
