"""Each site on twelve families is the tensor documents/README.md names, against a plain-torch reference.

The reference is written here, family by family, from the family's own
equations: the stream entering block 0 from the embedding weights, each block
recomposed from its submodules (norms, attention, MLP) as that family adds
them, the final norm and head. It calls the attention module as a black box
(with the masks and rotary tables the model itself hands it) and names its
output projection's input as the heads; ``test_a_head_is_its_attention_over_its_key_value_group``
then checks that input per head against the attention weights times the
values of the head's key/value group, so the head index means the same under
grouped-query attention. No engine and no causalab hook is involved.

Against it, on ``hooks`` and ``nnterp``: what a read records and what a write
finds at the site (through a featurizer that keeps what it is handed) are the
reference's terms, and the interchange moves the next-token distribution
exactly as substituting that term in the reference's equations does.

Tolerance 1e-5 (float32): the reference adds the terms in its own order, runs
each row alone (the engines left-pad a batch) and uses eager attention (the
engines' default is SDPA); each of those moves the last bits of a value of
size about 1 by ~1e-7 per operation, a few hundred operations deep. A wrong
site is off by the size of a term (0.1 to 10).
"""

from __future__ import annotations

import functools
import json
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch
from pydantic import BaseModel, ConfigDict

from causalab_core import api, hookimpl
from causalab_core.plugins.contracts import Featurizer
from causalab_core.errors import PlanError
from causalab_core.plugins.registry import build_registry
from causalab_testing import families
from causalab_testing.conformance import ragged_rows

SITES = ("block_input", "block_output", "attn_output", "mlp_output", "head")
ENGINES = ("hooks", "nnterp")
LAYERS = (0, families.LAYERS - 1)
POSITIONS = (-4, -1)  # the day (where base and counterfactual differ) and the last token
HEADS = (0, families.HEADS - 1)  # under GQA, heads of different key/value groups
TOL = 1e-5

# Sites a family does not have: the compiler refuses them (test_a_missing_site_is_refused_before_any_weights).
MISSING = {("opt", "mlp_output")}


# -- the reference: each family's equations ----------------------------------------------------------------------


def sequential(b, x, attend, tap):
    """Llama, Qwen 2/3, Mistral, Phi-3: pre-norm; each sub-layer's output is added to the stream as is."""
    h = x + tap("attn_output", attend(b.input_layernorm(x)))
    return h + tap("mlp_output", b.mlp(b.post_attention_layernorm(h)))


def sandwich(b, x, attend, tap):
    """Gemma 2/3: a norm before and after each sub-layer; the stream receives the post-normed output."""
    h = x + b.post_attention_layernorm(tap("attn_output", attend(b.input_layernorm(x))))
    return h + b.post_feedforward_layernorm(tap("mlp_output", b.mlp(b.pre_feedforward_layernorm(h))))


def post_norm(b, x, attend, tap):
    """OLMo 2: no norm before a sub-layer, one after it; the stream receives the normed output."""
    h = x + b.post_attention_layernorm(tap("attn_output", attend(x)))
    return h + b.post_feedforward_layernorm(tap("mlp_output", b.mlp(h)))


def neox_parallel(b, x, attend, tap):
    """GPT-NeoX (use_parallel_residual): attention and MLP both read the block input, each through its own norm."""
    a = tap("attn_output", attend(b.input_layernorm(x)))
    return x + a + tap("mlp_output", b.mlp(b.post_attention_layernorm(x)))


def gptj_parallel(b, x, attend, tap):
    """GPT-J: attention and MLP both read the same normed block input."""
    n = b.ln_1(x)
    return x + tap("attn_output", attend(n)) + tap("mlp_output", b.mlp(n))


def opt(b, x, attend, tap):
    """OPT (do_layer_norm_before): pre-norm; the MLP is fc1, activation, fc2 on the block itself (no MLP module)."""
    h = x + tap("attn_output", attend(b.self_attn_layer_norm(x)))
    return h + tap("mlp_output", b.fc2(b.activation_fn(b.fc1(b.final_layer_norm(h)))))


def bloom(b, x, attend, tap):
    """BLOOM: pre-norm; attention and MLP modules add the residual inside, so the terms are dense and dense_4h_to_h."""
    h = x + tap("attn_output", attend(b.input_layernorm(x)))
    mlp = b.mlp
    return h + tap("mlp_output", mlp.dense_4h_to_h(mlp.gelu_impl(mlp.dense_h_to_4h(b.post_attention_layernorm(h)))))


def token_embeddings(path):
    return lambda m, ids: m.get_submodule(path).weight[ids]


def gemma_embeddings(m, ids):  # scaled by sqrt(width), the scale rounded to the stream's dtype
    w = m.model.embed_tokens.weight
    return w[ids] * torch.tensor(m.config.hidden_size ** 0.5, dtype=w.dtype)


def opt_embeddings(m, ids):  # learned positions, offset by 2 (OPT's convention)
    d = m.model.decoder
    return d.embed_tokens.weight[ids] + d.embed_positions.weight[torch.arange(len(ids)) + 2]


def bloom_embeddings(m, ids):  # a layer norm on the word embeddings; positions come from ALiBi, in attention
    t = m.transformer
    return t.word_embeddings_layernorm(t.word_embeddings.weight[ids])


def head_logits(norm, softcap=False):
    def final(m, h):
        logits = m.lm_head(m.get_submodule(norm)(h))
        if softcap:
            cap = m.config.final_logit_softcapping
            logits = torch.tanh(logits / cap) * cap
        return logits
    return final


def separate_values(m, captured):  # v_proj's output: [seq, kv_heads * head_dim]
    return captured["v_proj"]


def phi3_values(m, captured):  # qkv_proj: queries, then keys, then values
    c, d = m.config, m.config.hidden_size // m.config.num_attention_heads
    return captured["qkv_proj"][..., (c.num_attention_heads + c.num_key_value_heads) * d:]


def neox_values(m, captured):  # query_key_value: per head, [q | k | v]
    c = m.config
    d = c.hidden_size // c.num_attention_heads
    return captured["query_key_value"].unflatten(-1, (c.num_attention_heads, 3 * d))[..., 2 * d:].flatten(-2)


def bloom_values(m, captured):  # query_key_value: per head, [q | k | v], split as (heads, 3, head_dim)
    c = m.config
    d = c.hidden_size // c.num_attention_heads
    return captured["query_key_value"].unflatten(-1, (c.num_attention_heads, 3, d))[..., 2, :].flatten(-2)


@dataclass(frozen=True)
class Structure:
    blocks: str
    attention: str
    """The attention module in a block (called with the arguments the block gave it on a clean run)."""
    projection: str
    """The attention's output projection, inside it: its input is the heads, concatenated."""
    block: Callable
    embed: Callable
    final: Callable
    values: tuple[str, Callable]
    """The attention submodule whose output holds the values, and how to cut them out."""
    residual_inside: bool = False


LLAMA_LIKE = dict(blocks="model.layers", attention="self_attn", projection="o_proj", block=sequential,
                  embed=token_embeddings("model.embed_tokens"), final=head_logits("model.norm"),
                  values=("v_proj", separate_values))
STRUCTURES = {
    "llama": Structure(**LLAMA_LIKE),
    "qwen2": Structure(**LLAMA_LIKE),
    "qwen3": Structure(**LLAMA_LIKE),
    "mistral": Structure(**LLAMA_LIKE),
    "phi3": Structure(**{**LLAMA_LIKE, "values": ("qkv_proj", phi3_values)}),
    "gemma2": Structure(**{**LLAMA_LIKE, "block": sandwich, "embed": gemma_embeddings,
                           "final": head_logits("model.norm", softcap=True)}),
    "gemma3": Structure(**{**LLAMA_LIKE, "block": sandwich, "embed": gemma_embeddings}),
    "olmo2": Structure(**{**LLAMA_LIKE, "block": post_norm}),
    "gpt_neox": Structure("gpt_neox.layers", "attention", "dense", neox_parallel, token_embeddings("gpt_neox.embed_in"),
                          head_logits("gpt_neox.final_layer_norm"), ("query_key_value", neox_values)),
    "gptj": Structure("transformer.h", "attn", "out_proj", gptj_parallel, token_embeddings("transformer.wte"),
                      head_logits("transformer.ln_f"), ("v_proj", separate_values)),
    "opt": Structure("model.decoder.layers", "self_attn", "out_proj", opt, opt_embeddings,
                     head_logits("model.decoder.final_layer_norm"), ("v_proj", separate_values)),
    "bloom": Structure("transformer.h", "self_attention", "dense", bloom, bloom_embeddings,
                       head_logits("transformer.ln_f"), ("query_key_value", bloom_values), residual_inside=True),
}
assert set(STRUCTURES) == set(families.FAMILIES)


class Reference:
    """A family's forward written out: embeddings, each block by its equations, final norm and head."""

    def __init__(self, family: str):
        from transformers import AutoModelForCausalLM

        self.family, self.s = family, STRUCTURES[family]
        # Eager attention: the attention module then also returns its weights (test of heads).
        self.model = AutoModelForCausalLM.from_pretrained(
            families.ensure(family), dtype=torch.float32, attn_implementation="eager", local_files_only=True,
        ).eval().requires_grad_(False)
        self.blocks = self.model.get_submodule(self.s.blocks)
        self.config = self.model.config
        self.heads = self.config.num_attention_heads
        self.head_dim = getattr(self.config, "head_dim", None) or self.config.hidden_size // self.heads

    @functools.cache
    def clean(self, ids: tuple):
        """The model's own forward of one row: its logits, each block's output and the arguments each
        attention module was called with (masks, rotary tables, ALiBi: what no site is about)."""
        calls, outputs = {}, {}
        hooks = []
        for i, block in enumerate(self.blocks):
            hooks.append(block.get_submodule(self.s.attention).register_forward_pre_hook(
                lambda mod, args, kwargs, i=i: calls.__setitem__(i, (args, kwargs)), with_kwargs=True))
            hooks.append(block.register_forward_hook(
                lambda mod, args, out, i=i: outputs.__setitem__(i, out[0] if isinstance(out, tuple) else out)))
        try:
            with torch.no_grad():
                logits = self.model(torch.tensor([ids]), use_cache=False).logits[0]
        finally:
            for h in hooks:
                h.remove()
        return logits, outputs, calls

    def attention(self, layer, n, calls, tap=lambda name, t: t):
        """The attention module on ``n`` with the block's own other arguments; ``tap`` sees its projection's input."""
        block = self.blocks[layer]
        attn = block.get_submodule(self.s.attention)
        args, kwargs = calls[layer]
        if self.s.residual_inside:  # BLOOM's attention(hidden, residual, ...) returns dense(context) + residual
            args = (n, torch.zeros_like(n), *args[2:])
        elif args:
            args = (n, *args[1:])
        else:
            kwargs = {**kwargs, "hidden_states": n}
        hook = attn.get_submodule(self.s.projection).register_forward_pre_hook(
            lambda mod, a: (tap("head", a[0]), *a[1:]))
        try:
            return attn(*args, **kwargs)
        finally:
            hook.remove()

    def forward(self, ids, tap):
        """Logits ``[seq, vocab]`` of one row, with ``tap(layer, site, tensor)`` free to replace any term."""
        _, _, calls = self.clean(ids)
        with torch.no_grad():
            x = self.s.embed(self.model, torch.tensor(ids))[None]
            for i, block in enumerate(self.blocks):
                def at(name, t, i=i):
                    return tap(i, name, t)

                def attend(n, i=i):
                    return self.attention(i, n, calls, at)[0]

                x = at("block_output", self.s.block(block, at("block_input", x), attend, at))
            return self.s.final(self.model, x)[0]

    def view(self, t, site, head):
        """``[seq, width]`` of row 0; of one head for a head site."""
        t = t[0]
        return t.unflatten(-1, (self.heads, self.head_dim))[:, head] if site == "head" else t

    @functools.cache
    def terms(self, ids: tuple) -> dict:
        """Every term of a clean row, ``(layer, site) -> [1, seq, width]`` (a head site: all heads)."""
        found = {}

        def tap(i, name, t):
            found[i, name] = t.clone()
            return t

        self.forward(ids, tap)
        return found

    def term(self, ids, layer, site, head=None):
        return self.view(self.terms(ids)[layer, site], site, head)

    def patched(self, ids, layer, site, head, where, value):
        """Last-token logits with the term at ``layer`` / ``site`` (/ ``head``) replaced by ``value`` at ``where``."""

        def tap(i, name, t):
            if (i, name) != (layer, site):
                return t
            t = t.clone()
            self.view(t, site, head)[list(where)] = value
            return t

        return self.forward(ids, tap)[-1]


@functools.cache
def reference(family: str) -> Reference:
    return Reference(family)


# -- causalab's side: a document per (family, site), run on each engine ---------------------------------------------


class SpyParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    layer: int
    pos: int
    head: int | None = None


SEEN: dict[tuple, list] = {}
"""(layer, pos, head) -> what each swap was handed: (the source read's value, the base's value at the site)."""


class Spy(Featurizer):
    """The identity swap, keeping what it is handed; its parameters name the sweep point."""

    name = "site_spy"
    Params = SpyParams

    def featurize(self, x):
        return x, x  # the error term is the value itself, so inverse sees source and base side by side

    def inverse(self, f, err):
        p = self.params
        SEEN.setdefault((p.layer, p.pos, p.head), []).append((f.detach().clone(), err.detach().clone()))
        return f


@functools.cache
def spy_registry():
    module = types.ModuleType("causalab_site_spy")
    module.DISTRIBUTION = "causalab-site-spy"
    module.causalab_featurizers = hookimpl(lambda: [Spy])
    return build_registry(extra=(module,))


def document(family: str, site: str) -> dict:
    where = {"layer": {"sweep": "layers"}, "site": site, "position": {"sweep": "pos"}}
    spy = {"kind": "site_spy", "layer": {"sweep": "layers"}, "pos": {"sweep": "pos"}}
    sweep = {"layers": list(LAYERS), "pos": list(POSITIONS)}
    if site == "head":
        where["head"] = spy["head"] = {"sweep": "heads"}
        sweep["heads"] = list(HEADS)
    return {
        "version": "2",
        "model": {"key": str(families.ensure(family)), "dtype": "float32"},
        "data": {"path": "rows.jsonl"},
        "reads": {"cf": {"input": "counterfactual", **where}},
        "writes": {"patch": {"input": "base", "source": "cf", "featurizer": "spy", **where}},
        "featurizers": {"spy": spy},
        "metrics": {"logit_diff": {"kind": "logit_diff", "target": "cf_answer", "other": "base_answer"},
                    "kl": {"kind": "kl"}},  # kl: the whole next-token distribution comes home
        "sweep": sweep,
    }


@functools.cache
def plan_for(family: str, site: str, folder):
    path = folder / f"{family}-{site}.json"
    path.write_text(json.dumps(document(family, site)))
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ragged_rows(4)))
    return api.plan(path, registry=spy_registry())


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("families")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Width-32 models gain nothing from threads, and on a busy 2-core machine torch's thread pool makes
    each tiny op wait for the others: one thread runs this file ~10x faster there."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.cache
def engine(name: str):
    """One instance per engine (it keeps each loaded model)."""
    return spy_registry().get("engine", name)()


def point_key(point):
    values = dict(point.values)
    return values["layers"], values["pos"], values.get("heads")


def written_step(point):
    return next(step for step in point.steps if step.kind == "run" and step.writes)


@functools.cache
def expected(family: str, site: str, folder):
    """Per point: the reference's source and base terms at the windows, its patched and clean last-token logits."""
    plan, ref = plan_for(family, site, folder), reference(family)
    out = {}
    for point in plan.points:
        layer, _, head = point_key(point)
        write = written_step(point).writes[0]
        source_step, read = next((step, r) for step in point.steps if step.kind == "run"
                                 for r in step.reads if r.name == write.source)
        found = {"source": [], "base": [], "logits": [], "clean": []}
        for row in range(plan.rows):
            cf_ids, base_ids = plan.prompts[source_step.input][row], plan.prompts["base"][row]
            source = ref.term(cf_ids, layer, site, head)[list(read.windows[row])]
            found["source"].append(source)
            found["base"].append(ref.term(base_ids, layer, site, head)[list(write.windows[row])])
            found["logits"].append(ref.patched(base_ids, layer, site, head, write.windows[row], source))
            found["clean"].append(ref.clean(base_ids)[0][-1])  # cached: the model's own forward
        out[point_key(point)] = {k: torch.stack(v) for k, v in found.items()}
    return out


# -- the tests ---------------------------------------------------------------------------------------------------


def sample_ids(family):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(families.ensure(family), local_files_only=True)
    return tuple(tok(ragged_rows(3)[2]["base"])["input_ids"])


@pytest.mark.parametrize("family", list(families.FAMILIES))
def test_the_reference_is_the_family_s_own_forward(family):
    """The equations above are the family's: each block's output and the logits match the model's own forward."""
    ref = reference(family)
    ids = sample_ids(family)
    logits, outputs, _ = ref.clean(ids)
    mine = {}

    def tap(i, name, t):
        if name == "block_output":
            mine[i] = t
        return t

    torch.testing.assert_close(ref.forward(ids, tap), logits, atol=TOL, rtol=TOL)
    for i, out in outputs.items():
        torch.testing.assert_close(mine[i], out, atol=TOL, rtol=TOL)


@pytest.mark.parametrize("family", list(families.FAMILIES))
def test_a_head_is_its_attention_over_its_key_value_group(family):
    """The projection's input, cut per head, is head h's attention weights times the values of key/value
    group h // (heads / kv_heads): the head index is the query head's, under grouped-query attention too."""
    ref = reference(family)
    s = ref.s
    kv = getattr(ref.config, "num_key_value_heads", None) or ref.heads
    ids = sample_ids(family)
    _, _, calls = ref.clean(ids)
    for layer, block in enumerate(ref.blocks):
        args, kwargs = calls[layer]
        n = args[0] if args else kwargs["hidden_states"]
        found = {}
        name, cut = s.values
        attn = block.get_submodule(s.attention)
        hook = attn.get_submodule(name).register_forward_hook(lambda mod, a, out: found.__setitem__(name, out[0]))

        def keep(_, z):
            found["z"] = z[0]
            return z

        try:
            with torch.no_grad():
                _, weights = ref.attention(layer, n, calls, keep)
        finally:
            hook.remove()
        values = cut(ref.model, found).unflatten(-1, (kv, ref.head_dim))
        heads = found["z"].unflatten(-1, (ref.heads, ref.head_dim))
        for h in range(ref.heads):
            group = h // (ref.heads // kv)
            torch.testing.assert_close(heads[:, h], weights[0, h] @ values[:, group], atol=TOL, rtol=TOL)


def test_the_families_test_grouped_query_attention():
    """Where the family has grouped-query attention, its test model has it (so head sites are tested under it)."""
    kv = {f: getattr(reference(f).config, "num_key_value_heads", None) for f in families.FAMILIES}
    assert {f for f, k in kv.items() if k and k < families.HEADS} == {
        "llama", "qwen2", "qwen3", "gemma2", "gemma3", "mistral", "phi3", "olmo2"}


def cases():
    for family in families.FAMILIES:
        for site in SITES:
            if (family, site) in MISSING:
                continue
            for name in ENGINES:
                yield pytest.param(family, site, name, id=f"{family}-{site}-{name}")


@pytest.mark.parametrize("family,site,engine_name", list(cases()))
def test_a_site_is_the_term_the_reference_names(family, site, engine_name, folder):
    """What a read records and a write finds are the reference's term; the interchange patches exactly it."""
    plan, want = plan_for(family, site, folder), expected(family, site, folder)
    SEEN.clear()
    results = engine(engine_name).execute(plan, featurizers={"site_spy": Spy})
    moved = 0.0
    for point in plan.points:
        key, w = point_key(point), expected(family, site, folder)[point_key(point)]
        seen = SEEN.pop(key)
        source = torch.cat([f if f.dim() == 3 else f[None] for f, _ in seen])
        base = torch.cat([e if e.dim() == 3 else e[None] for _, e in seen])
        torch.testing.assert_close(source, w["source"], atol=TOL, rtol=TOL)
        torch.testing.assert_close(base, w["base"], atol=TOL, rtol=TOL)
        step = written_step(point)
        got = results[step.path]
        torch.testing.assert_close(got["logprobs"], w["logits"].log_softmax(-1), atol=TOL, rtol=TOL)
        ids = torch.tensor(step.scoring.token_ids)
        torch.testing.assert_close(got["answer_logits"], w["logits"].gather(1, ids), atol=TOL, rtol=TOL)
        moved = max(moved, (got["logprobs"] - w["clean"].log_softmax(-1)).abs().max().item())
    assert not SEEN, f"swaps at points the plan does not have: {sorted(SEEN)}"
    assert moved > 1e-2, "no interchange changed the next-token distribution: the comparison shows nothing"


def test_a_missing_site_is_refused_before_any_weights(folder):
    """OPT blocks have no MLP module (fc1 and fc2 act on flattened rows): mlp_output is refused, saying so."""
    with pytest.raises(PlanError, match="mlp_output"):
        plan_for("opt", "mlp_output", folder)


DISPLAY = {"llama": "Llama", "qwen2": "Qwen 2", "qwen3": "Qwen 3", "mistral": "Mistral", "phi3": "Phi-3",
           "gemma2": "Gemma 2", "gemma3": "Gemma 3", "olmo2": "OLMo 2", "gpt_neox": "GPT-NeoX", "gptj": "GPT-J",
           "opt": "OPT", "bloom": "BLOOM"}


def readme_rows() -> dict[str, list[str]]:
    """The per-family site table of documents/README.md: family -> its cells."""
    text = (Path(__file__).parents[1] / "documents" / "README.md").read_text()
    section = text.split("### Sites per family", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| family"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells
    return rows


@pytest.mark.parametrize("family", list(families.FAMILIES))
def test_the_readme_names_the_module_the_compiler_hooks(family):
    """The table a user reads is the compiler's choice (and the reference above checks the compiler's choice)."""
    from causalab_core.compiler.shell import load_shell

    cells, shell = readme_rows()[DISPLAY[family]], load_shell(families.ensure(family))
    for column, site in enumerate(("block_input", "attn_output", "mlp_output", "head"), start=1):
        if (family, site) in MISSING:
            assert cells[column].startswith("refused"), cells[column]
            continue
        module = shell.site(site, 1, 0 if site == "head" else None).module
        assert cells[column].startswith(f"`{module.replace('.1', '.L', 1)}`"), (site, cells[column])
