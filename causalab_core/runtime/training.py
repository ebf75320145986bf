"""The training loop a `Fit` step runs, shared by every engine (and so the same on each)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import torch

from causalab_core.errors import EngineError
from causalab_core.ir import Fit, Read, Run, Write
from causalab_core.runtime.featurizers import featurizer_for


def rows_of(op: Read | Write, idx: list[int]) -> Read | Write:
    """A read or write restricted to some rows, windows in the order of ``idx``."""
    return dataclasses.replace(op, windows=tuple(op.windows[i] for i in idx))


def minibatch(fit: Fit, idx: list[int]) -> tuple[Run, tuple, Run, tuple, torch.Tensor]:
    """The source run, its prompts, the target run, its prompts, and the labels for rows ``idx``."""
    source = Run("", fit.source_input, reads=(rows_of(fit.read, idx),))
    target = Run("", fit.target_input, writes=(rows_of(fit.write, idx),))
    pick = lambda prompts: tuple(prompts[i] for i in idx)  # noqa: E731
    labels = torch.tensor([fit.labels[i] for i in idx])
    return source, pick(fit.prompts[fit.source_input]), target, pick(fit.prompts[fit.target_input]), labels


def fit_featurizer(fit: Fit, classes: Mapping[str, type], backward: Callable[[object, list[int]], None]):
    """Seeded init, seeded shuffling, Adam; ``backward(featurizer, idx)`` computes a minibatch's loss and
    calls ``.backward()`` on it (inside a trace, for engines that need that), and only runs the minibatch
    where gradients are off. A featurizer fitted from ``activations`` gets one such pass over the rows in
    order, then ``settle()``."""
    torch.manual_seed(fit.seed)
    featurizer = featurizer_for(fit.write, classes)
    rows = len(fit.labels)
    if getattr(featurizer, "fits", "interchange") == "activations":
        with torch.no_grad():
            for start in range(0, rows, fit.batch_size):
                backward(featurizer, list(range(start, min(start + fit.batch_size, rows))))
        featurizer.settle()
        return finite(fit, featurizer.eval())
    # eps well above float32 noise: Adam's first steps are lr * sign(grad), so a gradient that is
    # numerically zero would otherwise move as far as a real one, and engines would part ways.
    optimizer = torch.optim.Adam(featurizer.parameters(), lr=fit.lr, eps=1e-5)
    order = torch.Generator().manual_seed(fit.seed)
    steps, step = fit.epochs * -(-rows // fit.batch_size), 0
    for _ in range(fit.epochs):
        permutation = torch.randperm(rows, generator=order).tolist()
        for start in range(0, rows, fit.batch_size):
            optimizer.zero_grad()
            if hasattr(featurizer, "anneal"):  # the contract's defaults, for a class that does not inherit it
                featurizer.anneal(step, steps)
            backward(featurizer, permutation[start:start + fit.batch_size])
            penalty = featurizer.penalty() if hasattr(featurizer, "penalty") else None
            if penalty is not None:  # the loss is the sum: its gradients add up in .grad
                torch.autograd.backward(penalty)  # not Tensor.backward, which nnsight takes over outside a trace
            optimizer.step()
            step += 1
    return finite(fit, featurizer.eval())


def finite(fit: Fit, featurizer):
    """The trained featurizer, or one line saying training diverged: a state that is not finite would swap
    nothing, or NaN, into every run after it, and the run would still write numbers."""
    named = featurizer.named_parameters() if hasattr(featurizer, "named_parameters") else ()
    bad = [name for name, p in named if not bool(p.detach().isfinite().all())]
    if not bad:
        bad = [name for name, t in featurizer.state().items() if t.is_floating_point() and not bool(t.isfinite().all())]
    if bad:
        raise EngineError(f"featurizer {fit.featurizer.name!r}: training diverged ({', '.join(bad)} not finite); "
                          "lower train.lr, or the featurizer's temperature or sparsity")
    return featurizer
