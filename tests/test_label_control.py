"""The shuffled-label control of a trained featurizer (`train.labels: "shuffled"`): the same rows, rank and steps,
the labels permuted among the rows; swept beside the real training, planned without weights."""

from __future__ import annotations

import json
from collections import Counter

from typer.testing import CliRunner

from causalab_core import api
from causalab_core.cli import app
from causalab_testing.data import sweep_document, weekday_rows


def das_document(model, labels) -> dict:
    doc = sweep_document(str(model), layers=[1], positions=[-1])
    doc["featurizers"] = {"das": {"kind": "das", "rank": 2, "train": {
        "data": {"path": "rows.jsonl"}, "label": "cf_answer", "epochs": 1, "seed": 3,
        **({} if labels is None else {"labels": labels})}}}
    doc["writes"]["patch"]["featurizer"] = "das"
    return doc


def fits(plan):
    return {dict(point.values).get("labels", "as_given"): next(s for s in point.steps if s.kind == "fit")
            for point in plan.points}


def test_the_control_trains_on_the_same_labels_permuted(write_doc, tiny_llama):
    doc = das_document(tiny_llama, {"sweep": "labels"})
    doc["sweep"]["labels"] = ["as_given", "shuffled"]
    found = fits(api.plan(write_doc(doc, weekday_rows(40, seed=1))))
    real, control = found["as_given"], found["shuffled"]
    assert Counter(real.labels) == Counter(control.labels) and real.labels != control.labels
    assert real.prompts == control.prompts and (real.epochs, real.lr, real.seed) == (control.epochs, control.lr,
                                                                                       control.seed)
    # A control's trained file says what it is, so it cannot be loaded as the real featurizer.
    assert control.identity["labels"] == "shuffled" and "labels" not in real.identity


def test_without_the_option_the_plan_is_what_it_was(write_doc, tiny_llama):
    plain = api.plan(write_doc(das_document(tiny_llama, None), weekday_rows(40, seed=1)))
    given = api.plan(write_doc(das_document(tiny_llama, "as_given"), name="given.json"))
    assert "labels" not in plain.points[0].document["featurizers"]["das"]["train"]
    assert fits(plain)["as_given"].labels == fits(given)["as_given"].labels


def test_a_bad_label_order_is_one_line(write_doc, tiny_llama):
    doc = das_document(tiny_llama, {"sweep": "labels"})
    doc["sweep"]["labels"] = ["as_given", "reversed"]
    result = CliRunner().invoke(app, ["plan", str(write_doc(doc, weekday_rows(8)))])
    assert result.exit_code == 2 and "\n" not in result.stderr.strip()
    assert '$.sweep.labels[1] (used by $.featurizers.das.train.labels): expected "as_given" or "shuffled"' \
        in result.stderr, result.stderr
    assert json.dumps("reversed") in result.stderr or "'reversed'" in result.stderr


def _refused(write_doc, doc, rows) -> str:
    result = CliRunner().invoke(app, ["plan", str(write_doc(doc, rows))])
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1
    return result.stderr


def test_a_shuffle_that_changes_no_label_is_refused_not_run(write_doc, tiny_llama):
    """A control that cannot differ from what it controls: one training row, or rows of a single label."""
    one = _refused(write_doc, das_document(tiny_llama, "shuffled"), weekday_rows(1))
    assert ('$.featurizers.das.train.labels: "shuffled" leaves every label as given (1 training row), so the '
            "control would train exactly as the unshuffled run") in one
    rows = [r for r in weekday_rows(80, seed=1) if r["cf_answer"] == weekday_rows(80, seed=1)[0]["cf_answer"]]
    assert len(rows) > 1
    same = _refused(write_doc, das_document(tiny_llama, "shuffled"), rows)
    assert f"(all {len(rows)} training rows have one label)" in same


def test_a_subspace_as_wide_as_the_site_is_refused(write_doc, tiny_llama):
    """Rank = width: every rotation swaps the whole site, trained, random or on shuffled labels alike."""
    doc = das_document(tiny_llama, "shuffled")
    doc["featurizers"]["das"]["rank"] = 32
    line = _refused(write_doc, doc, weekday_rows(8))
    assert "$.featurizers.das: `rank` 32 is the whole site (width 32): every rotation swaps all of it" in line
