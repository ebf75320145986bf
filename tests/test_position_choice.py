"""The planner's pick of position-level reuse: where it turns the mode on, that it is safe there, and that a
run says what ran.

Every family the planner may pick the mode for is checked here against the plain path on every site
(within 1e-5, the mode's contract; GPT-2 in plugins/causalab-hooks/tests/test_positions.py).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from typer.testing import CliRunner

from causalab_core import api
from causalab_core.cli import app
from causalab_core.compiler.reuse import CHECKED
from causalab_core.errors import EngineError
from causalab_core.plugins.registry import registry
from causalab_core.results.resume import chunk_size
from causalab_testing import families
from causalab_testing.conformance import ragged_rows
from causalab_testing.data import sweep_document
from causalab_hooks.engine import HooksEngine, HooksOptions

SITES = ("block_input", "block_output", "attn_output", "mlp_output", "head")
ARCHITECTURE = {family: spec[1] for family, spec in families.FAMILIES.items()}
MISSING = {("opt", "mlp_output")}  # OPT has no MLP module (tests/test_families.py)


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(((a[p][n] - b[p][n]).abs().max().item() for p in a for n in a[p] if a[p][n].is_floating_point()),
               default=0.0)


def family_document(key: str, site: str) -> dict:
    doc = sweep_document(key, layers=[0, families.LAYERS - 1], positions=[0, -4, -1])
    for spec in (doc["reads"]["cf_resid"], doc["writes"]["patch"]):
        spec["site"] = site
        if site == "head":
            spec["head"] = 1
    return doc


def checkpoint(family: str, folder, window: int | None) -> str:
    """The family's test checkpoint, its sliding window (where it has one) set to ``window``."""
    source = families.ensure(family)
    config = json.loads((source / "config.json").read_text())
    if config.get("sliding_window") is None or window is None:
        return str(source)
    target = folder / f"{family}-window-{window}"
    shutil.copytree(source, target)
    (target / "config.json").write_text(json.dumps({**config, "sliding_window": window}))
    return str(target)


@pytest.mark.parametrize("family", sorted(families.FAMILIES))
def test_on_every_family_the_mode_agrees_with_the_plain_path_on_every_site(family, write_doc, tmp_path):
    """Sliding windows (Mistral, Gemma 2 and 3) widened past the prompts: where a window is shorter, the
    mode is refused (next test)."""
    key = checkpoint(family, tmp_path, window=64)
    for site in SITES:
        if (family, site) in MISSING:
            continue
        plan = api.plan(write_doc(family_document(key, site), ragged_rows(6), name=f"{site}.json"))
        assert plan.position_reuse, plan.position_reuse_why  # the planner picks it: so it must hold
        fast = HooksEngine(options=HooksOptions(positions=True)).execute(plan, batch_size=4)
        plain = HooksEngine(options=HooksOptions(positions=False)).execute(plan, batch_size=4)
        assert max_diff(fast, plain) <= 1e-5, (family, site)


@pytest.mark.parametrize("family", ["mistral", "gemma2"])
def test_a_sliding_window_shorter_than_the_prompts_keeps_the_plain_path_and_refuses_the_mode(family, write_doc):
    plan = api.plan(write_doc(family_document(checkpoint(family, None, None), "block_input"), ragged_rows(6)))
    assert not plan.position_reuse
    assert "sliding-window attention" in plan.position_reuse_why
    with pytest.raises(EngineError, match=r"positions=true: .*window 4, prompts of up to \d+ tokens"):
        HooksEngine(options=HooksOptions(positions=True)).execute(plan)


def test_the_checked_list_is_the_families_tested_here():
    assert CHECKED == set(ARCHITECTURE.values()) | {"GPT2LMHeadModel"}


def test_the_planner_picks_it_for_late_writes_and_the_run_says_so(write_doc, tiny_llama, tmp_path):
    doc = write_doc(sweep_document(str(tiny_llama), layers=[0, 3], positions=[-4, -1]), ragged_rows(12))
    plan = api.plan(doc)
    assert plan.position_reuse, plan.position_reuse_why

    shown = CliRunner().invoke(app, ["plan", str(doc)])
    assert shown.exit_code == 0, shown.output
    assert "positions on: it saves" in shown.output

    picked = api.run(doc, out=tmp_path / "picked")
    off = api.run(doc, out=tmp_path / "off", options={"positions": False})
    assert picked.run["position_reuse"]["used"] is True
    assert picked.run["position_reuse"]["by"] == "planner"
    assert off.run["position_reuse"] == {"used": False, "by": "option", "why": "positions=false"}
    for a, b in zip(picked.metrics, off.metrics):
        assert a.point.name == b.point.name and a.name == b.name
        for x, y in zip(a.content["values"], b.content["values"]):
            assert x == pytest.approx(y, abs=1e-5)
    recorded = json.loads((tmp_path / "picked" / "run.json").read_text())
    assert recorded["position_reuse"]["used"] is True


def test_early_writes_keep_the_plain_path(write_doc, tiny_llama):
    plan = api.plan(write_doc(sweep_document(str(tiny_llama), layers=[0, 3], positions=[0, 1]), ragged_rows(12)))
    assert not plan.position_reuse
    assert "would save" in plan.position_reuse_why


def test_a_run_kept_in_chunks_decides_as_the_whole_run(write_doc, tiny_llama, tmp_path):
    """``--out`` runs a long sweep a chunk of points at a time: each chunk runs as the whole plan was picked."""
    doc = write_doc(sweep_document(str(tiny_llama), positions=list(range(-8, 0))), ragged_rows(8))
    assert len(api.plan(doc).points) > chunk_size(len(api.plan(doc).points))
    kept = api.run(doc, out=tmp_path / "kept")
    whole = api.run(doc)
    assert kept.run["position_reuse"]["used"] is True
    assert {k: v for k, v in kept.files.items() if k != "run.json"} == {
        k: v for k, v in whole.files.items() if k != "run.json"}


def test_the_engines_run_the_pick_byte_identically(write_doc, tiny_llama):
    from causalab_nnterp.engine import NnterpEngine

    plan = api.plan(write_doc(sweep_document(str(tiny_llama), layers=[0, 3], positions=[-4, -1]), ragged_rows(8)))
    classes = api.featurizer_classes(plan, registry())
    hooks, nnterp = HooksEngine(), NnterpEngine()
    a, b = hooks.execute(plan, featurizers=classes), nnterp.execute(plan, featurizers=classes)
    assert hooks.details["position_reuse"]["used"] and nnterp.details["position_reuse"]["used"]
    for path in a:
        for name in a[path]:
            assert torch.equal(a[path][name], b[path][name]), (path, name)


def test_half_precision_keeps_the_plain_path(write_doc, tiny_llama):
    doc = sweep_document(str(tiny_llama), positions=[-4, -1])
    doc["model"]["dtype"] = "bfloat16"
    plan = api.plan(write_doc(doc, ragged_rows(6)))
    assert not plan.position_reuse and "checked in float32" in plan.position_reuse_why


def test_local_attention_is_a_window_too():
    """GPT-Neo names its local layers' window otherwise than a sliding window: positions=true is refused there."""
    from transformers import GPTNeoConfig

    from causalab_core.compiler.shell import attention_window

    assert attention_window(GPTNeoConfig(window_size=16, attention_types=[[["global", "local"], 12]])) == 16
    assert attention_window(GPTNeoConfig(attention_types=[[["global"], 24]])) is None


def test_positions_auto_is_the_planners_pick_and_a_wrong_value_is_one_line(sweep_doc, tmp_path):
    result = CliRunner().invoke(app, ["run", str(sweep_doc), "--out", str(tmp_path / "o"), "--option", "positions=maybe"])
    assert result.exit_code != 0 and not (tmp_path / "o").exists()
    assert "--option positions" in result.output and "hooks" in result.output
    plan = api.plan(sweep_doc)
    engine = HooksEngine(options=HooksOptions(positions="auto"))
    engine.execute(plan)
    assert engine.details["position_reuse"]["by"] == "planner"


def test_large_kept_state_splits_the_rows_and_one_batch_is_kept_at_a_time(write_doc, tiny_llama, monkeypatch):
    """Where the mode's clean keys and values outgrow what a sweep keeps anyway, the rows run in smaller batches,
    every point on one batch before the next: the same numbers (within 1e-5 of the plain path, byte-identical
    across engines), and never more than one batch's clean keys and values held."""
    from causalab_core.runtime import positions
    from causalab_nnterp.engine import NnterpEngine, NnterpOptions

    doc = sweep_document(str(tiny_llama), layers=[0, 1, 2, 3], positions=list(range(-6, 0)))
    plan = api.plan(write_doc(doc, ragged_rows(12)))
    assert positions.rows_per_batch(plan, None) == 12  # a few KiB: not worth a forward more
    monkeypatch.setattr(positions, "SPLIT_ABOVE", 0)
    rows = positions.rows_per_batch(plan, None)
    assert 1 <= rows < 12
    assert positions.rows_per_batch(plan, 2) <= 2  # never above the batch size asked for

    held = []
    keep = positions.CleanCaches.keep
    monkeypatch.setattr(positions.CleanCaches, "keep",
                        lambda self, *a: (keep(self, *a), held.append(len(self.kept)))[0])
    classes = api.featurizer_classes(plan, registry())
    split = HooksEngine(options=HooksOptions(positions=True)).execute(plan, featurizers=classes)
    assert len(held) == -(-12 // rows) and max(held) == 1  # a clean forward per batch, each freed before the next
    remote_block = NnterpEngine(options=NnterpOptions(positions=True)).execute(plan, featurizers=classes)
    plain = HooksEngine(options=HooksOptions(positions=False)).execute(plan, featurizers=classes)
    assert max_diff(split, plain) <= 1e-5
    for path in split:
        for name in split[path]:
            assert torch.equal(split[path][name], remote_block[path][name]), (path, name)
    assert all(len(v) == 12 for scores in split.values() for v in scores.values())


def test_a_single_row_whose_clean_state_outweighs_the_plain_path_keeps_the_plain_path(write_doc, tiny_llama, tmp_path):
    """One row cannot be cut into smaller batches: where its clean keys and values alone would hold more than
    the bound allows, the planner declines the mode and says why; positions=true still runs it, within 1e-5.
    The same sweep over a dozen rows (the reads and forwards the plain path holds grow with them) keeps it."""
    doc = sweep_document(str(tiny_llama), layers=[0, 3], positions=[-4, -1])
    assert api.plan(write_doc(doc, ragged_rows(12))).position_reuse
    single = write_doc(doc, ragged_rows(1))  # write_doc writes one rows file: the single row last
    plan = api.plan(single)
    assert not plan.position_reuse
    assert "one row would keep" in plan.position_reuse_why and "positions=true" in plan.position_reuse_why
    declined, forced = api.run(single, out=tmp_path / "a"), api.run(single, out=tmp_path / "b",
                                                                    options={"positions": True})
    assert declined.run["position_reuse"]["used"] is False and declined.run["position_reuse"]["by"] == "planner"
    assert forced.run["position_reuse"]["used"] is True
    for a, b in zip(declined.metrics, forced.metrics):
        for x, y in zip(a.content["values"], b.content["values"]):
            assert x == pytest.approx(y, abs=1e-5)


def test_the_memory_estimate_counts_at_least_the_clean_keys_and_values_an_engine_keeps(write_doc, tiny_llama,
                                                                                      monkeypatch):
    """What the planner and the batching weigh is an estimate from the plan's shapes; it must not undercount
    the clean keys and values a run actually keeps, or the bound it enforces would not hold."""
    from causalab_core.runtime import positions

    plan = api.plan(write_doc(sweep_document(str(tiny_llama), layers=[0, 3], positions=[-4, -1]), ragged_rows(6)))
    kept_bytes = []
    keep = positions.CleanCaches.keep
    monkeypatch.setattr(positions.CleanCaches, "keep", lambda self, name, start, kv: (
        keep(self, name, start, kv), kept_bytes.append(sum(k.nbytes + v.nbytes for k, v in kv)))[0])
    HooksEngine(options=HooksOptions(positions=True)).execute(plan, featurizers=api.featurizer_classes(plan, registry()))
    _, kept, _ = positions.holdings(plan.model, plan.prompts, plan.points)
    batch = positions.rows_per_batch(plan, None)
    assert kept_bytes and max(kept_bytes) <= batch * kept * 4
