"""Attribution patching: every estimated run of an input from one clean forward and one backward per score.

A run a document estimates (``Run.estimate``) is not run. Its scores, the answer columns' logits and the
log-sum-exp, are estimated to first order around the clean run of its input:

    score(written) ~ score(clean) + sum over its writes of (written - clean) . d score / d activation

where ``written`` is what the write would put at its site (``interventions.put``, any kind, through a
featurizer) and the gradient is taken on the clean run. One forward of an input's rows, its first block's
input made to require grad (the weights are frozen), and one backward per answer column and one for the
log-sum-exp give the gradient at every site some estimated run writes, at once: a sweep of any size costs
that, then a dot product per point. Nothing in the forward is changed, so its values are the clean run's.

Engines keep each written site's tensor from that forward (``site_key``), call ``gradients`` on its last-token
logits inside their pass, then ``estimate`` per run. Imported inside a remote block: module-level functions
only, torch only.

Integrated gradients (``Run.estimate_steps``, Sundararajan et al. 2017; the "at the node" form of Marks et
al. 2024): the gradient at a written site is averaged over ``steps`` points of the straight path from the
site's clean value to the written one, the rest of the model run downstream of it: the clean pass is the path's
first point, and each other point is one more forward-backward with the site's tensor moved there
(``path_groups``: the runs' changes at one site joined into one tensor where they touch different elements, a
sweep's positions or one module's heads, so a site costs ``steps - 1`` passes, not a point). A single write's
estimate then tends to its patched effect as ``steps`` grows: the path integral of the gradient is the change.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from causalab_core.runtime.featurizers import applier
from causalab_core.runtime.interventions import put
from causalab_core.runtime.scores import answer_scores
from causalab_core.runtime.windows import SITE_ORDER, as_heads, window_index


def written_sites(steps) -> list:
    """One site per (module, tensor) the estimated ``steps`` write, in the order a forward reaches them (a head's
    site stands for its module's whole tensor, which every head of it shares)."""
    sites = {}
    for step in steps:
        for write in step.writes:
            sites.setdefault((write.site.module, write.site.tensor), write.site)
    return sorted(sites.values(), key=lambda s: (s.layer, SITE_ORDER[s.component], s.module))


def site_key(site) -> tuple:
    return (site.module, site.tensor)


def gradients(last_logits: torch.Tensor, scoring, span: slice, tensors: dict,
              combinations=None) -> tuple[dict, dict]:
    """The clean scores (``answer_scores``) and, per site key, the gradients of the scores (``Scoring.scores``:
    each answer column, then the log-sum-exp; or each of ``combinations`` of them, ``Run.combinations``) at its
    tensor, stacked ``[scores, *tensor shape]`` and summed over rows: rows do not mix, so row r's part is its own."""
    last = last_logits.float()
    ids = torch.tensor(scoring.token_ids[span], dtype=torch.long, device=last.device)
    every = torch.cat([last.gather(1, ids), last.logsumexp(-1, keepdim=True)], 1).sum(0)
    scores = list(every.unbind(0)) if combinations is None else [
        (torch.tensor(c, device=last.device) * every).sum() for c in combinations]
    keys, inputs = list(tensors), list(tensors.values())
    found = [torch.autograd.grad(score, inputs, retain_graph=k < len(scores) - 1, allow_unused=True)
             for k, score in enumerate(scores)]
    grads = {key: torch.stack([torch.zeros_like(t) if g[i] is None else g[i] for g in found]).float()
             for i, (key, t) in enumerate(zip(keys, inputs))}
    return answer_scores(last.detach(), scoring.token_ids[span]), grads


class PathGroup:
    """Writes whose changes at one site are moved along the path together: ``change`` (the site tensor's
    shape) holds each one's, on elements no other one touches with another value."""

    def __init__(self, site, change: torch.Tensor):
        self.site, self.key, self.change, self.members = site, site_key(site), change, set()
        self.touched = change != 0

    def join(self, change: torch.Tensor) -> bool:
        """Take ``change`` in, if where it overlaps this group's it changes by the same amount."""
        touched = change != 0
        both = touched & self.touched
        if bool(both.any()) and not torch.equal(change[both], self.change[both]):
            return False
        self.change = torch.where(touched, change, self.change)
        self.touched |= touched
        return True


def path_groups(items, span: slice, offsets, values: dict) -> list[PathGroup]:
    """The estimated runs ``items`` ((step, store, featurizers) each)'s writes on rows ``span`` as few groups
    per site as their overlaps allow, each group's members its writes' ``(step path, write name)``."""
    groups: list[PathGroup] = []
    for step, store, featurizers in items:
        for write in step.writes:
            key = site_key(write.site)
            with torch.no_grad():
                written = values[key].clone()
                put(as_heads(written, write.site), write, span, offsets, store, featurizers[write.name],
                    featurizers.get(applier(write)))
                change = written - values[key]
            group = next((g for g in groups if g.key == key and g.join(change)), None)
            if group is None:
                groups.append(group := PathGroup(write.site, change))
            group.members.add((step.path, write.name))
    return groups


def path_point(group: PathGroup, k: int, steps: int) -> torch.Tensor:
    """What the ``k``-th of ``steps`` path points adds to the group's site tensor: ``k / steps`` of its change."""
    return group.change * (k / steps)


def integrated(grads: dict, group: PathGroup, more: list[dict], steps: int) -> None:
    """Record in ``grads``, under ``(site key, step path, write name)`` for each member, the mean of the clean
    pass's gradient at the group's site and those of ``more`` (the other path points' passes)."""
    total = grads[group.key].clone()
    for found in more:
        total += found[group.key]
    for member in group.members:
        grads[(group.key, *member)] = total / steps


def estimate(step, span: slice, offsets, clean: dict, values: dict, grads: dict, store,
             featurizers) -> dict[str, torch.Tensor]:
    """The estimated scores of ``step`` on rows ``span`` (a run's keys): the clean scores plus, for each write,
    the change it makes at its window dotted with each score's gradient there; and the clean scores
    (``clean_*``), from which the client tells how far each point moved.

    ``values``/``grads``: per site key, the clean tensor and the stacked gradients (``gradients``); a
    write's own integrated gradient, where there is one, under ``(site key, step path, write name)``;
    ``featurizers``: what ``featurizers.featurizers_for`` hands a run of ``step`` (featurizers, and custom
    interventions' instances)."""
    change = torch.zeros(span.stop - span.start, len(next(iter(grads.values()))), dtype=torch.float64)
    for write in step.writes:
        key = site_key(write.site)
        with torch.no_grad():
            delta, at = written_change(as_heads(values[key], write.site), write, span, offsets, store,
                                       featurizers[write.name], featurizers.get(applier(write)))
        g = at(as_heads(grads.get((key, step.path, write.name), grads[key]), write.site))  # [scores, rows, pos, width]
        change += torch.einsum("bpd,sbpd->bs", delta.float(), g).double().cpu()
    if step.combinations is not None:  # the least change of the scores that gives each combination its change
        change = change @ torch.linalg.pinv(torch.tensor(step.combinations, dtype=torch.float64)).T
    columns = clean["answer_logits"].shape[1]
    return {"answer_logits": (clean["answer_logits"].double() + change[:, :columns]).float(),
            "logsumexp": (clean["logsumexp"].double() + change[:, columns]).float(),
            "clean_answer_logits": clean["answer_logits"], "clean_logsumexp": clean["logsumexp"]}


def written_change(x: torch.Tensor, write, span: slice, offsets, store, featurizer, custom):
    """(what ``write`` puts at its windows) - ``x`` there, and a function taking a stack of tensors of ``x``'s
    shape (``[scores, *x.shape]``) to the same positions. Windows of one width are gathered first, so only they
    are copied."""
    windows = write.windows[span]
    index = window_index(windows, offsets)
    if index is None:  # ragged windows: the whole tensor
        written = x.clone()
        put(written, write, span, offsets, store, featurizer, custom)
        return written - x, lambda t: t
    rows, cols = index
    compact = x[rows, cols]
    written = compact.clone()
    put(written, _windows_from_zero(write, cols.shape[1]), span, (0,) * len(windows), store, featurizer, custom)
    return written - compact, lambda t: t[:, rows, cols]


def _windows_from_zero(write, width: int):
    """``write`` with every row's window at positions ``0..width-1``: the same write on the gathered windows."""
    return replace(write, windows=(tuple(range(width)),) * len(write.windows))
