"""Position-level reuse: byte-identical across engines, within 1e-5 of the plain path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from causalab_core import api
from causalab_core.plugins.registry import registry
from causalab_testing.conformance import ragged_rows
from causalab_testing.data import site_sweep_document, sweep_document
from causalab_testing.work import block_work
from causalab_hooks.engine import HooksEngine, HooksOptions


def close(a: dict, b: dict, tol=1e-5) -> float:
    assert a.keys() == b.keys()
    worst = 0.0
    for path in a:
        assert a[path].keys() == b[path].keys(), path
        for name in a[path]:
            x, y = a[path][name], b[path][name]
            if x.is_floating_point():
                worst = max(worst, (x - y).abs().max().item())
            else:
                assert torch.equal(x, y), (path, name)
    assert worst <= tol, worst
    return worst


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
@pytest.mark.parametrize("site", ["block_input", "attn_output", "head"])
def test_position_reuse_is_within_1e_5_of_the_plain_path(arch, site, request, write_doc):
    plan = api.plan(write_doc(site_sweep_document(str(request.getfixturevalue(arch)), site), ragged_rows(20)))
    classes = api.featurizer_classes(plan, registry())
    fast = HooksEngine(options=HooksOptions(positions=True)).execute(plan, featurizers=classes, batch_size=7)
    plain = HooksEngine(options=HooksOptions(optimize=False)).execute(plan, featurizers=classes, batch_size=7)
    close(fast, plain)


def count_block_tokens(engine, plan):
    return block_work(engine.load(plan), plan.model.layers_path, lambda: engine.execute(plan), tokens=True)


def test_a_late_write_computes_fewer_positions(write_doc, tiny_llama):
    plan = api.plan(write_doc(sweep_document(str(tiny_llama), positions=[-1]), ragged_rows(10)))
    prefix = count_block_tokens(HooksEngine(options=HooksOptions(positions=False)), plan)
    positions = count_block_tokens(HooksEngine(options=HooksOptions(positions=True)), plan)
    assert sum(positions) < sum(prefix)
    # The top block: the shared counterfactual forward and the clean base forward (every position), then
    # each point on the last position only (rows are left-padded: the last position is the same for all).
    width = {name: max(len(p) for p in prompts) for name, prompts in plan.prompts.items()}
    assert positions[-1] == width["counterfactual"] + width["base"] + len(plan.points)
    assert prefix[-1] == width["counterfactual"] + width["base"] * len(plan.points)


def test_position_reuse_is_as_thread_invariant_as_the_plain_path():
    """Where the plain path gives the same bytes at 1 and 2 threads (the toy weekdays sweep here; not every
    shape: torch's masked SDPA kernel follows the thread count on some), position reuse does too: what lets
    a server's model actor, with its own threads, give this machine's bytes (EagerAttention; before it,
    1.9e-6 apart)."""
    from causalab_toy.models import install

    doc = Path(__file__).resolve().parents[3] / "documents/real/weekdays_layer_sweep.json"
    install("weekdays")
    plan = api.plan(doc)
    threads = torch.get_num_threads()
    found = {}
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            for mode in (False, True):
                found[count, mode] = HooksEngine(options=HooksOptions(positions=mode)).execute(plan)
    finally:
        torch.set_num_threads(threads)

    def same(a, b):
        return all(torch.equal(a[p][n], b[p][n]) for p in a for n in a[p])

    assert not same(found[1, True], found[1, False])  # the two modes do differ in the last bits
    if same(found[1, False], found[2, False]):
        assert same(found[1, True], found[2, True])


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
def test_the_top_block_mlp_computes_only_the_last_position(arch, request, write_doc):
    """Only the last position reaches the scores, so in position mode the top block's MLP runs on it alone:
    each point's forward gives that MLP one position, not the tail's four or more; the scores stay within
    1e-5 of the plain path. A write at the top block's MLP output still sees the whole tail."""
    from causalab_nnterp.engine import NnterpEngine, NnterpOptions

    model_key = str(request.getfixturevalue(arch))
    rows = ragged_rows(6)
    for site, layers, trimmed in (("block_output", [0, 2], True), ("mlp_output", [3], False)):
        doc = sweep_document(model_key, layers=layers, positions=[-4])
        for spec in (doc["reads"]["cf_resid"], doc["writes"]["patch"]):
            spec["site"] = site
        plan = api.plan(write_doc(doc, rows))
        classes = api.featurizer_classes(plan, registry())
        engine = HooksEngine(options=HooksOptions(positions=True))
        top = engine.load(plan).get_submodule(plan.model.layers_path)[-1].mlp
        seen = []  # positions the top MLP computed, per call (a forward hook sees the input it ran on)
        handle = top.register_forward_hook(lambda module, args, output: seen.append(args[0].shape[1]))
        try:
            fast = engine.execute(plan, featurizers=classes)
        finally:
            handle.remove()
        written = seen[-len(plan.points):]  # after the shared and clean forwards, one per point (one batch)
        assert all((n == 1) == trimmed for n in written), (site, seen)
        plain = HooksEngine(options=HooksOptions(optimize=False)).execute(plan, featurizers=classes)
        close(fast, plain)
        remote_block = NnterpEngine(options=NnterpOptions(positions=True)).execute(plan, featurizers=classes)
        assert all(torch.equal(fast[p][n], remote_block[p][n]) for p in fast for n in fast[p])
