"""Edge and path patching (the circuits issue): against a plain-torch reference on three families, the same
bytes on ``hooks`` and ``nnterp``, and bad edges refused in one line before any weights load.

The reference (``edge_reference.py``) rebuilds each row's forward from the graph's definition: every node's
input is the sum of the terms written before it, attention is computed head by head from its own query, key
and value inputs. Tolerance 1e-5 (float32): it adds terms in its own order and runs rows alone; a wrong edge
moves a logit difference by 1e-3 to 1.
"""

from __future__ import annotations

import pytest
import torch

from causalab_core import api
from causalab_core.errors import PlanError
from causalab_testing import families, models
from causalab_testing.data import weekday_rows

from tests.edge_reference import EdgeReference

TOL = 1e-5
FAMILIES = ("llama", "qwen2", "gpt2")  # llama and qwen2 with grouped-query attention; gpt2's fused c_attn


def key_of(family: str) -> str:
    return str(models.ensure("tiny-gpt2") if family == "gpt2" else families.ensure(family))


def rows():
    """Weekday rows of three lengths (a prefix on both prompts of a row: an edge swap takes every position)."""
    out = weekday_rows(6, seed=7)
    for i, row in enumerate(out):
        row["base"], row["counterfactual"] = "hello " * (i % 3) + row["base"], "hello " * (i % 3) + row["counterfactual"]
    return out


def edges_of(family: str) -> list[list[str]]:
    """Every kind of sender (input, head, MLP) into every kind of input (q, k, v, MLP, logits), two senders
    sharing one module, a key/value group under grouped-query attention."""
    group = "a1.h1" if family == "gpt2" else "a1.kv1"
    return [["input", "a1.h0<q>"], ["a0.h2", f"{group}<k>"], ["a0.h1", f"{group}<k>"], ["m0", f"{group}<v>"],
            ["a0.h1", "m1"], ["a1.h3", "m1"], ["m0", "logits"], ["a1.h2", "logits"], ["input", "a2.h3<q>"]]


def document(family: str, patch: dict) -> dict:
    return {"version": "2", "model": {"key": key_of(family)}, "data": {"rows": rows()},
            "edges": {"p": {"input": "base", **patch}},
            "metrics": {"ld": {"kind": "logit_diff", "target": "cf_answer", "other": "base_answer"}}}


@pytest.fixture(scope="module", params=FAMILIES)
def reference(request):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    key = key_of(request.param)
    model = AutoModelForCausalLM.from_pretrained(key, attn_implementation="eager")
    return request.param, EdgeReference(model), AutoTokenizer.from_pretrained(key)


def logit_diffs(ref: EdgeReference, tokenizer, patched) -> list[float]:
    """The reference's logit difference per row; ``patched(base ids, counterfactual ids)`` gives the logits."""
    out = []
    for row in rows():
        base, cf = (tokenizer(row[k])["input_ids"] for k in ("base", "counterfactual"))
        target, other = (tokenizer(row[k], add_special_tokens=False)["input_ids"][-1] for k in ("cf_answer", "base_answer"))
        logits = patched(base, cf)
        out.append((logits[target] - logits[other]).item())
    return out


def engine_values(family: str, patch: dict) -> dict[str, list[float]]:
    return {engine: api.run(document(family, patch), engine=engine).rows["value"].tolist()
            for engine in ("hooks", "nnterp")}


def agree(found: dict[str, list[float]], expected: list[float]) -> None:
    assert found["hooks"] == found["nnterp"]  # byte for byte
    assert max(abs(a - b) for a, b in zip(found["hooks"], expected)) < TOL
    plain = None
    assert expected != plain


def test_an_edge_swap_is_the_reference_on_every_engine(reference):
    family, ref, tokenizer = reference
    edges = edges_of(family)
    expected = logit_diffs(ref, tokenizer, lambda b, c: ref.edge_patched(b, edges, ref.run(c)[1]))
    clean = logit_diffs(ref, tokenizer, lambda b, c: ref.run(b)[0])
    assert max(abs(a - b) for a, b in zip(expected, clean)) > 1e-2  # the patch moves the answer
    agree(engine_values(family, {"source": "counterfactual", "edges": edges}), expected)


def test_zero_and_mean_patches_are_the_reference(reference):
    family, ref, tokenizer = reference
    edges = edges_of(family)
    prompts = [tokenizer(r["counterfactual"])["input_ids"] for r in rows()]
    runs = [ref.run(p)[1] for p in prompts]
    mean = {node: torch.cat([r[node] for r in runs]).mean(0) for node in runs[0]}
    zero = {node: torch.zeros(t.shape[-1]) for node, t in runs[0].items()}
    for kind, terms in (("zero", lambda: zero), ("mean", lambda: mean)):
        expected = logit_diffs(ref, tokenizer, lambda b, c: ref.edge_patched(b, edges, terms()))
        patch = {"edges": edges, "intervention": {"kind": kind}, **({"source": "counterfactual"} if kind == "mean" else {})}
        agree(engine_values(family, patch), expected)


def test_a_path_patch_freezes_everything_but_the_paths_through_its_receivers(reference):
    """Receivers in three layers: the later ones read the clean stream, not the one the earlier receivers'
    patched outputs changed; what they compute then flows on."""
    family, ref, tokenizer = reference
    receivers = ["a1.h2<q>", "m1", "a2.h0<q>", "logits"]
    expected = logit_diffs(ref, tokenizer,
                           lambda b, c: ref.path_patched(b, "a0.h1", set(receivers), ref.run(c)[1]["a0.h1"]))
    one_edge_each = logit_diffs(ref, tokenizer, lambda b, c: ref.edge_patched(
        b, [["a0.h1", r] for r in receivers], ref.run(c)[1]))
    assert max(abs(a - b) for a, b in zip(expected, one_edge_each)) > 1e-4  # freezing is not edge patching
    agree(engine_values(family, {"source": "counterfactual",
                                 "path": {"sender": "a0.h1", "receivers": receivers}}), expected)


def test_two_heads_of_one_layer_read_in_one_nnterp_run_are_each_their_own():
    """nnterp once gave every read of one module (two heads of a layer) the first read's head."""
    doc = {"version": "2", "model": {"key": key_of("llama")}, "data": {"rows": rows()},
           "reads": {f"h{h}": {"input": "counterfactual", "layer": 1, "site": "head", "head": h, "position": -1}
                     for h in (0, 3)},
           "writes": {f"w{h}": {"input": "base", "source": f"h{h}", "layer": 1, "site": "head", "head": h,
                                "position": -1} for h in (0, 3)},
           "metrics": {"ld": {"kind": "logit_diff", "target": "cf_answer", "other": "base_answer"}}}
    found = {engine: api.run(doc, engine=engine).rows["value"].tolist() for engine in ("hooks", "nnterp")}
    assert found["hooks"] == found["nnterp"]


BAD = [
    ({"source": "counterfactual", "edges": [["a9.h0", "logits"]]}, r"\$\.edges\.p\.edges\[0\]\[0\]: 'a9\.h0' is no node"),
    ({"source": "counterfactual", "edges": [["a1.h0", "a0.h2<q>"]]}, r"\$\.edges\.p\.edges\[0\]: 'a1\.h0' is computed after 'a0\.h2<q>'"),
    ({"source": "counterfactual", "edges": [["a0.h0", "a1.h0<k>"]]}, r"\$\.edges\.p\.edges\[0\]: 'a1\.h0<k>' is no node input .*head 0's is a1\.kv0<k>"),
    ({"source": "counterfactual", "edges": [["a0.h0", "m0"], ["a0.h0", "m0"]]}, r"\$\.edges\.p: an edge is listed twice"),
    ({"edges": [["a0.h0", "m0"]]}, r"\$\.edges\.p\.source: a swap patch takes"),
    ({"source": "counterfactual", "edges": [["a0.h0", "m0"]], "intervention": {"kind": "zero"}}, r"\$\.edges\.p\.source: a zero patch reads no run"),
    ({"source": "counterfactual", "edges": [["a0.h0", "m0"]], "intervention": {"kind": "noise"}}, r"\$\.edges\.p\.intervention\.kind: an edge is patched by swap, mean, zero"),
    ({"source": "counterfactual", "path": {"sender": "logits", "receivers": ["m1"]}}, r"\$\.edges\.p\.path\.sender: 'logits' is no node"),
    ({"source": "counterfactual", "path": {"sender": "m1", "receivers": ["a1.h0<q>"]}}, r"\$\.edges\.p\.path\.receivers\[0\]: 'm1' is computed after"),
    ({"source": "base", "edges": [["a0.h0", "m0"]]}, r"\$\.edges\.p\.source: 'base' is the input this patch changes"),
    ({"source": "counterfactual"}, r"\$\.edges\.p: .*give `edges` or `path`"),
]


@pytest.mark.parametrize("patch, message", BAD)
def test_a_bad_edge_patch_is_one_line_before_any_weights(patch, message, monkeypatch):
    import transformers

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("weights were loaded"))
    with pytest.raises(Exception, match=message) as caught:
        api.plan(document("llama", patch))
    assert "\n" not in str(caught.value)


def test_prompts_of_other_lengths_and_uncovered_families_are_refused(monkeypatch):
    doc = document("llama", {"source": "counterfactual", "edges": [["a0.h0", "m0"]]})
    doc["data"]["rows"][2]["counterfactual"] = "hi " + doc["data"]["rows"][2]["counterfactual"]
    with pytest.raises(PlanError, match=r"\$\.edges\.p\.source: an edge swap takes every position .*rows\[2\]': \(16, 15\)"):
        api.plan(doc)
    doc = document("llama", {"source": "counterfactual", "edges": [["a0.h0", "m0"]]})
    doc["model"]["key"] = str(families.ensure("gptj"))
    with pytest.raises(PlanError, match=r"\$\.model\.key: .*the computation graph covers .* not 'gptj'"):
        api.plan(doc)


def test_a_sweep_over_edge_sets_patches_each_alone():
    """Exhaustive edge scores as a sweep: one point per edge, each the single-edge patch."""
    edges = edges_of("llama")[:3]
    doc = document("llama", {"source": "counterfactual", "edges": {"sweep": "edge"}})
    doc["sweep"] = {"edge": [[e] for e in edges]}
    swept = api.run(doc).rows
    for i, edge in enumerate(edges):
        alone = api.run(document("llama", {"source": "counterfactual", "edges": [edge]})).rows["value"].tolist()
        assert swept[swept["point"] == swept["point"].unique()[i]]["value"].tolist() == alone


CIRCUIT_BAD = [
    ({"top": 500}, r"\$\.circuit\.select\.top: 500 edges is more than the graph's 110"),
    ({"connected": 111}, r"\$\.circuit\.select\.connected: 111 edges is more than the graph's 110"),
    ({"edges": [["a0.h0", "a0.h1<q>"]]}, r"\$\.circuit\.select\.edges\[0\]: \['a0\.h0', 'a0\.h1<q>'\] is no edge"),
    ({"edges": [["input", "a0.h0<q>"], ["a1.h2", "logits"]]}, r"\$\.circuit\.select\.edges: no path of these edges leads"),
]


@pytest.mark.parametrize("select, message", CIRCUIT_BAD)
def test_a_circuit_the_graph_cannot_hold_is_one_line_before_any_weights(select, message, monkeypatch):
    import transformers

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("weights were loaded"))
    doc = {"version": "2", "model": {"key": "causalab-toy/induction"},
           "data": {"rows": [{"base": "t1 t2 t1", "counterfactual": "t3 t4 t3", "base_answer": " t2",
                              "cf_answer": " t4"}]},
           "edges": {"e": {"input": "base", "source": "counterfactual", "edges": "each"}},
           "metrics": {"ld": {"kind": "logit_diff", "target": "base_answer", "other": "cf_answer"}},
           "circuit": {"patch": "e", "select": select}}
    with pytest.raises(PlanError, match=message):
        api.plan(doc)
    doc["circuit"] = {"patch": "e", "select": {"top": 3}, "curve": [1, 200]}
    with pytest.raises(PlanError, match=r"\$\.circuit\.curve\[1\]: 200 edges is more than the graph's 110"):
        api.plan(doc)


def test_a_circuit_of_ones_own_is_measured(tmp_path):
    """The known induction circuit given by hand: its faithfulness beside the scores, and the same whichever
    engine runs it."""
    from causalab_toy import circuits

    doc = {"version": "2", "model": {"key": "causalab-toy/induction"}, "data": {"rows": circuits.rows("induction", 6, "test")},
           "edges": {"e": {"input": "base", "source": "counterfactual", "edges": "each"}},
           "metrics": {"ld": {"kind": "logit_diff", "target": "base_answer", "other": "cf_answer"}},
           "estimate": {"method": "attribution"},
           "circuit": {"patch": "e", "select": {"edges": [["input", "a0.h3<v>"], ["a0.h3", "a1.h2<k>"],
                                                          ["input", "a1.h2<v>"], ["a1.h2", "logits"]]},
                       "curve": [4]}}
    found = {engine: api.run(doc, engine=engine).circuit for engine in ("hooks", "nnterp")}
    assert found["hooks"] == found["nnterp"] and found["hooks"]["size"] == 4
    assert 0 < found["hooks"]["faithfulness"]["share"] < 1
