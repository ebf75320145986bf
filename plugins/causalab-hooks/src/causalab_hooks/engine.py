"""Engine ``hooks``: a plan's runs as plain forwards with PyTorch hooks on the model's modules."""

from __future__ import annotations

import contextlib
from collections import defaultdict

import torch

from causalab_core.contracts import Engine
from causalab_core.errors import EngineError
from causalab_core.ir import Fit, Plan, Run
from causalab_core.runtime import Batch, answer_scores, as_heads, batches, featurizers_for, fit_featurizer, gather, minibatch, scatter
from causalab_hooks.reuse import first_written_layer, is_shared, shared_reads, skipped_blocks

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class _StopForward(Exception):
    """Raised after the last module a read-only run needs; nothing downstream is computed."""


class HooksEngine(Engine):
    """Runs in this process on a transformers ``AutoModelForCausalLM``."""

    name = "hooks"
    capabilities = frozenset({"heads", "training"})

    def __init__(self, *, optimize: bool = True, **options):
        super().__init__(**options)
        self.optimize = optimize
        """Share read-only forwards across points and reuse clean prefixes (results are bit-identical)."""
        self._models: dict[tuple, torch.nn.Module] = {}
        self._batch_cache: dict[tuple, list[Batch]] = {}
        self._plan_prompts: tuple = ()

    def load(self, plan: Plan) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging

        logging.disable_progress_bar()

        key = (plan.model.source, plan.model.dtype, self.device_map)
        if key not in self._models:
            model = AutoModelForCausalLM.from_pretrained(
                plan.model.source, dtype=DTYPES[plan.model.dtype], device_map=self.device_map,
                local_files_only=True,
            )
            # Frozen weights, as the nnterp engine and an NDIF server hold them (see causalab_nnterp.engine).
            self._models[key] = model.eval().requires_grad_(False)
        return self._models[key]

    def execute(self, plan, *, featurizers=None, remote=False, batch_size=None, progress=None):
        if remote:
            raise EngineError(
                "engine 'hooks' cannot run remotely: a hook is a callable on a module in this process, "
                "there is nothing to ship; use an engine with the remote capability (nnterp)"
            )
        if batch_size is not None and batch_size < 1:
            raise EngineError(f"batch size must be 1 or more, got {batch_size}")
        classes = featurizers or {}
        model = self.load(plan)
        device = model.get_input_embeddings().weight.device
        self._batch_cache, self._plan_prompts = {}, tuple(plan.prompts.values())
        results: dict[str, dict[str, torch.Tensor]] = {}
        stores: dict[str, dict] = {point.name: {} for point in plan.points}
        if self.optimize:
            self._shared_reads(model, plan, stores, batch_size, device)
        prefixes: dict = {}
        for point in plan.points:
            store = stores[point.name]
            fitted: dict[str, object] = {}
            for step in point.steps:
                if step.kind == "fit":
                    fitted[step.featurizer.name] = self._fit(model, step, device, classes)
                    results[step.path] = fitted[step.featurizer.name].state()
                elif self.optimize and is_shared(step):
                    results[step.path] = {}
                else:
                    swaps = featurizers_for(step, fitted, classes)
                    skip = first_written_layer(step) if self.optimize else 0
                    with torch.inference_mode():
                        results[step.path] = self._run(model, plan.prompts[step.input], step, store, batch_size,
                                                       device, swaps, prefix=(plan, prefixes, skip))
                if progress:
                    progress(step.path)
        return results

    def _shared_reads(self, model, plan: Plan, stores, batch_size, device) -> None:
        """One forward per batch per input for every point's read-only runs."""
        for input_name, merged in shared_reads(plan.points).items():
            found: dict = {}
            with torch.inference_mode():
                self._run(model, plan.prompts[input_name], merged, found, batch_size, device, {})
            for key, values in found.items():
                point, read = key.rsplit("/", 1)
                stores[point][read] = values

    def _prefix(self, model, plan: Plan, prefixes, input_name: str, layer: int, batch: Batch):
        """Block ``layer - 1``'s clean output for this batch (one clean forward serves every layer)."""
        key = (input_name, batch.start, batch.stop)
        if key not in prefixes:
            outputs = {}
            prefixes[key] = outputs
            handles = []
            for i, block in enumerate(model.get_submodule(plan.model.layers_path)):
                handles.append(block.register_forward_hook(
                    lambda mod, args, output, i=i: outputs.__setitem__(i, output)))
            try:
                self._forward(model, batch)
            finally:
                for h in handles:
                    h.remove()
        return prefixes[key][layer - 1]

    def _fit(self, model, fit: Fit, device, classes):
        """Train the featurizer: source read, featurized swap into the target, cross-entropy of the label."""
        model.requires_grad_(False)

        def backward(featurizer, idx):
            source, source_prompts, target, target_prompts, labels = minibatch(fit, idx)
            store: dict = {}
            with torch.no_grad():
                self._run(model, source_prompts, source, store, None, device, {})
            logits = self._run(model, target_prompts, target, store, None, device, {fit.write.name: featurizer},
                               keep_logits=True)["logits"]
            torch.nn.functional.cross_entropy(logits.float(), labels.to(logits.device)).backward()

        return fit_featurizer(fit, classes, backward)

    def _run(self, model, prompts, step: Run, store, batch_size, device, featurizers,
             keep_logits=False, prefix=None) -> dict[str, torch.Tensor]:
        """One run over every row; scores (or, for training, the last-token logits) come back.

        ``prefix`` = (plan, cache, layer): start each batch's forward at block ``layer``,
        taking the blocks below from the input's clean run.
        """
        logits, lse, last = [], [], []
        for read in step.reads:
            store[read.name] = [None] * len(prompts)
        for batch in self._batches(prompts, batch_size, device):
            skip = contextlib.nullcontext()
            if prefix and prefix[2] > 0:
                plan, cache, layer = prefix
                cached = self._prefix(model, plan, cache, step.input, layer, batch)
                skip = skipped_blocks(model, plan.model.layers_path, layer, cached)
            handles = self._attach(model, step, batch, store, featurizers, stop=not keep_logits)
            try:
                with skip:
                    out = self._forward(model, batch)
            finally:
                for h in handles:
                    h.remove()
            if keep_logits:
                last.append(out.logits[:, -1, :])
            elif step.scoring is not None:
                scores = answer_scores(out.logits[:, -1, :], step.scoring.token_ids[batch.start:batch.stop])
                logits.append(scores["answer_logits"])
                lse.append(scores["logsumexp"])
        if keep_logits:
            return {"logits": torch.cat(last)}
        if step.scoring is None:
            return {}
        return {"answer_logits": torch.cat(logits), "logsumexp": torch.cat(lse)}

    def _batches(self, prompts, batch_size, device) -> list[Batch]:
        """The padded batches of these rows; a plan input's are built once per execute (every point runs them)."""
        key = (id(prompts), batch_size)
        if key not in self._batch_cache:
            if not any(prompts is p for p in self._plan_prompts):
                return list(batches(prompts, batch_size, device))  # training minibatches: new every step
            self._batch_cache[key] = list(batches(prompts, batch_size, device))
        return self._batch_cache[key]

    def _forward(self, model, batch: Batch):
        try:
            return model(
                input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                position_ids=batch.position_ids, logits_to_keep=1, use_cache=False,
            )
        except _StopForward:
            return None

    def _attach(self, model, step: Run, batch: Batch, store, featurizers, stop: bool = True) -> list:
        """Register one hook per (module, tensor) that the step reads or writes."""
        by_site = defaultdict(lambda: ([], []))
        for read in step.reads:
            by_site[(read.site.module, read.site.tensor)][0].append(read)
        for write in step.writes:
            by_site[(write.site.module, write.site.tensor)][1].append(write)
        stop_after = None
        if stop and step.scoring is None and not step.writes:
            order = [name for name, _ in model.named_modules()]
            stop_after = max((order.index(m), m, t) for m, t in by_site)[1:]
        handles = []
        for (module_path, tensor), (reads, writes) in by_site.items():
            edit = self._editor(reads, writes, batch, store, featurizers, stop=(module_path, tensor) == stop_after)
            module = model.get_submodule(module_path)
            if tensor == "output":
                handles.append(module.register_forward_hook(
                    lambda mod, args, output, edit=edit: _replace_first(output, edit)))
            else:
                handles.append(module.register_forward_pre_hook(
                    lambda mod, args, kwargs, edit=edit: _replace_input(args, kwargs, edit), with_kwargs=True))
        return handles

    def _editor(self, reads, writes, batch: Batch, store, featurizers, stop: bool):
        """A function of the site's tensor that records reads, applies writes, returns the tensor."""
        span = slice(batch.start, batch.stop)

        def edit(hidden: torch.Tensor) -> torch.Tensor:
            for read in reads:
                store[read.name][span] = gather(as_heads(hidden, read.site), read.windows[span], batch.offsets)
            if writes:
                hidden = hidden.clone()
                for write in writes:
                    scatter(as_heads(hidden, write.site), write.windows[span], batch.offsets,
                            store[write.source][span], featurizers[write.name])
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

