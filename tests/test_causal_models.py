"""Data from causal models: a third party's model drives a document; the toy models' splits hold out what they say."""

from __future__ import annotations

import hashlib
import json
import types

import pytest

from causalab_core import api, hookimpl
from causalab_core.causal import generate, solve
from causalab_core.contracts import CausalModel
from causalab_core.document.schema import CausalModelSpec
from causalab_core.errors import DocumentError
from causalab_core.plugins import build_registry, registry
from causalab_testing.data import sweep_document
from causalab_testing.models import COUNTS, DAYS


class WordWeekdays(CausalModel):
    """A third party's causal model, over the tiny test models' word vocabulary."""

    name = "word_weekdays"
    inputs = ("count", "day")
    mechanisms = {"answer": ("count", "day")}

    def sample(self, rng, variable):
        return rng.choice(COUNTS if variable == "count" else DAYS)

    def compute(self, variable, parents):
        return DAYS[(DAYS.index(parents["day"]) + COUNTS.index(parents["count"]) + 1) % 7]

    def prompt(self, values):
        return f"Q : what day is {values['count']} days after {values['day']} ? A :"

    def answer(self, values):
        return " " + values["answer"]

    def split(self, inputs):
        return "test" if (COUNTS.index(inputs["count"]) + DAYS.index(inputs["day"])) % 5 == 0 else "train"


def third_party_registry():
    module = types.ModuleType("causalab_words")
    module.DISTRIBUTION = "causalab-words"
    module.causalab_causal_models = hookimpl(lambda: [WordWeekdays])
    return build_registry(extra=(module,))


def test_a_third_partys_causal_model_generates_the_data_of_a_document_that_runs(tiny_llama, write_doc, tmp_path):
    document = sweep_document(str(tiny_llama), layers=[0, 3], positions=[-1])
    document["data"] = {"causal_model": {"kind": "word_weekdays", "intervene": ["day"], "rows": 12, "split": "train",
                                         "seed": 1}}
    document["metrics"]["iia_day"] = {"kind": "iia", "choices": ["base_answer", "label_day"], "label": "label_day"}
    result = api.run(write_doc(document), out=tmp_path / "o", registry=third_party_registry())
    data = (tmp_path / "o" / "data.jsonl").read_bytes()
    rows = [json.loads(line) for line in data.decode().splitlines()]
    assert len(rows) == 12 and len({json.dumps(r, sort_keys=True) for r in rows}) == 12
    for row in rows:
        assert row["count"] == row["cf_count"] and row["day"] != row["cf_day"]  # only the day was intervened on
        # The label of `day`: the base's count from the counterfactual's day, computed by the model's own mechanism.
        expected = solve(WordWeekdays(), {"count": row["count"], "day": row["cf_day"]})["answer"]
        assert row["label_day"] == " " + expected == row["cf_answer"]  # same count: day and answer labels agree
    record = result.run["data"]
    assert record["causal_model"] == "word_weekdays" and record["provider"].startswith("causalab-words ")
    assert record["sha256"] == hashlib.sha256("\n".join(json.dumps(r, sort_keys=True) for r in rows).encode()).hexdigest()
    assert (tmp_path / "o" / "layers=3,pos=-1" / "iia_day.json").is_file()


@pytest.mark.parametrize("kind,held_out", [
    ("weekdays", lambda s: (s["count"], s["day"])),
    ("entity", lambda s: (s["line"], s["place"])),
])
def test_the_toy_splits_have_no_duplicates_and_share_no_setting(kind, held_out):
    model = registry().get("causal_model", kind)()
    made = {}
    for split, n in (("train", 400), ("test", 60)):
        spec = CausalModelSpec(kind=kind, intervene=list(model.inputs), rows=n, split=split, seed=0)
        rows = generate(model, spec, "$.data.causal_model")
        assert len({json.dumps(r, sort_keys=True) for r in rows}) == n  # no duplicate row
        settings = {held_out({v: r[p + v] for v in model.inputs}) for r in rows for p in ("", "cf_")}
        made[split] = settings
    assert made["train"] and made["test"] and not made["train"] & made["test"]


def test_the_weekdays_test_split_is_what_the_toy_model_never_trained_on():
    from causalab_toy import tasks

    model = registry().get("causal_model", "weekdays")()
    for k, count in enumerate(tasks.COUNTS):
        for d, day in enumerate(tasks.DAYS):
            assert (model.split({"count": count, "day": day}) == "test") == tasks._weekday_test(k, d)


@pytest.mark.parametrize("change,message", [
    ({"intervene": ["colour"]}, "$.data.causal_model.intervene: 'colour' is not an input variable of causal model 'weekdays'"),
    ({"distinct_labels": ["colour"]}, "$.data.causal_model.distinct_labels: 'colour' is not a variable"),
    ({"kind": "moon"}, "unknown causal_model 'moon' at"),
    ({"labels": [["count", "colour"]]}, "$.data.causal_model.labels[0]: 'colour' is not a variable"),
    ({"labels": [["day", "day"]]}, "$.data.causal_model.labels[0]: a set names each variable once"),
    ({"distinct_labels": ["count+day"]}, "$.data.causal_model.distinct_labels: 'count+day' is not a variable"),
    ({"rows": 5000, "split": "test", "intervene": ["count"]}, "$.data.causal_model.rows: causal model 'weekdays' gave only"),
])
def test_a_bad_causal_model_spec_is_one_line(change, message, write_doc):
    document = json.loads(open(api.__file__.replace("causalab_core/api.py", "documents/real/weekdays_layer_sweep.json")).read())
    document["data"]["causal_model"].update(change)
    with pytest.raises(DocumentError) as raised:
        api.plan(write_doc(document))
    assert message in raised.value.one_line() and "\n" not in raised.value.one_line()


def test_an_intervention_on_a_set_of_variables_has_its_own_label():
    """``labels: [[count, day]]``: the base run takes both inputs from the counterfactual run, so its
    answer is the counterfactual's own; taking one input alone gives the arithmetic on the other's value."""
    model = WordWeekdays()
    spec = CausalModelSpec(kind="word_weekdays", intervene=["count", "day"], rows=40, split="train",
                           labels=[["count", "day"]], distinct_labels=["count", "day", "count+day"])
    rows = generate(model, spec, "$.data.causal_model")
    assert len(rows) == 40
    for r in rows:
        assert r["label_count+day"] == r["cf_answer"]
        # by hand: the base day moved on by the counterfactual's count
        assert r["label_count"] == " " + DAYS[(DAYS.index(r["day"]) + COUNTS.index(r["cf_count"]) + 1) % 7]
        assert len({r["base_answer"], r["label_count"], r["label_day"], r["label_count+day"]}) == 4
