"""The computation graph circuit work uses, from a model's config alone (the foundation of the circuits issue)."""

from __future__ import annotations

import pytest

from causalab_core import api
from causalab_core.errors import PlanError
from causalab_core.ir.graph import graph


def test_gpt2_smalls_graph_has_the_edges_acdc_and_eap_count():
    """158 nodes and 32,491 edges: ACDC's and EAP's count for GPT-2 small (12 layers of 12 heads)."""
    from transformers import GPT2Config

    g = graph(GPT2Config())
    assert (len(g.nodes), len(g.edges)) == (158, 32491)


def expected_edges(layers: int, heads: int, kv_heads: int) -> set[tuple[str, str]]:
    """By hand: a head's q, k and v read every term written before its layer (k and v its key/value group's
    under grouped-query attention); an MLP reads its own layer's heads too; the logits read everything."""
    edges = set()
    for layer in range(layers):
        before = ["input", *(f"a{l}.h{h}" for l in range(layer) for h in range(heads)), *(f"m{l}" for l in range(layer))]
        keys = [f"a{layer}.h{h}" for h in range(heads)] if kv_heads == heads else \
            [f"a{layer}.kv{g}" for g in range(kv_heads)]
        edges |= {(s, f"a{layer}.h{h}<q>") for s in before for h in range(heads)}
        edges |= {(s, f"{k}<{p}>") for s in before for k in keys for p in "kv"}
        edges |= {(s, f"m{layer}") for s in before + [f"a{layer}.h{h}" for h in range(heads)]}
    last = ["input", *(f"a{l}.h{h}" for l in range(layers) for h in range(heads)), *(f"m{l}" for l in range(layers))]
    return edges | {(s, "logits") for s in last}


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_each_family_it_covers_from_a_checkpoint_without_weights(family, monkeypatch):
    import transformers

    from causalab_testing import families, models

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("weights were loaded"))
    path = models.ensure("tiny-gpt2") if family == "gpt2" else families.ensure(family)
    g = api.graph(path)
    config = transformers.AutoConfig.from_pretrained(path)
    assert (g.family, g.layers, g.heads) == (family, config.num_hidden_layers, config.num_attention_heads)
    kv_heads = getattr(config, "num_key_value_heads", None) or g.heads
    assert kv_heads < g.heads or family == "gpt2"  # the tiny Llama and Qwen 2 use grouped-query attention
    assert set(g.edges) == expected_edges(g.layers, g.heads, kv_heads) and len(set(g.edges)) == len(g.edges)
    senders = [s for s, _ in g.edges]
    receivers = [r.split("<")[0].replace(".kv", ".h") for _, r in g.edges]  # a group's input: its first head's layer
    order = {node: i for i, node in enumerate(g.nodes)}
    assert all(order[s] < order[r] for s, r in zip(senders, receivers))  # every edge runs forward


@pytest.mark.parametrize("family", ["gptj", "gpt_neox", "gemma2", "olmo2"])
def test_a_family_whose_terms_are_not_plain_summands_is_one_line(family):
    from causalab_testing import families

    with pytest.raises(PlanError, match=rf"\$\.model\.key: .*the computation graph covers llama, mistral, qwen2, "
                                        rf"qwen3, gpt2, not '{family}'") as caught:
        api.graph(families.ensure(family))
    assert "\n" not in str(caught.value)
