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
