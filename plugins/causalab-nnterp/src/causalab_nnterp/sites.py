"""Where a plan's site is inside a trace: by nnterp's standardized names, or by the module path the compiler recorded.

A block reaches sites through one of these two functions. nnterp's names
need nnterp's wrapper on the model; module paths (``model.layers.3``) work on
any nnsight model of the checkpoint, a plain ``LanguageModel`` included, which
is what a server without causalab or nnterp serves.
"""

from __future__ import annotations

# nnterp's standardized accessors for each site (heads go through the attention module).
ACCESSORS = {
    "block_input": ("layers_input", "input"),
    "block_output": ("layers_output", "output"),
    "attn_output": ("attentions_output", "output"),
    "mlp_output": ("mlps_output", "output"),
}


def by_nnterp_name(model, site):
    """The live tensor of a site inside a trace, addressed by nnterp's names."""
    if site.component in ACCESSORS:
        return getattr(model, ACCESSORS[site.component][0])[site.layer]
    projection = getattr(model.attentions[site.layer], site.module.rsplit(".", 1)[1])
    return projection.input


def by_module_path(model, site):
    """The live tensor of a site inside a trace, addressed by the compiler's module path and tensor."""
    return model.get(f"{site.module}.{site.tensor}")
