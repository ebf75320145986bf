"""What runs inside the engine's session: locally, or on an NDIF server as the server's installed copy.

Rules for this module (checked by tests/test_structure.py): a traced block
reaches the tokenizer as ``model.tokenizer`` and never loads the bare names
``tokenizer`` or ``self``; it imports nothing that a server would not have
installed (torch, nnsight, nnterp, causalab_core, causalab plugins).
"""

from __future__ import annotations

import torch

from causalab_core.errors import EngineError
from causalab_core.runtime import (
    SITE_ORDER, answer_scores, applier, as_heads, batches, featurizers_for, fit_featurizer, gather, joined, minibatch, put,
)
from causalab_core.runtime.positions import (
    UNSUPPORTED, CleanCaches, EagerAttention, first_written_position, keys_values, last_position, prefix_cache,
    rows_per_batch, tail_batch, tail_output, trims_last_mlp, widened,
)
from causalab_core.runtime.attribution import (
    estimate,
    gradients,
    integrated,
    path_groups,
    path_point,
    site_key,
    written_sites,
)
from causalab_core.runtime.edges import (
    Patching,
    Probe,
    edge_estimate,
    path_probes,
    union,
    visits,
)
from causalab_core.runtime.reuse import CleanPrefixes, first_written_layer, is_shared, shared_reads, split_shared
from causalab_nnterp.sites import by_nnterp_name


def visit_order(step):
    """(site, reads, writes) groups in the order the forward reaches them."""
    groups: dict[tuple, tuple] = {}
    for read in step.reads:
        groups.setdefault((read.site.layer, SITE_ORDER[read.site.component], read.site.module), (read.site, [], []))[1].append(read)
    for write in step.writes:
        groups.setdefault((write.site.layer, SITE_ORDER[write.site.component], write.site.module), (write.site, [], []))[2].append(write)
    return [groups[key] for key in sorted(groups)]


def block_envoy(model, layers_path, layer, site_tensor=by_nnterp_name):
    """Block ``layer``'s envoy, addressed as ``site_tensor`` addresses sites: nnterp's ``layers`` for
    nnterp's names, else the compiler's module path (which any nnsight model of the checkpoint has)."""
    if site_tensor is by_nnterp_name:
        return model.layers[layer]
    return model.get(f"{layers_path}.{layer}")


def last_mlp_envoy(model, plan_model, site_tensor=by_nnterp_name):
    """The last block's MLP envoy (``ModelRef.last_mlp``), addressed as ``block_envoy`` addresses blocks."""
    if site_tensor is by_nnterp_name:
        return model.mlps[plan_model.layers - 1]
    return model.get(plan_model.last_mlp)


def clean_outputs(model, batch, layers_path, prefixes, input_name, block, site_tensor=by_nnterp_name):
    """One clean trace of a batch from the highest clean output ``prefixes`` keeps below ``block``, stopped
    after ``block``: the output of each wanted block on the way (``CleanPrefixes.missing``)."""
    base, record = prefixes.missing(input_name, batch.start, block)
    outputs = {}
    with model.trace(batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                     use_cache=False, logits_to_keep=1) as tracer:
        for layer in range(base + 1):
            block_envoy(model, layers_path, layer, site_tensor).skip(prefixes.get(input_name, batch.start, base))
        for layer in record:
            outputs[layer] = block_envoy(model, layers_path, layer, site_tensor).output
        tracer.stop()
    return outputs


def clean_keys_values(model, batch, layers_path, wanted, blocks, site_tensor=by_nnterp_name):
    """One whole clean trace of a batch with the cache on: its keys and values per block (None if the
    model gives none), and each wanted block's output."""
    outputs = {}
    with model.trace(batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                     use_cache=True, logits_to_keep=1):
        for layer in wanted:
            outputs[layer] = block_envoy(model, layers_path, layer, site_tensor).output
        cache = model.output.past_key_values
    return keys_values(cache, blocks), outputs


def copied(output):
    """A block output to skip to, copied: a write at the next block's input edits that tensor in place.
    Some families' blocks (GPT-J, BLOOM) return ``(hidden, attention weights)``; the tuple is kept."""
    if isinstance(output, tuple):
        return (output[0].clone(), *output[1:])
    return output.clone()


def run_step(model, chosen, step, store, featurizers, labels=None, site_tensor=by_nnterp_name,
             prefixes=None, layers_path=None, caches=None, plan_model=None):
    """One plan step over the ``chosen`` batches of rows (``causalab_core.runtime.batches``): one trace each.

    With ``labels`` (training), the cross-entropy of the last-token logits is
    back-propagated inside the trace, where the graph through the model lives.
    ``site_tensor``: how a site is found in the trace (``causalab_nnterp.sites``).
    ``prefixes`` (a ``CleanPrefixes``): a writing run starts at its lowest block, the blocks below
    skipped and replaced by the clean run's output (computed here once per batch, if not kept yet).
    A read-only unscored run stops after its last read.
    ``caches`` (a ``CleanCaches``; with ``prefixes`` and ``plan_model``, the plan's ``ModelRef``):
    position-level reuse (``causalab_core.runtime.positions``), a writing run computing only positions >= its
    first written one, over the clean run's keys and values, and the last block's MLP on the last position
    only where ``trims_last_mlp``.
    """
    skip = first_written_layer(step) if prefixes is not None else 0
    stop = step.scoring is None and not step.writes and labels is None
    for read in step.reads:
        store[read.name] = [None] * chosen[-1].stop
    scored = []
    for batch in chosen:
        span = slice(batch.start, batch.stop)
        start = first_written_position(step, batch) if caches is not None and step.writes else 0
        if start > 0:
            if caches.get(step.input, batch.start) is None:
                kv, outputs = clean_keys_values(model, batch, layers_path, prefixes.wanted(step.input),
                                                plan_model.layers, site_tensor)
                if kv is None:
                    raise EngineError(UNSUPPORTED.format(model=layers_path))
                caches.keep(step.input, batch.start, kv)
                prefixes.keep(step.input, batch.start, outputs)
            if skip > 0:
                cached = tail_output(prefixes.get(step.input, batch.start, skip - 1), start)
            batch = tail_batch(batch, start)
            extra = {"past_key_values": prefix_cache(caches.get(step.input, batch.start), start), "use_cache": True}
        elif skip > 0:
            extra = {"use_cache": False}
            if prefixes.get(step.input, batch.start, skip - 1) is None:
                prefixes.keep(step.input, batch.start,
                              clean_outputs(model, batch, layers_path, prefixes, step.input, skip - 1, site_tensor))
            cached = copied(prefixes.get(step.input, batch.start, skip - 1))
        else:
            extra = {"use_cache": False}
        patching = edge_patching(model, step, batch, store) if step.edges is not None else None
        with EagerAttention(model.config, when=start > 0):
            with model.trace(batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                             logits_to_keep=1, **extra) as tracer:
                if patching is not None:
                    patched_edges(model, patching)
                if skip > 0:
                    for layer in range(skip):
                        block_envoy(model, layers_path, layer, site_tensor).skip(cached)
                for site, reads, writes in visit_order(step):
                    hidden = site_tensor(model, site)
                    for read in reads:  # each its own head of the tensor: a group is one module's
                        store[read.name][span] = gather(as_heads(hidden, read.site), read.windows[span],
                                                        batch.offsets)
                    for write in writes:  # the one place a written value is computed (runtime.interventions)
                        put(as_heads(hidden, write.site), write, span, batch.offsets, store, featurizers[write.name],
                            featurizers.get(applier(write)))
                if start > 0 and trims_last_mlp(step, plan_model):
                    mlp = last_mlp_envoy(model, plan_model, site_tensor)
                    length = mlp.input.shape[1]
                    mlp.input = last_position(mlp.input)
                    mlp.output = widened(mlp.output, length)
                if stop:
                    tracer.stop()
                if labels is not None:
                    logits = model.output.logits[:, -1, :].float()
                    torch.nn.functional.cross_entropy(logits, labels[span].to(logits.device)).backward()
                elif step.scoring is not None:
                    scored.append(answer_scores(model.output.logits[:, -1, :], step.scoring.token_ids[span],
                                                step.scoring.views))
    return joined(scored)


def edge_patching(model, step, batch, store):
    """A batch's edge patch (``runtime.edges``); a path patch first runs the input clean in a trace of its own,
    for the streams it starts from."""
    span = slice(batch.start, batch.stop)
    clean = None
    if step.edges.path:
        recording = Patching(step.edges, store, span, batch.offsets, model.get, recording=True)
        with model.trace(batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                         logits_to_keep=1, use_cache=False):
            patched_edges(model, recording)
        clean = recording.kept()
    return Patching(step.edges, store, span, batch.offsets, model.get, clean=clean)


def patched_edges(model, patching):
    """Inside a trace: each tensor the patch reads or edits, in forward order, handed to ``Patching.at``."""
    for path, tensor in visits(patching.patch):
        envoy = model.get(path)
        value = envoy.input if tensor == "input" else envoy.output
        edited = patching.at(path, tensor, value)
        if edited is not value:
            if tensor == "input":
                envoy.input = edited
            else:
                envoy.output = edited


def estimates(model, batch_list, items, layers_path, site_tensor=by_nnterp_name):
    """The estimated runs ``items`` ((step, store, featurizers) each, one input and scoring) on ``batch_list``:
    per batch one clean trace, its first block's input made to require grad and the scores' gradients at each
    written site taken inside it (``runtime.attribution``), then each run's estimate.
    Returns ``{step path: [scores per batch]}``."""
    if items[0][0].edges is not None:
        return edge_estimates(model, batch_list, items)
    sites, scoring = written_sites([step for step, _, _ in items]), items[0][0].scoring
    parts = {}
    for batch in batch_list:
        span = slice(batch.start, batch.stop)
        tensors = {}
        with model.trace(batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                         use_cache=False, logits_to_keep=1):
            block_envoy(model, layers_path, 0, site_tensor).input.requires_grad_(True)
            for site in sites:
                tensors[site_key(site)] = site_tensor(model, site)
            clean, grads = gradients(model.output.logits[:, -1, :], scoring, span, tensors,
                                     items[0][0].combinations)
        values = {key: t.detach() for key, t in tensors.items()}
        steps = items[0][0].estimate_steps or 1
        for group in path_groups(items, span, batch.offsets, values) if steps > 1 else ():
            integrated(grads, group, [path_gradients(model, batch, group, k, steps, items[0][0], site_tensor)
                                      for k in range(1, steps)], steps)
        for step, store, featurizers in items:
            parts.setdefault(step.path, []).append(
                estimate(step, span, batch.offsets, clean, values, grads, store, featurizers))
    return parts


def path_gradients(model, batch, group, k, steps, step, site_tensor=by_nnterp_name):
    """The scores' gradients at ``group``'s site with its tensor moved to the ``k``-th path point
    (``runtime.attribution``): one trace, a backward per score inside it."""
    moved = {}
    with model.trace(batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                     use_cache=False, logits_to_keep=1):
        hidden = site_tensor(model, group.site)
        hidden.add_(path_point(group, k, steps)).requires_grad_(True)  # nothing upstream needs a gradient
        moved[group.key] = hidden
        _, found = gradients(model.output.logits[:, -1, :], step.scoring, slice(batch.start, batch.stop), moved,
                             step.combinations)
    return found


def edge_estimates(model, batch_list, items):
    """Estimated edge runs of one input: per batch, one clean trace probing every receiver they patch (and, for
    integrated gradients, one per other point of the path), the gradients taken inside it
    (``runtime.edges.Probe``), then each run's estimate."""
    first, steps = items[0][0], items[0][0].estimate_steps or 1
    patch, sources = union([step.edges for step, _, _ in items], [s for _, s, _ in items] if steps > 1 else None)
    parts = {}
    for batch in batch_list:
        span = slice(batch.start, batch.stop)
        found = []
        for probe in [Probe(patch, span, batch.offsets, model.get),
                      *path_probes(patch, sources, span, batch.offsets, model.get, steps)]:
            with model.trace(batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                             use_cache=False, logits_to_keep=1):
                patched_edges(model, probe)
                clean, grads = gradients(model.output.logits[:, -1, :], first.scoring, span, probe.leaves,
                                         first.combinations)
            found.append((probe, clean, grads))
        clean, passes = found[0][1], [(probe, grads) for probe, _, grads in found]
        for step, store, _ in items:
            parts.setdefault(step.path, []).append(edge_estimate(step, span, batch.offsets, clean, passes, store))
    return parts


def fit(model, step, classes, site_tensor=by_nnterp_name):
    """Train a featurizer (a plan's Fit step) inside the session; its state comes home in the results."""
    model.requires_grad_(False)

    def backward(featurizer, idx):
        source, source_prompts, target, target_prompts, labels = minibatch(step, idx)
        store = {}
        with torch.no_grad():
            run_step(model, on_cpu(source_prompts), source, store, {}, site_tensor=site_tensor)
        # Gradients off: a featurizer fitted from activations only watches the swap, with no loss to take.
        run_step(model, on_cpu(target_prompts), target, store, {step.write.name: featurizer},
                 labels=labels if torch.is_grad_enabled() else None, site_tensor=site_tensor)

    return fit_featurizer(step, classes, backward)


def on_cpu(prompts, size=None):
    """The rows' padded batches, built on the CPU: nnsight moves a trace's inputs to the model's device."""
    return list(batches(prompts, size, "cpu"))


def run_plan(model, plan, batch_size, classes, site_tensor=by_nnterp_name, *, optimize=True, positions=False):
    """Every step of every point; returns ``{step path: {name: tensor}}`` (CPU tensors).

    ``classes``: featurizer kind -> class, for the kinds the plan's writes use;
    ``site_tensor``: how sites are addressed (nnterp's names, or module paths on a plain model);
    ``optimize``: share read-only runs across points and start each point at its lowest block
    (``causalab_core.runtime.reuse``; results are byte-identical to the plain path);
    ``positions``: also position-level reuse (``causalab_core.runtime.positions``; byte-identical to the hooks
    engine in that mode, within 1e-5 of the plain path), every point on one batch before the next, as the
    hooks engine orders it (``Execution.run_by_batch``).
    """
    size = rows_per_batch(plan, batch_size) if positions else batch_size
    all_batches = {name: on_cpu(prompts, size) for name, prompts in plan.prompts.items()}
    prefixes = CleanPrefixes(plan.points) if optimize or positions else None
    caches = CleanCaches(plan.points) if positions else None
    results, fitted = {}, {point.name: {} for point in plan.points}
    # Position reuse runs every point on a batch before the next (one batch's clean keys and values kept):
    # fits, which use their own rows, go first; otherwise a point runs its steps on every batch in turn.
    rounds = [slice(b, b + 1) for b in range(len(next(iter(all_batches.values()))))] if positions else [slice(None)]
    parts = {}
    for chosen in rounds:
        stores, pending = {point.name: {} for point in plan.points}, []
        if optimize:
            for input_name, merged in shared_reads(plan.points).items():
                found = {}
                with torch.no_grad():
                    run_step(model, all_batches[input_name][chosen], merged, found, {}, site_tensor=site_tensor)
                split_shared(found, stores)
        for index, point in enumerate(plan.points):
            store = stores.pop(point.name)
            for step in point.steps:
                if step.kind == "fit":
                    if step.path not in results:
                        fitted[point.name][step.featurizer.name] = fit(model, step, classes, site_tensor)
                        state = fitted[point.name][step.featurizer.name].state()
                        results[step.path] = {k: v.detach().cpu() for k, v in state.items()}
                    continue
                if optimize and is_shared(step):
                    results[step.path] = {}
                    continue
                featurizers = featurizers_for(step, fitted[point.name], classes)
                if step.estimate is not None:  # after every point's reads: one gradient pass per input
                    pending.append((step, store, featurizers))
                    continue
                with torch.no_grad():
                    parts.setdefault(step.path, []).append(run_step(
                        model, all_batches[step.input][chosen], step, store, featurizers, site_tensor=site_tensor,
                        prefixes=prefixes, layers_path=plan.model.layers_path, caches=caches, plan_model=plan.model))
            if prefixes is not None:
                prefixes.release(index)
            if caches is not None:
                caches.release(index)
        groups = {}
        for item in pending:
            groups.setdefault((item[0].input, item[0].scoring.columns, item[0].combinations), []).append(item)
        for (input_name, _, _), items in groups.items():
            for path, found in estimates(model, all_batches[input_name][chosen], items, plan.model.layers_path,
                                             site_tensor).items():
                parts.setdefault(path, []).extend(found)
    for path, found in parts.items():
        results[path] = joined(found)
    return {step.path: results[step.path] for step in plan.steps()}
