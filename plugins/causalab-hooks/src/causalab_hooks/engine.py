"""Engine ``hooks``: a plan's runs as plain forwards with PyTorch hooks on the model's modules."""

from __future__ import annotations

import contextlib
from collections import defaultdict

import torch

from causalab_core.plugins.contracts import Engine, ReuseOptions, refuse_options
from causalab_core.errors import EngineError, shorten
from causalab_core.ir import Fit, Plan, Run
from causalab_core.runtime import (
    Batch, answer_scores, applier, as_heads, batches, featurizers_for, fit_featurizer, gather, joined, minibatch, put,
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
from causalab_core.runtime.positions import (
    UNSUPPORTED, CleanCaches, EagerAttention, decide, first_written_position, keys_values, last_position, prefix_cache,
    rows_per_batch, tail_batch, tail_output, trims_last_mlp, widened,
)
from causalab_core.runtime.reuse import CleanPrefixes, first_written_layer, is_shared, shared_reads, split_shared
from causalab_hooks.reuse import skipped_blocks

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class _StopForward(Exception):
    """Raised after the last module a read-only run needs; nothing downstream is computed."""


class HooksOptions(ReuseOptions):
    """Shared reads, clean prefixes and position reuse, as the nnterp and ndif engines do them."""


class HooksEngine(Engine):
    """Runs in this process on a transformers ``AutoModelForCausalLM``; loaded weights are kept between runs."""

    name = "hooks"
    capabilities = frozenset({"heads", "training"})
    Options = HooksOptions

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._models: dict[tuple, torch.nn.Module] = {}

    def load(self, plan: Plan) -> torch.nn.Module:
        from transformers.utils import logging

        from causalab_core.runtime.models import local_model

        logging.disable_progress_bar()

        key = (plan.model.source, plan.model.dtype, self.device_map, plan.model.init_seed)
        if key not in self._models:
            try:
                model = local_model(plan.model, DTYPES[plan.model.dtype], self.device_map)
            except (ValueError, RuntimeError) as exc:  # e.g. a --device-map transformers does not know
                raise EngineError(f"cannot load {plan.model.key} (--device-map {self.device_map}): "
                                  f"{shorten(' '.join(str(exc).split()))}") from None
            # Frozen weights, as the nnterp engine and an NDIF server hold them (see causalab_nnterp.engine).
            self._models[key] = model.eval().requires_grad_(False)
        self.record_loaded(self._models[key])  # run.json's loaded_dtype, read off the weights
        return self._models[key]

    def execute(self, plan, *, featurizers=None, remote=False, batch_size=None, progress=None):
        refuse_options(self, remote=remote, batch_size=batch_size)
        reuse = decide(self.options, plan)
        results = Execution(self.load(plan), plan, featurizers or {}, batch_size, self.options.optimize,
                            reuse["used"]).run(progress)
        self.details["position_reuse"] = reuse
        return results


class Execution:
    """One ``execute``: the model and plan, and what the run shares between points (batches, clean prefixes)."""

    def __init__(self, model, plan: Plan, classes, batch_size: int | None, optimize: bool, positions: bool = False):
        self.model, self.plan, self.classes, self.batch_size, self.optimize = model, plan, classes, batch_size, optimize
        self.positions = positions
        self.caches = CleanCaches(plan.points) if positions else None
        """Per (input, batch): the clean run's keys and values (position-level reuse only)."""
        self.device = model.get_input_embeddings().weight.device
        size = rows_per_batch(plan, batch_size) if positions else batch_size
        self.batches = {name: list(batches(prompts, size, self.device)) for name, prompts in plan.prompts.items()}
        """Each input's padded batches, built once: every point runs them."""
        self.clean = CleanPrefixes(plan.points)
        """Per (input, batch): the clean run's block outputs some remaining point starts from."""

    def run(self, progress) -> dict[str, dict[str, torch.Tensor]]:
        if self.positions:
            return self.run_by_batch(progress)
        results: dict[str, dict[str, torch.Tensor]] = {}
        pending: list = []
        stores: dict[str, dict] = {point.name: {} for point in self.plan.points}
        if self.optimize:
            self.record_shared_reads(stores)
        for index, point in enumerate(self.plan.points):
            store, fitted = stores.pop(point.name), {}
            for step in point.steps:
                if step.kind == "fit":
                    fitted[step.featurizer.name] = self.fit(step)
                    results[step.path] = fitted[step.featurizer.name].state()
                elif self.optimize and is_shared(step):
                    results[step.path] = {}
                elif step.estimate is not None:
                    pending.append((step, store, featurizers_for(step, fitted, self.classes)))
                else:
                    swaps = featurizers_for(step, fitted, self.classes)
                    with torch.inference_mode():
                        results[step.path] = self.score(step, store, swaps)
                if progress:
                    progress(step.path)
            self.clean.release(index)
            if self.caches is not None:
                self.caches.release(index)
        results.update(self.estimates(pending))
        return {step.path: results[step.path] for step in self.plan.steps()}

    def run_by_batch(self, progress) -> dict[str, dict[str, torch.Tensor]]:
        """Position reuse: every point on one batch of rows, then the next batch, so the clean keys and values
        of one batch are kept at a time (``positions.rows_per_batch`` sizes the batches). Each (point, batch)
        forward is the one the point-by-point order runs: the same bytes."""
        fitted, results = {point.name: {} for point in self.plan.points}, {}
        for point in self.plan.points:  # training uses its own rows: fit first, in plan order
            for step in point.steps:
                if step.kind == "fit":
                    fitted[point.name][step.featurizer.name] = self.fit(step)
                    results[step.path] = fitted[point.name][step.featurizer.name].state()
        parts: dict[str, list] = {}
        pending: list = []
        count = len(next(iter(self.batches.values())))
        for b in range(count):
            stores: dict[str, dict] = {point.name: {} for point in self.plan.points}
            if self.optimize:
                self.record_shared_reads(stores, b)
            for index, point in enumerate(self.plan.points):
                store = stores.pop(point.name)
                for step in point.steps:
                    if step.kind == "fit" or (self.optimize and is_shared(step)):
                        continue
                    if step.estimate is not None:
                        pending.append((step, store, featurizers_for(step, fitted[point.name], self.classes), b))
                        continue
                    swaps = featurizers_for(step, fitted[point.name], self.classes)
                    with torch.inference_mode():
                        parts.setdefault(step.path, []).append(
                            self.score(step, store, swaps, self.batches[step.input][b:b + 1]))
                self.clean.release(index)
                self.caches.release(index)
        for b in range(count):
            for path, found in self.estimates([item[:3] for item in pending if item[3] == b], b).items():
                parts.setdefault(path, []).append(found)
        for step in self.plan.steps():
            if step.kind == "run":
                results[step.path] = joined(parts.get(step.path, []))
            if progress:
                progress(step.path)
        return {step.path: results[step.path] for step in self.plan.steps()}

    def estimates(self, pending: list, b: int | None = None) -> dict[str, dict[str, torch.Tensor]]:
        """Every estimated run in ``pending`` ((step, store, featurizers) each), on every batch (or batch ``b``):
        per input, one clean forward keeping each written site's tensor and a backward per score
        (``runtime.attribution``), then each run's estimate from them."""
        groups: dict[tuple, list] = {}
        for item in pending:
            groups.setdefault((item[0].input, item[0].scoring.columns, item[0].combinations), []).append(item)
        parts: dict[str, list] = {}
        for (input_name, _, _), items in groups.items():
            if items[0][0].edges is not None:
                for path, found in self.edge_estimates(items, self.batches[input_name] if b is None
                                                       else self.batches[input_name][b:b + 1]).items():
                    parts.setdefault(path, []).extend(found)
                continue
            sites = written_sites([step for step, _, _ in items])
            for batch in self.batches[input_name] if b is None else self.batches[input_name][b:b + 1]:
                span = slice(batch.start, batch.stop)
                tensors: dict = {}
                handles = gradient_hooks(self.model, self.plan.model.layers_path, sites, tensors)
                try:
                    with torch.enable_grad():
                        out = plain_forward(self.model, batch)
                        clean, grads = gradients(out.logits[:, -1, :], items[0][0].scoring, span, tensors,
                                                 items[0][0].combinations)
                finally:
                    for h in handles:
                        h.remove()
                values = {key: t.detach() for key, t in tensors.items()}
                steps = items[0][0].estimate_steps or 1
                for group in path_groups(items, span, batch.offsets, values) if steps > 1 else ():
                    integrated(grads, group, [self.path_gradients(batch, group, k, steps, items[0][0])
                                              for k in range(1, steps)], steps)
                for step, store, swaps in items:
                    parts.setdefault(step.path, []).append(
                        estimate(step, span, batch.offsets, clean, values, grads, store, swaps))
        return {path: joined(found) for path, found in parts.items()}

    def path_gradients(self, batch: Batch, group, k: int, steps: int, step: Run) -> dict:
        """The scores' gradients at ``group``'s site with its tensor moved to the ``k``-th path point
        (``runtime.attribution``): one forward and a backward per score."""
        tensors: dict = {}
        module = self.model.get_submodule(group.site.module)

        def moved(hidden):
            hidden.add_(path_point(group, k, steps)).requires_grad_(True)  # nothing upstream needs a gradient
            tensors[group.key] = hidden
            return hidden

        handle = module.register_forward_hook(lambda mod, args, output: _replace_first(output, moved)) \
            if group.site.tensor == "output" else module.register_forward_pre_hook(
                lambda mod, args, kwargs: _replace_input(args, kwargs, moved), with_kwargs=True)
        try:
            with torch.enable_grad():
                out = plain_forward(self.model, batch)
                return gradients(out.logits[:, -1, :], step.scoring, slice(batch.start, batch.stop), tensors,
                                 step.combinations)[1]
        finally:
            handle.remove()

    def edge_estimates(self, items: list, chosen: list[Batch]) -> dict[str, list]:
        """Estimated edge runs of one input: per batch, one clean forward probing every receiver they patch and
        a backward per score (``runtime.edges.Probe``), then each run's estimate."""
        step0, steps = items[0][0], items[0][0].estimate_steps or 1
        patch, sources = union([step.edges for step, _, _ in items], [s for _, s, _ in items] if steps > 1 else None)
        parts: dict[str, list] = {}
        for batch in chosen:
            span = slice(batch.start, batch.stop)
            found = []
            for probe in [Probe(patch, span, batch.offsets, self.model.get_submodule),
                          *path_probes(patch, sources, span, batch.offsets, self.model.get_submodule, steps)]:
                handles = edge_hooks(self.model, probe)
                try:
                    with torch.enable_grad():
                        out = plain_forward(self.model, batch)
                        found.append((probe, *gradients(out.logits[:, -1, :], step0.scoring, span, probe.leaves,
                                                        step0.combinations)))
                finally:
                    for h in handles:
                        h.remove()
            clean, passes = found[0][1], [(probe, grads) for probe, _, grads in found]
            for step, store, _ in items:
                parts.setdefault(step.path, []).append(edge_estimate(step, span, batch.offsets, clean, passes,
                                                                     store))
        return parts

    def record_shared_reads(self, stores, b: int | None = None) -> None:
        """One forward per batch (or for batch ``b`` alone) per input for every point's read-only runs."""
        for input_name, merged in shared_reads(self.plan.points).items():
            found: dict = {}
            chosen = self.batches[input_name] if b is None else self.batches[input_name][b:b + 1]
            with torch.inference_mode():
                self.record(chosen, merged, found)
            split_shared(found, stores)

    def score(self, step: Run, store, swaps, chosen: list[Batch] | None = None) -> dict[str, torch.Tensor]:
        """A run over every row (or the ``chosen`` batches) with its reads and writes; the answer scores come
        back (if it is scored)."""
        skip = first_written_layer(step) if self.optimize or self.positions else 0
        scored = []
        self._new_reads(step, store, self.plan.rows)
        for batch in self.batches[step.input] if chosen is None else chosen:
            start = first_written_position(step, batch) if self.positions and step.writes else 0
            if start > 0:
                out = self.forward_tail(batch, step, store, swaps, skip, start)
            else:
                out = self.forward(batch, step, store, swaps, stop=True, skip=skip)
            if step.scoring is not None:
                scored.append(answer_scores(out.logits[:, -1, :], step.scoring.token_ids[batch.start:batch.stop],
                                            step.scoring.views))
        return joined(scored)

    def record(self, batch_list: list[Batch], step: Run, store) -> None:
        """A read-only run: its reads land in ``store``; the forward stops after the last module read."""
        self._new_reads(step, store, batch_list[-1].stop)
        for batch in batch_list:
            self.forward(batch, step, store, {}, stop=True)

    def last_logits(self, prompts, step: Run, store, swaps) -> torch.Tensor:
        """A training minibatch's forward with its writes: the last-token logits, with their graph."""
        batch = next(batches(prompts, None, self.device))
        return self.forward(batch, step, store, swaps, stop=False).logits[:, -1, :]

    def fit(self, fit: Fit):
        """Train the featurizer: source read, featurized swap into the target, cross-entropy of the label."""

        def backward(featurizer, idx):
            source, source_prompts, target, target_prompts, labels = minibatch(fit, idx)
            store: dict = {}
            with torch.no_grad():
                self.record(list(batches(source_prompts, None, self.device)), source, store)
            logits = self.last_logits(target_prompts, target, store, {fit.write.name: featurizer})
            if torch.is_grad_enabled():  # off: a featurizer fitted from activations only watches the swap
                torch.nn.functional.cross_entropy(logits.float(), labels.to(logits.device)).backward()

        return fit_featurizer(fit, self.classes, backward)

    @staticmethod
    def _new_reads(step: Run, store, rows: int) -> None:
        for read in step.reads:
            store[read.name] = [None] * rows

    def forward(self, batch: Batch, step: Run, store, swaps, *, stop: bool, skip: int = 0):
        """One batch through the model with the step's hooks attached.

        ``stop``: a run that neither scores nor writes ends after the last module it reads.
        ``skip``: start at block ``skip``, taking the blocks below from this input's clean run.
        """
        skipped = self.starting_at(skip, self.clean_output(step.input, skip - 1, batch) if skip > 0 else None)
        handles = attach(self.model, step, batch, store, swaps, stop=stop)
        if step.edges is not None:
            handles += edge_hooks(self.model, self.patching(step, batch, store))
        try:
            with skipped:
                return plain_forward(self.model, batch)
        finally:
            for h in handles:
                h.remove()

    def patching(self, step: Run, batch: Batch, store) -> Patching:
        """A batch's edge patch; a path patch first runs the input clean, for the streams it starts from."""
        span, modules = slice(batch.start, batch.stop), self.model.get_submodule
        clean = None
        if step.edges.path:
            recording = Patching(step.edges, store, span, batch.offsets, modules, recording=True)
            handles = edge_hooks(self.model, recording)
            try:
                plain_forward(self.model, batch)
            finally:
                for h in handles:
                    h.remove()
            clean = recording.kept()
        return Patching(step.edges, store, span, batch.offsets, modules, clean=clean)

    def forward_tail(self, batch: Batch, step: Run, store, swaps, skip: int, start: int):
        """Position-level reuse: positions ``start..`` of blocks ``skip..`` over the clean keys and values."""
        kv = self.clean_cache(step.input, batch)
        skipped = self.starting_at(skip, tail_output(self.clean_output(step.input, skip - 1, batch), start)
                                   if skip > 0 else None)
        tail = tail_batch(batch, start)
        handles = attach(self.model, step, tail, store, swaps, stop=True)
        if trims_last_mlp(step, self.plan.model):
            handles += last_position_mlp(self.model.get_submodule(self.plan.model.last_mlp), tail.input_ids.shape[1])
        try:
            with skipped, EagerAttention(self.model.config):
                return self.model(
                    input_ids=tail.input_ids, attention_mask=tail.attention_mask, position_ids=tail.position_ids,
                    past_key_values=prefix_cache(kv, start), use_cache=True, logits_to_keep=1,
                )
        finally:
            for h in handles:
                h.remove()

    def starting_at(self, block: int, output):
        """The one place a forward's block outputs are replaced: inside it, blocks below ``block`` are skipped
        and ``output`` (a clean output of block ``block - 1``) stands for theirs; nothing at block 0.
        Written values go in at one place too, the hooks ``attach`` sets up (``runtime.interventions.put``)."""
        if block == 0:
            return contextlib.nullcontext()
        return skipped_blocks(self.model, self.plan.model.layers_path, block, output)

    def clean_cache(self, input_name: str, batch: Batch):
        """The clean run's keys and values for a batch: one full clean forward, which also records the block
        outputs points of this input start from."""
        if self.caches.get(input_name, batch.start) is None:
            outputs: dict[int, torch.Tensor] = {}
            blocks = self.model.get_submodule(self.plan.model.layers_path)
            handles = [blocks[i].register_forward_hook(lambda mod, args, output, i=i: outputs.__setitem__(i, output))
                       for i in self.clean.wanted(input_name)]
            try:
                out = self.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                 position_ids=batch.position_ids, use_cache=True, logits_to_keep=1)
            finally:
                for h in handles:
                    h.remove()
            kv = keys_values(out.past_key_values, len(blocks))
            if kv is None:
                raise EngineError(UNSUPPORTED.format(model=self.plan.model.key))
            self.caches.keep(input_name, batch.start, kv)
            self.clean.keep(input_name, batch.start, outputs)
        return self.caches.get(input_name, batch.start)

    def clean_output(self, input_name: str, layer: int, batch: Batch) -> torch.Tensor:
        """Block ``layer``'s output on this input's clean run, computed (``CleanPrefixes.missing``) from the
        highest clean output kept below it, and kept until the last point that needs it."""
        if self.clean.get(input_name, batch.start, layer) is None:
            base, record = self.clean.missing(input_name, batch.start, layer)
            outputs: dict[int, torch.Tensor] = {}
            blocks = self.model.get_submodule(self.plan.model.layers_path)
            handles = [blocks[i].register_forward_hook(lambda mod, args, output, i=i: _record_clean(outputs, i, output, i == layer))
                       for i in record]
            skipped = self.starting_at(base + 1, self.clean.get(input_name, batch.start, base) if base >= 0 else None)
            try:
                with skipped:
                    plain_forward(self.model, batch)
            finally:
                for h in handles:
                    h.remove()
            self.clean.keep(input_name, batch.start, outputs)
        return self.clean.get(input_name, batch.start, layer)


def last_position_mlp(mlp, length: int) -> list:
    """Hooks that run ``mlp`` on the last of ``length`` positions only (``positions.trims_last_mlp``)."""
    return [mlp.register_forward_pre_hook(lambda mod, args, kwargs: _replace_input(args, kwargs, last_position),
                                          with_kwargs=True),
            mlp.register_forward_hook(lambda mod, args, output: widened(output, length))]


def gradient_hooks(model, layers_path: str, sites, tensors: dict) -> list:
    """Hooks for ``runtime.attribution``: the first block's input made to require grad (the weights do not),
    and each site's tensor kept in ``tensors``, unchanged."""
    def kept(key):
        def edit(hidden):
            tensors[key] = hidden
            return hidden
        return edit

    first = model.get_submodule(layers_path)[0]
    handles = [first.register_forward_pre_hook(
        lambda mod, args, kwargs: _replace_input(args, kwargs, lambda h: h.requires_grad_(True)), with_kwargs=True)]
    for site in sites:
        module, edit = model.get_submodule(site.module), kept(site_key(site))
        if site.tensor == "output":
            handles.append(module.register_forward_hook(lambda mod, args, output, edit=edit: _replace_first(output, edit)))
        else:
            handles.append(module.register_forward_pre_hook(
                lambda mod, args, kwargs, edit=edit: _replace_input(args, kwargs, edit), with_kwargs=True))
    return handles


def edge_hooks(model, patching: Patching) -> list:
    """A hook at each tensor an edge patch reads or edits (``runtime.edges``)."""
    handles = []
    for path, tensor in visits(patching.patch):
        module = model.get_submodule(path)
        edit = (lambda value, path=path, tensor=tensor: patching.at(path, tensor, value))
        if tensor == "output":
            handles.append(module.register_forward_hook(lambda mod, args, output, edit=edit: _replace_first(output, edit)))
        else:
            handles.append(module.register_forward_pre_hook(
                lambda mod, args, kwargs, edit=edit: _replace_input(args, kwargs, edit), with_kwargs=True))
    return handles


def _record_clean(outputs, block: int, output, last: bool):
    outputs[block] = output
    if last:  # nothing above the block asked for is needed
        raise _StopForward


def plain_forward(model, batch: Batch):
    """The model on one padded batch, last position only through the LM head (None if a hook stopped it)."""
    try:
        return model(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask,
            position_ids=batch.position_ids, logits_to_keep=1, use_cache=False,
        )
    except _StopForward:
        return None


def attach(model, step: Run, batch: Batch, store, swaps, stop: bool) -> list:
    """Register one hook per (module, tensor) that the step reads or writes."""
    by_site = defaultdict(lambda: ([], []))
    for read in step.reads:
        by_site[(read.site.module, read.site.tensor)][0].append(read)
    for write in step.writes:
        by_site[(write.site.module, write.site.tensor)][1].append(write)
    stop_after = None
    if stop and step.scoring is None and not step.writes and step.edges is None:
        order = [name for name, _ in model.named_modules()]
        stop_after = max((order.index(m), m, t) for m, t in by_site)[1:]
    handles = []
    for (module_path, tensor), (reads, writes) in by_site.items():
        edit = editor(reads, writes, batch, store, swaps, stop=(module_path, tensor) == stop_after)
        module = model.get_submodule(module_path)
        if tensor == "output":
            handles.append(module.register_forward_hook(
                lambda mod, args, output, edit=edit: _replace_first(output, edit)))
        else:
            handles.append(module.register_forward_pre_hook(
                lambda mod, args, kwargs, edit=edit: _replace_input(args, kwargs, edit), with_kwargs=True))
    return handles


def editor(reads, writes, batch: Batch, store, swaps, stop: bool):
    """A function of the site's tensor that records reads, applies writes, returns the tensor."""
    span = slice(batch.start, batch.stop)

    def edit(hidden: torch.Tensor) -> torch.Tensor:
        for read in reads:
            store[read.name][span] = gather(as_heads(hidden, read.site), read.windows[span], batch.offsets)
        if writes:
            hidden = hidden.clone()
            for write in writes:  # the one place a written value is computed (runtime.interventions)
                put(as_heads(hidden, write.site), write, span, batch.offsets, store, swaps[write.name],
                    swaps.get(applier(write)))
        if stop:
            raise _StopForward
        return hidden

    return edit


def _replace_first(output, edit):
    if isinstance(output, tuple):
        return (edit(output[0]), *output[1:])
    return edit(output)


def _replace_input(args, kwargs, edit):
    if args:
        return (edit(args[0]), *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": edit(kwargs["hidden_states"])}

