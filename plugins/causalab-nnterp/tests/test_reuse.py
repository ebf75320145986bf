"""The nnterp engine's shared reads and clean prefixes: byte-identical to hooks and to its own plain path, fewer traces."""

from __future__ import annotations

import pytest
import torch

from causalab_core import api
from causalab_core.plugins.registry import registry
from causalab_testing.conformance import ragged_rows
from causalab_testing.work import block_work
from causalab_testing.data import sweep_document
from causalab_hooks.engine import HooksEngine, HooksOptions
from causalab_nnterp.engine import NnterpEngine, NnterpOptions


def several_sites(model: str) -> dict:
    """A sweep whose points write at two sites of different blocks (block input and MLP output)."""
    doc = sweep_document(model, layers=[0, 1, 3], positions=[-4, -1])
    doc["reads"]["cf_mlp"] = {**doc["reads"]["cf_resid"], "site": "mlp_output", "layer": 2}
    doc["writes"]["patch_mlp"] = {**doc["writes"]["patch"], "source": "cf_mlp", "site": "mlp_output", "layer": 2}
    for spec in (doc["reads"]["cf_resid"], doc["writes"]["patch"]):
        spec["site"] = "block_input"
    return doc


def assert_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for path in a:
        assert a[path].keys() == b[path].keys(), path
        for name in a[path]:
            assert torch.equal(a[path][name], b[path][name]), (path, name)


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
@pytest.mark.parametrize("order", ["layer by layer", "position by position, layers shuffled"])
def test_reuse_is_byte_identical_to_hooks_and_to_the_plain_path(arch, order, request, write_doc):
    doc = several_sites(str(request.getfixturevalue(arch)))
    if order != "layer by layer":  # the clean run is computed as points first start above a block, in any order
        doc["sweep"] = {"pos": doc["sweep"]["pos"], "layers": [3, 0, 1]}
    plan = api.plan(write_doc(doc, ragged_rows(20)))
    classes = api.featurizer_classes(plan, registry())
    fast = NnterpEngine(options=NnterpOptions(positions=False)).execute(plan, featurizers=classes, batch_size=7)
    plain = NnterpEngine(options=NnterpOptions(optimize=False)).execute(plan, featurizers=classes, batch_size=7)
    hooks = HooksEngine(options=HooksOptions(positions=False)).execute(plan, featurizers=classes, batch_size=7)
    assert_equal(fast, plain)
    assert_equal(fast, hooks)


def test_sites_by_module_path_skip_the_same_blocks(write_doc, tiny_gpt2):
    import nnsight

    from causalab_nnterp.block import run_plan
    from causalab_nnterp.sites import by_module_path

    plan = api.plan(write_doc(several_sites(str(tiny_gpt2)), ragged_rows(12)))
    classes = api.featurizer_classes(plan, registry())
    model = NnterpEngine().model(plan)
    with model.session():
        found = nnsight.save(run_plan(model, plan, 5, classes, site_tensor=by_module_path))
    assert_equal(found, HooksEngine(options=HooksOptions(positions=False)).execute(plan, featurizers=classes, batch_size=5))


def count_block_calls(engine, plan):
    """How many times each block's MLP ran inside the engine's traces."""
    return block_work(engine.model(plan)._module, plan.model.layers_path, lambda: engine.execute(plan))


def test_the_sweep_does_the_hooks_engines_block_work(write_doc, tiny_llama):
    plan = api.plan(write_doc(sweep_document(str(tiny_llama)), ragged_rows(10)))
    # As on hooks (plugins/causalab-hooks/tests/test_reuse.py): one counterfactual trace for all points, each
    # clean block once (from the one below, as points first start above it), then each point from its block on.
    assert count_block_calls(NnterpEngine(options=NnterpOptions(positions=False)), plan) == [4, 6, 8, 9]
    assert count_block_calls(NnterpEngine(options=NnterpOptions(optimize=False)), plan) == [16, 14, 12, 10]
