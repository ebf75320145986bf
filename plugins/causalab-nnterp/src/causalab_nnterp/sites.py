"""Where a plan's site is inside a trace: by nnterp's standardized names, or by the module path the compiler recorded.

A block reaches sites through one of these two functions. nnterp's names
need nnterp's wrapper on the model; module paths (``model.layers.3``) work on
any nnsight model of the checkpoint, a plain ``LanguageModel`` included, which
is what a server without causalab or nnterp serves.
"""

from __future__ import annotations

# nnterp's standardized accessors for each site whose tensor is a block's, an attention's or an MLP's own.
ACCESSORS = {
    "block_input": ("layers_input", "input"),
    "block_output": ("layers_output", "output"),
    "attn_output": ("attentions_output", "output"),
    "mlp_output": ("mlps_output", "output"),
}


def by_nnterp_name(model, site):
    """The live tensor of a site inside a trace, addressed by nnterp's names.

    Below the block, the compiler's path goes through the attention module (``attn_output``,
    ``head``) or the MLP (``mlp_output``), which nnterp names ``attentions`` and ``mlps``; a
    module inside them (a head's output projection, BLOOM's ``dense``: the term before the
    residual the module adds itself) keeps its own name.
    """
    inside = site.module.partition(f".{site.layer}.")[2].split(".")[1:]  # the path below the sub-layer
    if site.component in ("block_input", "block_output") or not inside:
        return getattr(model, ACCESSORS[site.component][0])[site.layer]
    envoy = (model.mlps if site.component == "mlp_output" else model.attentions)[site.layer]
    for name in inside:
        envoy = getattr(envoy, name)
    return envoy.input if site.tensor == "input" else envoy.output


def by_module_path(model, site):
    """The live tensor of a site inside a trace, addressed by the compiler's module path and tensor."""
    return model.get(f"{site.module}.{site.tensor}")
