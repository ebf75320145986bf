"""An independent reference for engines: the plan run by plain forwards, one row at a time."""

from __future__ import annotations


import torch




def ragged_rows(n: int = 10):
    """Weekday rows of several lengths (some prompts carry extra leading words), for padded batches."""
    from causalab_testing.data import weekday_rows

    rows = weekday_rows(n, seed=7)
    for i, r in enumerate(rows):
        prefix = "hello " * (i % 3)
        r["base"], r["counterfactual"] = prefix + r["base"], "hi " * (i % 2) + r["counterfactual"]
    return rows


DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

NOISE_SEED_MIX = 0x9E3779B1
"""A noise write's generator for row ``r`` is seeded ``(seed * 0x9E3779B1 + r) mod 2**32`` (documents/README.md)."""


def independent_forward(plan, featurizers=None, registry=None) -> dict[str, dict[str, torch.Tensor]]:
    """Every scored step of ``plan`` computed without any engine: each row alone (no padding, no batches),
    a plain ``transformers`` forward with the step's reads and writes made by torch hooks written here.

    Writes compute their value here too, from the documented meaning of each need and combination
    (``contracts.NEEDS``, ``contracts.COMBINES``), not from ``causalab_core.runtime``: the source read on the
    row or on the resampled row ``rows[i]``; the mean over every position of the rows a read resolved on (less
    ``minus``'s); the vector file's one tensor; noise from ``torch.Generator().manual_seed((seed * 0x9E3779B1 + row) % 2**32)``,
    scaled by ``alpha`` times the float64 standard deviation of the ``std_of`` read's values; nothing; then
    replace, add, scale, interpolate, or the kind's own ``apply`` (``custom``); through a featurizer, in feature
    space with the site's error term kept. A read records the value arriving at its site in its own run, writes
    at lower sites included and a write at the same site not; a later step's write may take it.

    Returns ``{step path: {"answer_logits", "logsumexp"[, "answer_ranks"][, "logprobs"]}}`` for the scored steps;
    ``featurizers`` maps a kind to its class and ``intervention/<kind>`` to a custom intervention's class, as
    ``api.featurizer_classes`` gives an engine (by default from ``registry``, else the installed one). A plan that
    trains (a ``Fit`` step) is refused: this reference does not train.
    """
    from transformers import AutoModelForCausalLM

    if any(step.kind == "fit" for step in plan.steps()):
        raise NotImplementedError("the independent forward does not train: give it a plan without `train`")
    custom = any(iv.combine == "custom" for iv in plan.interventions())
    if featurizers is None and (plan.featurizers() or custom):
        from causalab_core.api import featurizer_classes
        from causalab_core.plugins.registry import registry as installed

        featurizers = featurizer_classes(plan, registry or installed())
    model = AutoModelForCausalLM.from_pretrained(plan.model.source, dtype=DTYPES[plan.model.dtype],
                                                 local_files_only=True).eval().requires_grad_(False)

    def view(hidden, site):  # [positions, width] of row 0 (of one head, for a head site)
        hidden = hidden[0]
        return hidden if site.head is None else hidden.unflatten(-1, (site.heads, site.width))[:, site.head, :]

    out: dict[str, dict[str, torch.Tensor]] = {}
    for point in plan.points:
        store: dict[str, list] = {}  # read -> per row: its window's values, or None where it did not resolve
        for step in point.steps:
            writes = {w.name: _IndependentWrite(w, store, featurizers) for w in step.writes}
            prompts = plan.prompts[step.input]
            for read in step.reads:
                store[read.name] = [None] * len(prompts)
            scored = []
            for row, ids in enumerate(prompts):
                def patch(hidden, site_key, row=row):
                    for read in step.reads:  # the value arriving: before any write at this site
                        if (read.site.module, read.site.tensor) == site_key and read.windows[row]:
                            store[read.name][row] = view(hidden, read.site)[list(read.windows[row])].clone()
                    mine = [w for w in step.writes if (w.site.module, w.site.tensor) == site_key and w.windows[row]]
                    if not mine:
                        return hidden
                    hidden = hidden.clone()
                    for write in mine:
                        where = list(write.windows[row])
                        target = view(hidden, write.site)
                        target[where] = writes[write.name].value(target[where], row)
                    return hidden

                handles = []
                for key in {(op.site.module, op.site.tensor) for op in (*step.reads, *step.writes)}:
                    module = model.get_submodule(key[0])
                    if key[1] == "output":
                        def after(mod, args, output, key=key):
                            if isinstance(output, tuple):
                                return (patch(output[0], key), *output[1:])
                            return patch(output, key)
                        handles.append(module.register_forward_hook(after))
                    else:
                        def before(mod, args, kwargs, key=key):
                            if args:
                                return (patch(args[0], key), *args[1:]), kwargs
                            return args, {**kwargs, "hidden_states": patch(kwargs["hidden_states"], key)}
                        handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
                try:
                    with torch.no_grad():
                        last = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].float()
                finally:
                    for h in handles:
                        h.remove()
                if step.scoring is not None:
                    scored.append(last)
            if step.scoring is None:
                continue
            last = torch.stack(scored)
            chosen = last.gather(1, torch.tensor(step.scoring.token_ids))
            found = {"answer_logits": chosen, "logsumexp": last.logsumexp(-1), "top": last.argmax(-1).to(torch.int32)}
            views = getattr(step.scoring, "views", ("answers",))
            if "ranks" in views:
                found["answer_ranks"] = (last.unsqueeze(1) > chosen.unsqueeze(2)).sum(-1).to(torch.int32)
            if "logprobs" in views:
                found["logprobs"] = torch.log_softmax(last, -1)
            out[step.path] = found
    return out


class _IndependentWrite:
    """One write of one step, as the independent forward computes it: its featurizer, its custom kind's instance,
    and the statistics over rows it needs (the reads they come from ran in earlier steps, on every row)."""

    def __init__(self, write, store, classes):
        from safetensors.torch import load

        self.write, self.store, self.iv = write, store, write.intervention
        self.featurizer = None
        if write.featurizer is not None:
            cls = classes[write.featurizer.kind]
            self.featurizer = cls(cls.Params.model_validate(write.featurizer.params), write.site.width)
            if write.featurizer.state is not None:
                self.featurizer.load_state(load(write.featurizer.state))
        iv = self.iv
        self.custom = self.vector = None
        self.alpha = 1.0 if iv is None else iv.alpha
        if iv is None:
            return
        if iv.combine == "custom":
            self.custom = classes[f"intervention/{iv.kind}"]()
            self.params = type(self.custom).Params.model_validate(iv.params)
        if iv.needs == "mean":
            self.vector = self.values_of(write.source).double().mean(0)
            if iv.minus is not None:
                self.vector = self.vector - self.values_of(iv.minus).double().mean(0)
            self.vector = self.vector.float()
        elif iv.needs == "tensor":
            (self.vector,) = load(iv.tensor).values()
            self.vector = self.vector.float()
        if iv.std_of is not None:
            self.alpha = iv.alpha * self.values_of(iv.std_of).double().std().item()

    def values_of(self, read: str) -> torch.Tensor:
        """``[positions, width]``: every position of every row the read resolved on."""
        return torch.cat([v.float() for v in self.store[read] if v is not None and len(v)])

    def value(self, base: torch.Tensor, row: int) -> torch.Tensor:
        """What the write puts at its window ``base`` (``[window, width]``) on ``row``."""
        write, iv, featurizer = self.write, self.iv, self.featurizer
        if iv is None:  # a swap
            source = self.store[write.source][row]
            if featurizer is None:
                return source.to(base.dtype)
            features, _ = featurizer.featurize(source.float())
            _, error = featurizer.featurize(base.float())
            return featurizer.inverse(features, error).to(base.dtype)
        x = base.float().unsqueeze(0)  # [1 row, window, width], as an engine hands a kind its rows
        x, error = featurizer.featurize(x) if featurizer is not None else (x, None)
        if iv.needs == "source":
            v = self.store[write.source][row]
        elif iv.needs == "resample":
            v = self.store[write.source][iv.rows[row]]
        elif iv.needs in ("mean", "tensor"):
            v = self.vector.expand(len(base), -1)
        else:
            v = None
        if v is not None:
            v = v.float().unsqueeze(0)
            v = featurizer.featurize(v)[0] if featurizer is not None else v
        if iv.needs == "noise":
            generator = torch.Generator().manual_seed(((iv.seed or 0) * NOISE_SEED_MIX + row) % 2**32)
            v = torch.randn(tuple(x.shape[1:]), generator=generator, dtype=torch.float32).unsqueeze(0)
        if iv.combine == "custom":
            written = self.custom.apply(x, v, self.params).float()
        elif iv.combine == "replace":
            written = v
        elif iv.combine == "add":
            written = x + self.alpha * v
        elif iv.combine == "scale":
            written = self.alpha * x
        elif iv.combine == "interpolate":
            written = (1 - self.alpha) * x + self.alpha * v
        else:
            raise NotImplementedError(f"write {write.name!r}: the independent forward knows no combination "
                                      f"{iv.combine!r}")
        if featurizer is not None:
            written = featurizer.inverse(written, error)
        return written[0].to(base.dtype)
