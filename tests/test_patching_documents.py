"""What a document can now say about its runs: an input that runs another column's prompt (``columns``), a
read of an intervened run, the direction of activation patching (``direction``), rows a read is taken on
(``where``) and noise in units of a read's spread (``std_of``). Each is checked by what a user sees in the
numbers: two routes to one run give the same bytes, and a hand computation gives the same scale."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from causalab_core import api
from causalab_core.cli import app
from causalab_testing.data import weekday_rows

ROWS = weekday_rows(12, seed=5)
SITE = {"layer": 1, "site": "block_output", "position": -1}


def base_doc(model) -> dict:
    return {"version": "2", "model": {"key": str(model)}, "data": {"path": "rows.jsonl"},
            "inputs": ["base", "counterfactual"], "reads": {}, "writes": {}, "metrics": {}}


def values(out, metric):
    return json.loads((out / f"{metric}.json").read_text())["values"]


def refused(write_doc, doc, rows=ROWS) -> str:
    result = CliRunner().invoke(app, ["plan", str(write_doc(doc, rows))])
    assert result.exit_code in (1, 2) and "\n" not in result.stderr.strip(), result.output
    return result.stderr.strip()


def test_an_input_can_run_another_columns_prompt(write_doc, tiny_llama, tmp_path):
    """`columns`: `again` is the base prompt run a second time, as an input of its own; scored alone it gives
    the base run's bytes, and a write into it leaves the base run as it was."""
    doc = base_doc(tiny_llama)
    doc["inputs"] = ["base", "again"]
    doc["columns"] = {"again": "base"}
    doc["writes"] = {"zero": {"input": "again", **SITE, "intervention": {"kind": "zero"}}}
    doc["metrics"] = {"p_base": {"kind": "p_answer", "answer": "base_answer", "input": "base"},
                      "p_again": {"kind": "p_answer", "answer": "base_answer", "input": "again"}}
    out = tmp_path / "o"
    api.run(write_doc(doc, ROWS), out=out)
    plain = dict(doc, inputs=["base"], columns={}, writes={}, metrics={"p_base": doc["metrics"]["p_base"]})
    api.run(write_doc(plain, name="plain.json"), out=tmp_path / "plain")
    assert values(out, "p_base") == values(tmp_path / "plain", "p_base")
    assert values(out, "p_again") != values(out, "p_base")  # the zero ablation moved the second run only


def test_a_read_of_an_intervened_run_carries_the_intervention(write_doc, tiny_llama, tmp_path):
    """A read on an input that a write changes records that input's intervened run: patching the last
    block's output at the last token of that run into another input reproduces the intervened run's scores
    (to float32 rounding: the two prompts' batches differ in shape), and the runs go in the order the reads
    need whatever the document's order."""
    doc = base_doc(tiny_llama)
    doc["inputs"] = ["counterfactual", "base"]  # written from a read of `base`, which is itself written
    last = {"layer": 3, "site": "block_output", "position": -1}
    doc["reads"] = {"after": {"input": "base", **last}}
    doc["writes"] = {
        "noise": {"input": "base", "layer": 0, "site": "block_input", "position": -4,
                  "intervention": {"kind": "noise", "scale": 2.0}},
        "copy": {"input": "counterfactual", "source": "after", **last},
    }
    doc["metrics"] = {"p_noised": {"kind": "p_answer", "answer": "base_answer", "input": "base"},
                      "p_copied": {"kind": "p_answer", "answer": "base_answer", "input": "counterfactual"}}
    path = write_doc(doc, ROWS)
    assert [step.input for step in api.plan(path).points[0].steps] == ["base", "counterfactual"]
    for engine in ("hooks", "nnterp"):
        api.run(path, out=tmp_path / engine, engine=engine)
        assert values(tmp_path / engine, "p_copied") == pytest.approx(values(tmp_path / engine, "p_noised"),
                                                                      rel=1e-5, abs=1e-7), engine
    # Without the noise, the copied run is the clean one: the read did carry the intervention.
    clean = tmp_path / "clean"
    api.run(write_doc(dict(doc, writes={"copy": doc["writes"]["copy"]}), name="clean.json"), out=clean)
    assert values(clean, "p_copied") != pytest.approx(values(tmp_path / "hooks", "p_copied"), rel=1e-2)


def test_writes_that_read_each_others_runs_are_refused(write_doc, tiny_llama):
    doc = base_doc(tiny_llama)
    doc["reads"] = {"from_base": {"input": "base", **SITE}, "from_cf": {"input": "counterfactual", **SITE}}
    doc["writes"] = {"a": {"input": "base", "source": "from_cf", **SITE},
                     "b": {"input": "counterfactual", "source": "from_base", **SITE}}
    doc["metrics"] = {"p": {"kind": "p_answer", "answer": "base_answer", "input": "base"}}
    message = refused(write_doc, doc)
    assert "$.writes" in message and "no order runs them" in message


def direction_doc(model, patch: str) -> dict:
    """Denoise or noise the base run's last token, the corruption being the counterfactual prompt."""
    doc = base_doc(model)
    doc["direction"] = {"patch": patch, "clean": "base", "corrupted": "counterfactual"}
    doc["reads"] = {"act": {"input": "donor", **SITE}}
    doc["writes"] = {"patch": {"input": "recipient", "source": "act", **SITE}}
    doc["metrics"] = {"ld": {"kind": "logit_diff", "target": "base_answer", "other": "cf_answer"}}
    return doc


def swap_doc(model, into: str, source: str) -> dict:
    doc = base_doc(model)
    doc["reads"] = {"act": {"input": source, **SITE}}
    doc["writes"] = {"patch": {"input": into, "source": "act", **SITE}}
    doc["metrics"] = {"ld": {"kind": "logit_diff", "target": "base_answer", "other": "cf_answer"}}
    return doc


@pytest.mark.parametrize("patch,into,source", [("denoising", "counterfactual", "base"),
                                                ("noising", "base", "counterfactual")])
def test_a_direction_names_the_inputs_by_role(write_doc, tiny_llama, tmp_path, patch, into, source):
    """Denoising patches the clean run's values into the corrupted run, noising the reverse, and the metric
    scores the recipient: the same bytes as the document written with the inputs spelt out."""
    by_role, spelt = tmp_path / "role", tmp_path / "spelt"
    api.run(write_doc(direction_doc(tiny_llama, patch), ROWS), out=by_role)
    api.run(write_doc(swap_doc(tiny_llama, into, source), name="spelt.json"), out=spelt)
    assert values(by_role, "ld") == values(spelt, "ld")
    written = json.loads((by_role / "document.json").read_text())
    assert written["writes"]["patch"]["input"] == into and written["direction"]["patch"] == patch


@pytest.mark.parametrize("edit,needles", [
    (lambda d: d.pop("direction"), ["$.reads.act.input", "'donor' is a role under $.direction"]),
    (lambda d: d["direction"].update(corrupted="base"), ["$.direction.corrupted", "one input"]),
    (lambda d: d["direction"].update(clean="nobody"), ["$.direction.clean", "'nobody' is not one of the inputs"]),
    (lambda d: d["direction"].update(patch="both"), ["$.direction.patch", "denoising", "noising"]),
    (lambda d: d.update(columns={"other": "base"}), ["$.columns.other", "'other' is not one of the inputs"]),
])
def test_a_bad_direction_or_column_is_one_line(write_doc, tiny_llama, edit, needles):
    doc = direction_doc(tiny_llama, "denoising")
    edit(doc)
    message = refused(write_doc, doc)
    for needle in needles:
        assert needle in message, message


def test_a_column_no_row_has_is_named(write_doc, tiny_llama):
    doc = swap_doc(tiny_llama, "base", "counterfactual")
    doc["inputs"] = ["base", "counterfactual", "again"]
    doc["columns"] = {"again": "prompt"}
    message = refused(write_doc, doc)
    assert "$.columns.again" in message and "no column 'prompt'" in message


def test_a_filtered_read_gives_a_statistic_without_making_rows_ineligible(write_doc, tiny_llama, tmp_path):
    """`where` keeps a read to the rows whose column holds a value; a mean over it leaves every row scored
    (a row missing from a statistic still has its own value), and the plan names the others `row_excluded`."""
    doc = base_doc(tiny_llama)
    monday = next(r["day"] for r in ROWS)
    doc["reads"] = {"those": {"input": "counterfactual", **SITE, "where": {"day": monday}}}
    doc["writes"] = {"mean": {"input": "base", "source": "those", **SITE, "intervention": {"kind": "mean"}}}
    doc["metrics"] = {"p": {"kind": "p_answer", "answer": "base_answer"}}
    plan = api.plan(write_doc(doc, ROWS))
    record = next(r for r in plan.points[0].positions if r.name == "those")
    assert [reason is None for reason in record.reasons] == [r["day"] == monday for r in ROWS]
    assert set(record.reasons) == {None, "row_excluded"}
    assert all(plan.points[0].eligible)
    out = tmp_path / "o"
    api.run(write_doc(doc, ROWS), out=out)
    assert None not in values(out, "p")
    # A swap's source must have a value on every row: the filtered read is refused there.
    doc["writes"] = {"swap": {"input": "base", "source": "those", **SITE}}
    message = refused(write_doc, doc)
    assert "'those' has no value on row(s)" in message
    doc["reads"]["those"]["where"] = {"weekday": "Monday"}
    assert "$.reads.those.where.weekday: no row has a column 'weekday'" in refused(write_doc, doc)


def test_noise_in_units_of_a_reads_spread_is_that_many_standard_deviations(write_doc, tiny_llama, tmp_path):
    """`std_of`: noise of scale 3 in units of the embeddings' spread at the day's token is the same run as
    noise of scale 3 x that spread (the standard deviation computed here from the model's own embeddings)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    at_day = {"layer": 0, "site": "block_input", "position": -4}
    doc = base_doc(tiny_llama)
    doc["reads"] = {"emb": {"input": "counterfactual", **at_day}}
    doc["writes"] = {"noise": {"input": "base", **at_day,
                               "intervention": {"kind": "noise", "scale": 3, "std_of": "emb", "seed": 2}}}
    doc["metrics"] = {"p": {"kind": "p_answer", "answer": "base_answer"}}
    api.run(write_doc(doc, ROWS), out=tmp_path / "relative")

    model = AutoModelForCausalLM.from_pretrained(tiny_llama)
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    ids = [tokenizer(r["counterfactual"])["input_ids"][-4] for r in ROWS]
    spread = model.get_input_embeddings().weight[ids].detach().double().std().item()
    absolute = json.loads(json.dumps(doc))
    absolute["writes"]["noise"]["intervention"] = {"kind": "noise", "scale": 3 * spread, "seed": 2}
    absolute["reads"] = {}
    # Position reuse (which a spread rules out for the first run) computes the same to rounding, not bytes.
    api.run(write_doc(absolute, name="absolute.json"), out=tmp_path / "absolute", options={"positions": False})
    assert values(tmp_path / "relative", "p") == values(tmp_path / "absolute", "p")


def test_a_spread_that_cannot_scale_noise_is_refused(write_doc, tiny_llama):
    doc = base_doc(tiny_llama)
    doc["reads"] = {"emb": {"input": "counterfactual", "layer": 0, "site": "head", "head": 0, "position": -4}}
    doc["writes"] = {"noise": {"input": "base", "layer": 0, "site": "block_input", "position": -4,
                               "intervention": {"kind": "noise", "scale": 3, "std_of": "emb"}}}
    doc["metrics"] = {"p": {"kind": "p_answer", "answer": "base_answer"}}
    message = refused(write_doc, doc)
    assert "$.writes.noise.intervention.std_of" in message and "not in the site's units" in message
    doc["reads"]["emb"] = {"input": "counterfactual", "layer": 0, "site": "block_input",
                           "position": {"variable": "nowhere"}}
    message = refused(write_doc, doc)
    assert "$.writes.noise.intervention.std_of" in message and "resolved on no row" in message
    doc["reads"]["emb"] = {"input": "base", "layer": 0, "site": "block_input", "position": -4}
    assert "is taken from 'base', the input this write changes" in refused(write_doc, doc)
    doc["writes"]["noise"]["intervention"]["std_of"] = "absent"
    assert "$.writes.noise.intervention.std_of: no read named 'absent'" in refused(write_doc, doc)


def test_documents_without_the_new_keys_plan_to_the_same_bytes(write_doc, tiny_llama):
    """None of `columns`, `direction`, `where` appears in the plan's copy of a document that does not use
    them (so its digest and output files stay what they were)."""
    plan = api.plan(write_doc(swap_doc(tiny_llama, "base", "counterfactual"), ROWS))
    for document in (plan.document, plan.points[0].document):
        assert "columns" not in document and "direction" not in document
        assert all("where" not in read for read in document["reads"].values())


def test_the_readmes_causal_tracing_example_runs_both_ways(tmp_path):
    """documents/README.md's patching-direction example, completed with the entity model and 20 rows: restoring
    the last token's residual at the last layer brings the clean answer back when denoising, and patching the
    noised value there takes it away when noising."""
    from pathlib import Path

    text = (Path(__file__).parent.parent / "documents" / "README.md").read_text()
    fragment = text.split("#### Patching direction")[1].split("```json")[1].split("```")[0]
    doc = {"version": "2", "model": {"key": "causalab-toy/entity"},
           "data": {"causal_model": {"kind": "entity", "intervene": ["line", "place"], "rows": 20,
                                     "split": "test", "seed": 0}},
           **json.loads("{" + fragment + "}"), "sweep": {"layer": [3]}}
    means = {}
    for patch in ("denoising", "noising"):
        doc["direction"]["patch"] = patch
        path = tmp_path / f"{patch}.json"
        path.write_text(json.dumps(doc))
        api.run(path, out=tmp_path / patch)
        means[patch] = json.loads((tmp_path / patch / "layer=3" / "p.json").read_text())["summary"]["mean"]
    assert means["denoising"] > 0.9 and means["noising"] < 0.2, means


def test_a_site_can_be_swept_like_a_layer(write_doc, tiny_llama, tmp_path):
    """`"site": {"sweep": "site"}`: one document ablates attention and MLP outputs in turn, and each point is the
    run its own document with that site gives."""
    doc = base_doc(tiny_llama)
    doc["writes"] = {"zero": {"input": "base", "layer": 1, "site": {"sweep": "site"}, "position": -1,
                              "intervention": {"kind": "zero"}}}
    doc["metrics"] = {"p": {"kind": "p_answer", "answer": "base_answer"}}
    doc["sweep"] = {"site": ["attn_output", "mlp_output"]}
    api.run(write_doc(doc, ROWS), out=tmp_path / "swept")
    for site in ("attn_output", "mlp_output"):
        one = json.loads(json.dumps(doc))
        one["writes"]["zero"]["site"] = site
        one["sweep"] = {}
        api.run(write_doc(one, name=f"{site}.json"), out=tmp_path / site)
        assert values(tmp_path / "swept" / f"site={site}", "p") == values(tmp_path / site, "p")
    doc["sweep"]["site"] = ["attn_output", "residual"]
    message = refused(write_doc, doc)
    assert "$.sweep.site[1] (used by $.writes.zero.site): expected a site (block_input" in message
    doc["sweep"]["site"] = ["attn_output", "head"]
    assert "$.writes.zero.head: `head` is required with site 'head'" in refused(write_doc, doc)
