"""The planner's pick of position-level reuse (``causalab_core.runtime.positions``) for a whole plan.

A writing run whose lowest touched block is ``L`` and whose first touched
(padded) position is ``p`` needs, with position reuse, only positions ``p..``
of blocks ``L..``; without it, every position of those blocks. The mode does
the same number of forwards as the plain path (one clean forward per input
batch also keeps the keys and values), so it is faster exactly where the
positions it saves are a real share of the plan's writing work: the planner
turns it on there (``benchmarks/README.md``: 0.67x of prefix reuse's time
on the toy weekdays sweep, width 64; 0.46x on a width-256 Llama; 0.71x on
the GPT-2-sized heatmap). Elsewhere the plain path stays, and where one
row's clean keys and values would already hold more than the memory bound of
``runtime.positions`` allows (a single long row), since no batching can keep
that one within it. It is
also what a comparison with an outside reference asks for, since it is
bitwise what a full forward computes and the mode agrees with it within
1e-5, not bitwise: engine option ``positions=false``.

Decided once per plan, so a run cut into chunks (``--out`` keeps completed
points) or resumed decides as the whole run did. Engines' ``positions``
option overrides the pick; ``run.json`` records what ran and why.
"""

from __future__ import annotations

from causalab_core.ir import ModelRef, Point
from causalab_core.runtime.positions import first_position, memory_refusal, other_rows, refusal
from causalab_core.runtime.reuse import first_written_layer

# The share of the writing runs' block x position work the mode must save.
MIN_SAVED = 0.3
# The families the mode is checked on against the plain path, every site (tests/test_position_choice.py);
# the planner keeps the plain path on any other (``--option positions=true`` still runs it there).
CHECKED = frozenset({
    "LlamaForCausalLM", "GPT2LMHeadModel", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
    "Gemma2ForCausalLM", "Gemma3ForCausalLM", "GPTNeoXForCausalLM", "Phi3ForCausalLM", "Olmo2ForCausalLM",
    "GPTJForCausalLM", "OPTForCausalLM", "BloomForCausalLM",
})


def saved_share(model: ModelRef, prompts: dict[str, tuple], points: tuple[Point, ...]) -> float:
    """The share of the writing runs' block x position work position reuse saves, all rows in one batch
    (engines cut each batch at its own first position, so smaller batches save as much or more)."""
    saved = total = 0
    for point in points:
        for step in point.steps:
            if step.kind != "run" or not step.writes:
                continue
            rows = prompts[step.input]
            width = max(len(r) for r in rows)
            first = first_position(step, range(len(rows)), [width - len(r) for r in rows])
            blocks = model.layers - first_written_layer(step)
            saved, total = saved + blocks * first, total + blocks * width
    return saved / total if total else 0.0


def choose(model: ModelRef, prompts: dict[str, tuple], points: tuple[Point, ...]) -> dict:
    """The plan's ``position_reuse`` (on where it pays, see the module's docstring) and
    ``position_reuse_why`` (the reason either way, in words)."""
    if any(step.kind == "run" and step.estimate for point in points for step in point.steps):
        return picked(False, "its writes are estimated (attribution), not run")
    share = saved_share(model, prompts, points)
    if model.dtype != "float32":
        return picked(False, f"{model.dtype}: the mode's agreement with the plain path is checked in float32")
    if model.architecture not in CHECKED:
        return picked(False, f"{model.architecture} is not among the families position reuse is checked on")
    refused = refusal(model, prompts) or other_rows(points)
    if refused:
        return picked(False, refused)
    if share < MIN_SAVED:
        return picked(False, f"it would save {share:.0%} of the writing runs' block positions "
                             f"(< {MIN_SAVED:.0%})")
    too_large = memory_refusal(model, prompts, points)
    if too_large:
        return picked(False, too_large)
    return picked(True, f"it saves {share:.0%} of the writing runs' block positions")


def picked(use: bool, why: str) -> dict:
    return {"position_reuse": use, "position_reuse_why": why}
