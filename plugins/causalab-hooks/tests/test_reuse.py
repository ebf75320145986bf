"""Shared reads and prefix reuse: fewer forwards, and not one bit of any output changed."""

from __future__ import annotations

import subprocess

import pytest

from causalab_core import api, hookimpl
from causalab_core.plugins.registry import build_registry
from causalab_testing.conformance import ragged_rows
from causalab_testing.work import block_work
from causalab_testing.data import sweep_document
from causalab_hooks.engine import HooksEngine, HooksOptions


class PlainOptions(HooksOptions):
    optimize: bool = False


class PlainHooks(HooksEngine):
    name = "hooks-plain"
    Options = PlainOptions


class Plugin:
    """Registers the unoptimized engine beside the real one, for a side-by-side run."""

    __name__ = "plain-hooks-plugin"
    DISTRIBUTION = "causalab-hooks-tests"

    @staticmethod
    @hookimpl
    def causalab_engines():
        return [PlainHooks]


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
@pytest.mark.parametrize("site", ["block_output", "block_input", "mlp_output"])
def test_optimized_outputs_are_byte_identical_to_the_plain_path(arch, site, request, write_doc, tmp_path):
    doc = sweep_document(str(request.getfixturevalue(arch)))
    if site == "block_input":  # and in an order that climbs and falls back: the clean run as points first need it
        doc["sweep"] = {"pos": doc["sweep"]["pos"], "layers": [3, 0, 2, 1]}
    for spec in (*doc["reads"].values(), *doc["writes"].values()):
        spec["site"] = site
    path = write_doc(doc, ragged_rows(20))
    registry = build_registry(extra=(Plugin,))
    api.run(path, out=tmp_path / "fast", engine="hooks", batch_size=7, registry=registry, options={"positions": False})
    api.run(path, out=tmp_path / "plain", engine="hooks-plain", batch_size=7, registry=registry)
    diff = subprocess.run(["diff", "-r", "-x", "run.json", "-x", "manifest.json", tmp_path / "fast", tmp_path / "plain"], capture_output=True)
    assert diff.returncode == 0, diff.stdout


def count_block_calls(engine, plan):
    return block_work(engine.load(plan), plan.model.layers_path, lambda: engine.execute(plan))


def test_the_sweep_does_less_block_work(write_doc, tiny_llama):
    plan = api.plan(write_doc(sweep_document(str(tiny_llama)), ragged_rows(10)))
    fast = count_block_calls(HooksEngine(options=HooksOptions(positions=False)), plan)
    plain = count_block_calls(HooksEngine(options=HooksOptions(optimize=False)), plan)
    # Plain, per point with the swap at block L: the counterfactual up to block L, then the whole base run.
    assert plain == [16, 14, 12, 10]
    # Reused: one counterfactual forward for all points, the clean base run's blocks 0-2 each once (each from
    # the one below, as the first point starts above it), then each point from block L on.
    assert fast == [4, 6, 8, 9]
    # In an order that falls back to lower blocks, the same work: what a later point starts from is kept.
    doc = sweep_document(str(tiny_llama))
    doc["sweep"] = {"pos": doc["sweep"]["pos"], "layers": [3, 0, 2, 1]}
    shuffled = api.plan(write_doc(doc, ragged_rows(10)))
    assert count_block_calls(HooksEngine(options=HooksOptions(positions=False)), shuffled) == [4, 6, 8, 9]


def test_clean_outputs_are_freed_as_the_sweep_moves_on(write_doc, tiny_llama, monkeypatch):
    """Each clean block output is computed when the first point starts above it, from the one below, and kept
    until the last point that starts above it, or, the highest kept, until the next block above is computed."""
    from causalab_core.runtime.reuse import CleanPrefixes

    plan = api.plan(write_doc(sweep_document(str(tiny_llama)), ragged_rows(10)))
    kept_after = []
    release = CleanPrefixes.release

    def spy(self, index):
        release(self, index)
        kept_after.append(sorted({b for outputs in self.kept.values() for b in outputs}))

    monkeypatch.setattr(CleanPrefixes, "release", spy)
    HooksEngine(options=HooksOptions(positions=False)).execute(plan, batch_size=4)
    # Points run layer by layer (0..3, two positions each); a point at layer L starts from block L - 1. Block 0 is
    # kept past its last point (3) until block 1 is computed from it (point 4): one block at a time, not three.
    assert kept_after == [[], [], [0], [0], [1], [1], [2], []]
