"""Engine ``nnterp``: the whole plan in one nnsight session, addressed by nnterp's standardized names."""

from __future__ import annotations


from causalab_core.plugins.contracts import Engine, ReuseOptions, refuse_options
from causalab_core.errors import EngineError, shorten
from causalab_core.runtime.positions import decide

DTYPES = ("float32", "float16", "bfloat16")


def load_model(plan, device_map=None):
    """An nnterp ``StandardizedTransformer`` for the plan's checkpoint; weights load at the first local trace."""
    import torch
    from transformers import AutoTokenizer
    from transformers.utils import logging

    from causalab_nnterp.compat import import_nnterp

    logging.disable_progress_bar()
    nnterp = import_nnterp()
    source = plan.model.source
    options = {"dtype": getattr(torch, plan.model.dtype)}
    if device_map is not None:
        options["device_map"] = device_map
    try:
        if plan.model.init_seed is not None:  # random weights, built as the hooks engine builds them
            from causalab_core.runtime.models import local_model

            source = local_model(plan.model, options.pop("dtype"), options.pop("device_map", None))
        model = nnterp.StandardizedTransformer(
            source, tokenizer=AutoTokenizer.from_pretrained(plan.model.source, local_files_only=True), dispatch=True,
            **options
        )
    except (ValueError, RuntimeError) as exc:  # e.g. a --device-map transformers does not know
        raise EngineError(f"cannot load {plan.model.key} (--device-map {device_map}): "
                          f"{shorten(' '.join(str(exc).split()))}") from None
    # Frozen weights, as an NDIF server holds them: with trainable weights some
    # ops inside a trace round differently in the last bit, and a local run
    # must match a remote one byte for byte.
    model._module.requires_grad_(False)
    return model


class NnterpOptions(ReuseOptions):
    """Shared reads, clean prefixes and position reuse inside the session, as the hooks engine does them."""


class NnterpEngine(Engine):
    """Runs a plan inside one ``model.session(remote=...)``; only the flat results come back."""

    name = "nnterp"
    capabilities = frozenset({"remote", "heads", "training"})
    Options = NnterpOptions

    def __init__(self, **options):
        super().__init__(**options)
        self._models: dict[tuple, object] = {}

    def model(self, plan):
        key = (plan.model.source, plan.model.dtype, self.device_map)
        if key not in self._models:
            self._models[key] = load_model(plan, self.device_map)
        return self._models[key]

    def execute(self, plan, *, featurizers=None, remote=False, batch_size=None, progress=None):
        refuse_options(self, remote=remote, batch_size=batch_size)
        reuse = decide(self.options, plan)
        results = self.run(plan, remote, batch_size, featurizers or {}, reuse["used"])
        self.details["position_reuse"] = reuse
        if progress:
            for step in plan.steps():
                progress(step.path)
        return results

    def run(self, plan, remote, batch_size, classes, positions):
        """The plan's one session (the step a remote engine replaces)."""
        model = self.model(plan)
        results = run_session(model, plan, remote, batch_size, classes, self.options.optimize, positions)
        self.record_loaded(model._module)  # after the session: the weights it ran on, not the ones asked for
        return results


def run_session(model, plan, remote, batch_size, classes, optimize=True, positions=False):
    """The session block. It loads only its arguments and installed modules."""
    import nnsight

    from causalab_nnterp.block import run_plan

    with model.session(remote=remote):
        results = nnsight.save(run_plan(model, plan, batch_size, classes, optimize=optimize, positions=positions))
    return results
