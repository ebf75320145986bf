"""Position-level reuse on nnterp: byte-identical to hooks in the same mode, within 1e-5 of the plain path."""

from __future__ import annotations

import pytest
import torch

from causalab_core import api
from causalab_core.plugins.registry import registry
from causalab_testing.conformance import ragged_rows
from causalab_testing.data import site_sweep_document
from causalab_hooks.engine import HooksEngine, HooksOptions
from causalab_nnterp.engine import NnterpEngine, NnterpOptions


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
@pytest.mark.parametrize("site", ["block_input", "attn_output", "head"])
def test_position_reuse_is_byte_identical_to_hooks_and_close_to_the_plain_path(arch, site, request, write_doc):
    plan = api.plan(write_doc(site_sweep_document(str(request.getfixturevalue(arch)), site), ragged_rows(20)))
    classes = api.featurizer_classes(plan, registry())
    fast = NnterpEngine(options=NnterpOptions(positions=True)).execute(plan, featurizers=classes, batch_size=7)
    hooks = HooksEngine(options=HooksOptions(positions=True)).execute(plan, featurizers=classes, batch_size=7)
    plain = NnterpEngine(options=NnterpOptions(optimize=False)).execute(plan, featurizers=classes, batch_size=7)
    assert fast.keys() == hooks.keys() == plain.keys()
    worst = 0.0
    for path in fast:
        assert fast[path].keys() == hooks[path].keys() == plain[path].keys(), path
        for name in fast[path]:
            assert torch.equal(fast[path][name], hooks[path][name]), (path, name)
            a, b = fast[path][name], plain[path][name]
            worst = max(worst, (a.double() - b.double()).abs().max().item()) if a.numel() else worst
    assert worst <= 1e-5, worst


def test_sites_by_module_path_give_the_same_tensors(write_doc, tiny_gpt2):
    import nnsight

    from causalab_nnterp.block import run_plan
    from causalab_nnterp.sites import by_module_path

    plan = api.plan(write_doc(site_sweep_document(str(tiny_gpt2), "block_input"), ragged_rows(12)))
    classes = api.featurizer_classes(plan, registry())
    model = NnterpEngine().model(plan)
    with model.session():
        found = nnsight.save(run_plan(model, plan, 5, classes, site_tensor=by_module_path, positions=True))
    hooks = HooksEngine(options=HooksOptions(positions=True)).execute(plan, featurizers=classes, batch_size=5)
    assert found.keys() == hooks.keys()
    assert all(torch.equal(found[p][n], hooks[p][n]) for p in hooks for n in hooks[p])
