"""What runs inside the engine's session: locally, or on an NDIF server as the server's installed copy.

Rules for this module (checked by tests/test_structure.py): a traced block
reaches the tokenizer as ``model.tokenizer`` and never loads the bare names
``tokenizer`` or ``self``; it imports nothing that a server would not have
installed (torch, nnsight, nnterp, causalab_core, causalab plugins).
"""

from __future__ import annotations

import torch

from causalab_core.tensors import SITE_ORDER, as_heads, batches, featurizer_for, gather, scatter, score

# nnterp's standardized accessors for each site (heads go through the attention module).
ACCESSORS = {
    "block_input": ("layers_input", "input"),
    "block_output": ("layers_output", "output"),
    "attn_output": ("attentions_output", "output"),
    "mlp_output": ("mlps_output", "output"),
}


def site_tensor(model, site):
    """The live tensor of a site inside a trace, addressed by nnterp's names."""
    if site.component in ACCESSORS:
        return getattr(model, ACCESSORS[site.component][0])[site.layer]
    projection = getattr(model.attentions[site.layer], site.module.rsplit(".", 1)[1])
    return projection.input


def visit_order(step):
    """(site, reads, writes) groups in the order the forward reaches them."""
    groups: dict[tuple, tuple] = {}
    for read in step.reads:
        groups.setdefault((read.site.layer, SITE_ORDER[read.site.component], read.site.module), (read.site, [], []))[1].append(read)
    for write in step.writes:
        groups.setdefault((write.site.layer, SITE_ORDER[write.site.component], write.site.module), (write.site, [], []))[2].append(write)
    return [groups[key] for key in sorted(groups)]


def run_step(model, plan, step, store, batch_size):
    """One plan step over every batch of rows: one trace per batch."""
    for read in step.reads:
        store[read.name] = [None] * plan.rows
    featurizers = {write.name: featurizer_for(write) for write in step.writes}
    scored = []
    # Batches are built on the CPU: nnsight moves a trace's inputs to the model's device.
    for batch in batches(plan.prompts[step.input], batch_size, "cpu"):
        span = slice(batch.start, batch.stop)
        with model.trace(batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                         use_cache=False, logits_to_keep=1):
            for site, reads, writes in visit_order(step):
                hidden = site_tensor(model, site)
                for read in reads:
                    store[read.name][span] = gather(as_heads(hidden, site), read.windows[span], batch.offsets)
                for write in writes:
                    scatter(as_heads(hidden, site), write.windows[span], batch.offsets,
                            store[write.source][span], featurizers[write.name])
            if step.scoring is not None:
                scored.append(score(model.logits[:, -1, :], step.scoring.token_ids[span]))
    if not scored:
        return {}
    return {name: torch.cat([s[name] for s in scored]) for name in scored[0]}


def run_plan(model, plan, batch_size):
    """Every step of every point; returns ``{step path: {name: tensor}}`` (CPU tensors)."""
    results = {}
    with torch.no_grad():
        for point in plan.points:
            store = {}
            for step in point.steps:
                results[step.path] = run_step(model, plan, step, store, batch_size)
    return results
