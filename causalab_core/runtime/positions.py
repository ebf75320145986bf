"""Position-level reuse: a writing run recomputes only the positions at and after its first written one.

Attention is causal, so a write at padded position ``p`` changes nothing at
positions before ``p`` in any block. A run that writes at blocks >= ``L``
therefore needs only positions ``p..`` of blocks ``L..``: the blocks below
``L`` return the clean run's block ``L - 1`` output at positions ``p..``, and
the positions before ``p`` enter attention as the clean run's keys and values
(a transformers ``DynamicCache`` of one clean forward, cut to ``p``). The
forward's inputs are positions ``p..`` (their ids and position ids) with the
full attention mask; windows are addressed in the shortened sequence by
shifting the batch's offsets by ``-p``. Only the last position reaches the LM
head, so the top block's MLP runs on it alone (``trims_last_mlp``).

Memory: the mode holds, for each batch, the clean keys and values of every
block until its last point. Engines therefore run every point on one batch
before the next and cut the rows into batches sized by ``rows_per_batch``, so
one batch's are held at a time and the mode holds at most ``HOLD_AT_MOST`` times
a sweep's reads and one forward.

Every engine builds the same shortened forward from these functions, so
engines agree byte for byte with each other in this mode; against the plain
path (one full forward) results agree within float rounding (1e-5), not
bitwise: attention over a cache multiplies in another order.

Imported inside engines' blocks: module-level functions only, importing
nothing but torch, transformers and the standard library inside functions.
"""

from __future__ import annotations

import dataclasses

from causalab_core.errors import EngineError
from causalab_core.runtime.batches import Batch
from causalab_core.runtime.reuse import first_written_layer


def first_position(step, rows, offsets) -> int:
    """The smallest padded position ``step`` writes or reads in ``rows`` (``offsets``: each one's left
    padding); 0 when it touches none. What an engine cuts a batch at, and what the planner estimates."""
    return min((pos + offset for op in (*step.reads, *step.writes) for row, offset in zip(rows, offsets)
                for pos in op.windows[row]), default=0)


def first_written_position(step, batch: Batch) -> int:
    """The batch's first position for ``step`` (0: nothing to cut)."""
    return first_position(step, range(batch.start, batch.stop), batch.offsets)


def tail_batch(batch: Batch, start: int) -> Batch:
    """The batch from padded position ``start`` on: ids and position ids cut, the attention mask kept whole,
    the offsets shifted so that a plan position addresses the shortened sequence."""
    return dataclasses.replace(
        batch, input_ids=batch.input_ids[:, start:], position_ids=batch.position_ids[:, start:],
        offsets=tuple(o - start for o in batch.offsets),
    )


def keys_values(cache, blocks: int):
    """Per block, the clean forward's (keys, values), from the ``past_key_values`` a forward with
    ``use_cache=True`` returns; None when the model gives no such per-block cache."""
    layers = getattr(cache, "layers", None)
    if layers is None or len(layers) != blocks:
        return None
    found = [(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in layers]
    if any(k is None or v is None or k.dim() != 4 for k, v in found):
        return None
    return tuple(found)


def prefix_cache(kv, start: int):
    """A ``DynamicCache`` whose blocks hold the clean keys and values of positions ``0..start-1``, as views
    of the kept ones: each block's attention sees them followed by the forward's own positions.

    Nothing is copied into it and nothing it returns is kept: a stock cache copies every block's prefix
    when built and keeps each block's concatenation until the forward ends, which would hold the mode's
    keys and values three times over at the peak instead of once."""
    import torch
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    class Prefix(DynamicLayer):
        def __init__(self, keys, values):
            super().__init__()
            self.keys, self.values, self.dtype, self.device = keys, values, keys.dtype, keys.device
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)

    cache = DynamicCache()
    cache.layers = [Prefix(k[:, :, :start], v[:, :, :start]) for k, v in kv]
    return cache


def trims_last_mlp(step, model) -> bool:
    """Whether the run may compute the last block's MLP on the last position alone: only the last position
    reaches the scores (the LM head), so where the run is scored and reads or writes nothing at or after
    that MLP, its other positions' MLP outputs are never used. ``model``: the plan's ``ModelRef``."""
    last = model.layers - 1
    return model.last_mlp is not None and step.scoring is not None and not any(
        op.site.layer == last and op.site.component in ("mlp_output", "block_output")
        for op in (*step.reads, *step.writes))


def last_position(hidden):
    """The MLP's input at the last position only (its output is ``widened`` back)."""
    return hidden[:, -1:]


def widened(output, length: int):
    """An MLP's one-position output back to ``length`` positions, zeros before it: the block adds it to the
    stream at every position, and only the last one is used."""
    import torch

    if isinstance(output, tuple):
        return (widened(output[0], length), *output[1:])
    return torch.cat([output.new_zeros(output.shape[0], length - 1, output.shape[2]), output], dim=1)


def tail_output(output, start: int):
    """A clean block output from position ``start`` on, copied (a write at the next block's input edits it
    in place); a tuple output (GPT-J, BLOOM) keeps its other members."""
    if isinstance(output, tuple):
        return (output[0][:, start:].clone(), *output[1:])
    return output[:, start:].clone()


class EagerAttention:
    """Inside it, the model's attention is plain matmuls (transformers' ``eager``), for a shortened forward.

    torch's CPU SDPA kernel sums queries against a longer key sequence (a cache) in an order that follows
    the thread count: 1.9e-6 between 1 and 2 threads on the toy weekdays sweep, so an NDIF model actor,
    which runs its own threads, would not give this machine's bytes. Eager attention is thread-invariant
    wherever the plain path's forwards are (plugins/causalab-hooks/tests/test_positions.py). Restored on
    the way out: the model may be a server's, shared with other jobs."""

    def __init__(self, config, when: bool = True):
        self.config, self.when = config, when

    def __enter__(self):
        self.before = self.config._attn_implementation
        if self.when:
            self.config._attn_implementation = "eager"

    def __exit__(self, *exc):
        self.config._attn_implementation = self.before


class CleanCaches:
    """The clean run's keys and values per (input, batch start), kept until the last point writing that input."""

    def __init__(self, points):
        self.last_use: dict[str, int] = {}
        for index, point in enumerate(points):
            for step in point.steps:
                if step.kind == "run" and step.writes:
                    self.last_use[step.input] = index
        self.kept: dict[tuple[str, int], tuple] = {}

    def get(self, input_name: str, start: int):
        return self.kept.get((input_name, start))

    def keep(self, input_name: str, start: int, kv) -> None:
        self.kept[(input_name, start)] = kv

    def release(self, index: int) -> None:
        """After point ``index``: drop the caches of inputs no later point writes."""
        for key in [k for k in self.kept if self.last_use.get(k[0], -1) <= index]:
            del self.kept[key]


# A batch whose kept state stays under this is never split: splitting costs a forward per point and batch,
# for memory no machine misses (the toy benchmark row keeps 4.6 MiB; cut into 22-row batches, its nnterp
# sweep took 1.61x the floor's time instead of 0.87x).
SPLIT_ABOVE = 8 * 2**20
# Above that, what the mode may hold, as a multiple of what the plain path holds (every row's reads and one
# forward): the bound on peak memory that benchmarks/README.md measures against the hand-written floor.
HOLD_AT_MOST = 1.5


def row_count(prompts: dict) -> int:
    return len(next(iter(prompts.values()), ()))


def holdings(model, prompts: dict, points) -> tuple[float, float, float]:
    """Per row, in float32 words, estimated from the plan's shapes: the points' reads, what the mode keeps
    besides them (the clean keys and values of every block, the clean block outputs points start from) and
    one forward's activations (12 widths and the attention scores per token). The same on every engine, so
    engines batch alike and agree byte for byte."""
    rows = max(row_count(prompts), 1)
    steps = [step for point in points for step in point.steps if step.kind == "run"]
    tokens = max((len(r) for texts in prompts.values() for r in texts), default=0)
    reads = sum(len(window) * op.site.width for step in steps for op in step.reads for window in op.windows) / rows
    written = {step.input for step in steps if step.writes}
    starts = {(step.input, first_written_layer(step)) for step in steps
              if step.writes and first_written_layer(step) > 0}
    keys_values = len(written) * 2 * model.layers * model.heads * model.head_dim * tokens
    outputs = len(starts) * tokens * model.width
    forward = tokens * (12 * model.width + model.heads * tokens)
    return reads, keys_values + outputs, forward


def most_rows(model, prompts: dict, points, size: int) -> int:
    """How many rows of a ``size``-row batch the mode may hold at once: all of them where what it keeps stays
    under ``SPLIT_ABOVE``, else as many as keep it within ``HOLD_AT_MOST`` times what the plain path holds
    (every row's reads and one forward of ``size`` rows; the hand-written floor of ``benchmarks/`` keeps that
    much). 0 where not even one row fits."""
    reads, kept, forward = holdings(model, prompts, points)
    if size * (reads + kept) * 4 <= SPLIT_ABOVE:
        return size
    rows = row_count(prompts)
    return min(size, int(HOLD_AT_MOST * (rows * reads + size * forward) // (reads + kept + forward)))


def rows_per_batch(plan, batch_size: int | None) -> int:
    """Rows per batch in position mode, where each batch runs every point before the next batch starts:
    within ``most_rows``, in as few batches as that needs, of even sizes (each holds less)."""
    size = min(batch_size or plan.rows, plan.rows)
    most = max(1, most_rows(plan.model, plan.prompts, plan.points, size))
    count = -(-size // most)
    return -(-size // count)


def memory_refusal(model, prompts: dict, points) -> str | None:
    """Why the planner keeps the plain path for memory, or None: where a single row of the mode would hold
    more than ``HOLD_AT_MOST`` times what the plain path holds with every row in one batch, no batching can
    bound it (one long row: its clean keys and values outweigh a sweep's reads and a forward). Unlike the
    split, not waived under ``SPLIT_ABOVE``: declining costs no forward more, only the positions it saves."""
    rows = row_count(prompts)
    reads, kept, forward = holdings(model, prompts, points)
    plain = rows * (reads + forward)
    if reads + kept + forward <= HOLD_AT_MOST * plain:
        return None
    return (f"one row would keep {kept * 4 / 2**20:.1f} MiB of clean keys, values and block outputs, more than "
            f"{HOLD_AT_MOST}x what the plain path holds ({plain * 4 / 2**20:.1f} MiB): --option positions=true "
            f"runs it anyway")


UNSUPPORTED = ("position reuse needs a per-block key/value cache from the model ({model}); "
               "run with --option positions=false")


def refusal(model, prompts: dict) -> str | None:
    """Why position reuse would not compute what the plain path does for this plan, or None.

    Sliding-window attention over a cache cut at ``p`` masks otherwise than over the full sequence
    (measured: off by whole logits on a Mistral with a 4-token window), so it is refused wherever a prompt
    is longer than the window; where none is, the window never takes effect and the mode agrees."""
    longest = max((len(row) for rows in prompts.values() for row in rows), default=0)
    window = model.sliding_window
    if window is not None and longest > window:
        return (f"position reuse is not exact with sliding-window attention ({model.architecture}: window "
                f"{window}, prompts of up to {longest} tokens)")
    return None


def other_rows(points) -> str | None:
    """Why the mode cannot run these points, or None: a write whose intervention reads other rows' values (a
    mean, a resample, a spread) needs every row's reads at once, and the mode keeps one batch's."""
    for point in points:
        for step in point.steps:
            if step.kind == "run" and step.edges is not None:
                return (f"edge patch {step.edges.name!r} changes every position of its run, so there is no clean "
                        "prefix to reuse")
            for write in (step.writes if step.kind == "run" else ()):
                iv = write.intervention
                if iv is not None and (iv.needs in ("mean", "resample") or iv.std_of is not None):
                    return (f"write {write.name!r} ({write.intervention.kind}) reads other rows' values, and "
                            "position reuse keeps one batch of rows' reads at a time")
    return None


def decide(options, plan) -> dict:
    """Whether an engine with ``options`` (``contracts.ReuseOptions``) runs ``plan`` with position reuse:
    ``{"used": bool, "by": "option" | "planner", "why": str}`` (run.json's ``position_reuse``). Refused,
    before any work, where the mode would not compute what the plain path does."""
    refused = options.positions is True and (refusal(plan.model, plan.prompts) or other_rows(plan.points))
    if refused:
        raise EngineError(f"positions=true: {refused}; run with positions=false")
    if options.positions != "auto":
        return {"used": options.positions, "by": "option", "why": f"positions={str(options.positions).lower()}"}
    if not options.optimize:
        return {"used": False, "by": "option", "why": "optimize=false (the plain path)"}
    return {"used": plan.position_reuse, "by": "planner", "why": plan.position_reuse_why}
