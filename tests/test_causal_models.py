"""Data from causal models: a third party's model drives a document; the toy models' splits hold out what they say."""

from __future__ import annotations

import hashlib
import json
import types
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field, model_validator

from causalab_core import api, hookimpl
from causalab_core.document.causal import generate, solve
from causalab_core.plugins.contracts import CausalModel
from causalab_core.document.schema import CausalModelSpec
from causalab_core.errors import DocumentError
from causalab_core.plugins.registry import build_registry, registry
from causalab_testing.conformance import CausalModelConformance
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
    from causalab_toy import tasks, weekday_split

    model = registry().get("causal_model", "weekdays")()
    for k, count in enumerate(tasks.COUNTS):
        for d, day in enumerate(tasks.DAYS):
            assert (model.split({"count": count, "day": day}) == "test") == tasks._weekday_test(k, d)
            assert model.split({"count": count, "day": day}) == weekday_split(count, day)  # the public one


@pytest.mark.parametrize("change,message", [
    ({"intervene": ["colour"]}, "$.data.causal_model.intervene: 'colour' is not an input variable of causal model 'weekdays'"),
    ({"distinct_labels": ["colour"]}, "$.data.causal_model.distinct_labels: 'colour' is not a variable"),
    ({"kind": "moon"}, "unknown causal_model 'moon' at"),
    ({"labels": [["count", "colour"]]}, "$.data.causal_model.labels[0]: 'colour' is not a variable"),
    ({"labels": [["day", "day"]]}, "$.data.causal_model.labels[0]: a set names each variable once"),
    ({"distinct_labels": ["count+day"]}, "$.data.causal_model.distinct_labels: 'count+day' is not a variable"),
    ({"rows": 5000, "split": "test", "intervene": ["count"], "distinct_labels": []},
     "$.data.causal_model.rows: causal model 'weekdays' gave only"),
    # the filter, not the model, left nothing: the line says so (the day's label is the base answer when only the
    # count changes)
    ({"rows": "all", "intervene": ["count"], "distinct_labels": ["day"]},
     "$.data.causal_model.distinct_labels: keeps none of the "),
    ({"rows": 20, "intervene": ["count"], "distinct_labels": ["day"]},
     "$.data.causal_model.distinct_labels: keeps none of the "),
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


class TestWordWeekdaysConformance(CausalModelConformance):
    @pytest.fixture
    def causal_model(self):
        return WordWeekdays()


def test_a_variable_named_answer_keeps_its_values_beside_the_answer_texts():
    """``cf_answer`` is the counterfactual's answer text: the variable ``answer`` is written as ``var_answer`` and
    ``cf_var_answer`` (its counterfactual value used to be overwritten by the text); its label keeps its name."""
    spec = CausalModelSpec(kind="word_weekdays", intervene=["day"], rows=20, split="train")
    rows = generate(WordWeekdays(), spec, "$.data.causal_model")
    for r in rows:
        assert r["cf_answer"] == " " + r["cf_var_answer"] and r["base_answer"] == " " + r["var_answer"]
        assert r["label_answer"] == r["cf_answer"] and "answer" not in r
        assert {"day", "cf_day", "count", "cf_count", "label_day", "label_count"} <= set(r)


class Clashing(WordWeekdays):
    name = "clashing"


@pytest.mark.parametrize("inputs,mechanisms,columns", [
    (("count", "day"), {"base": ("count", "day")}, ("var_base", "cf_var_base")),  # a prompt's column
    (("count", "day"), {"counterfactual": ("count", "day")}, ("var_counterfactual", "cf_var_counterfactual")),
    (("count", "day"), {"base_answer": ("count", "day")}, ("var_base_answer", "cf_var_base_answer")),
    (("count", "day", "label_day"), {"answer": ("count", "day")}, ("var_label_day", "cf_var_label_day")),  # a label's
])
def test_a_variable_taking_a_column_of_the_row_is_renamed(inputs, mechanisms, columns):
    from causalab_core.document.causal import value_columns

    model = type("Renamed", (Clashing,), {"inputs": inputs, "mechanisms": mechanisms})()
    renamed = mechanisms if "label_day" not in inputs else {"label_day": None}
    assert value_columns(model)[next(iter(renamed))] == columns
    assert value_columns(model)["day"] == ("day", "cf_day")


@pytest.mark.parametrize("inputs,message", [
    (("count", "day", "cf_day"), "variable 'cf_day' would write its value to 'cf_day', which is a value column of "
                                 "variable 'day'; rename the variable"),
    (("count", "day", "var_answer"), "variable 'answer' would write its value to 'var_answer', which is a value "
                                     "column of variable 'var_answer'; rename the variable"),
])
def test_a_variable_clash_renaming_cannot_undo_is_one_line_naming_model_and_variable(inputs, message, tiny_llama,
                                                                                     write_doc):
    from causalab_core.errors import PluginError

    model = type("Shadow", (Clashing,), {"inputs": inputs})
    module = types.ModuleType("causalab_shadow")
    module.causalab_causal_models = hookimpl(lambda: [model])
    document = sweep_document(str(tiny_llama), layers=[0], positions=[-1])
    document["data"] = {"causal_model": {"kind": "clashing", "intervene": ["day"], "rows": 4, "split": "train"}}
    path = write_doc(document)
    with pytest.raises(PluginError) as raised:
        api.plan(path, registry=build_registry(extra=(module,)))
    assert raised.value.one_line() == f"PluginError: {path}: $.data.causal_model: causal model 'clashing': {message}"


class DepthParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    depth: int = Field(1, ge=1)
    wide: bool = False

    @model_validator(mode="after")
    def _deep_needs_wide(self):
        if self.depth > 3 and not self.wide:
            raise ValueError("depth above 3 needs wide=true")
        return self


class Deep(WordWeekdays):
    name = "deep"
    Params = DepthParams


@pytest.mark.parametrize("extra,where,message", [
    ({"depth": 5}, "$.data.causal_model", "depth above 3 needs wide=true"),  # a model validator: no key
    ({"depth": 0}, "$.data.causal_model.depth", "Input should be greater than or equal to 1 (got 0)"),
    ({"wide": "very"}, "$.data.causal_model.wide", "Input should be a valid boolean"),
    ({"dept": 2}, "$.data.causal_model.dept", "unknown key"),
])
def test_causal_model_parameters_are_refused_at_their_json_path(extra, where, message, tiny_llama, write_doc):
    module = types.ModuleType("causalab_deep")
    module.causalab_causal_models = hookimpl(lambda: [Deep])
    document = sweep_document(str(tiny_llama), layers=[0], positions=[-1])
    document["data"] = {"causal_model": {"kind": "deep", "intervene": ["day"], "rows": 4, "split": "train", **extra}}
    path = write_doc(document)
    with pytest.raises(DocumentError) as raised:
        api.plan(path, registry=build_registry(extra=(module,)))
    assert raised.value.one_line().startswith(f"DocumentError: {path}: {where}: {message}")


def test_the_whole_population_of_pairs_is_every_pair_an_enumeration_finds():
    """`rows: "all"`: every held-out (base, counterfactual) pair changing count and day whose four answers differ,
    counted here from the task's own definitions; in a fixed order, distinct, and the same twice."""
    from causalab_toy import tasks
    from causalab_toy.causal import Weekdays

    spec = CausalModelSpec(kind="weekdays", intervene=["count", "day"], rows="all", split="test",
                           distinct_labels=["count", "day", "answer"])
    rows = generate(Weekdays(), spec, "$.data.causal_model")

    def answer(count, day):
        return tasks.DAYS[(tasks.DAYS.index(day) + int(count)) % 7]

    held_out = [(c, d) for c in tasks.COUNTS for d in tasks.DAYS if tasks.weekday_split(c, d) == "test"]
    expected = sum(1 for c, d in held_out for c2, d2 in held_out if c2 != c and d2 != d
                   and len({answer(c, d), answer(c2, d), answer(c, d2), answer(c2, d2)}) == 4)
    assert len(rows) == expected == len({json.dumps(r, sort_keys=True) for r in rows})
    assert generate(Weekdays(), spec, "$.data.causal_model") == rows
    readme = " ".join((Path(__file__).parent.parent / "documents" / "README.md").read_text().split())
    assert f"keep four different answers are {len(rows)}:" in readme


@pytest.mark.parametrize("kind,spec,message", [
    ("weekdays", {"cap": 100}, "$.data.causal_model.cap: the population of split 'test' has more than 100 rows"),
    ("entity", {}, "$.data.causal_model.rows: causal model 'entity' cannot enumerate input 'line'"),
])
def test_a_population_too_large_or_not_enumerable_is_one_line(kind, spec, message):
    model = registry().get("causal_model", kind)()
    intervene = ["count"] if kind == "weekdays" else ["place"]
    with pytest.raises(DocumentError, match=message.replace("$", r"\$").replace("(", r"\(").replace(")", r"\)")):
        generate(model, CausalModelSpec(kind=kind, intervene=intervene, rows="all", split="test", **spec),
                 "$.data.causal_model")


def test_labels_the_rows_cannot_tell_apart_are_named_with_their_share():
    """The generator records, for each pair of answer columns that agree on some rows, the share they agree on:
    weekdays' `answer` and `count+day` agree on every row (the two hypotheses are one here)."""
    from causalab_core.document.load import generated_rows

    spec = CausalModelSpec(kind="weekdays", intervene=["count", "day"], rows=40, split="test",
                           labels=[["count", "day"]])
    rows, record = generated_rows(spec, "$.data.causal_model")
    assert record["labels_agree"]["label_answer = label_count+day"] == 1.0
    columns = ["base_answer", "label_answer", "label_count", "label_day", "label_count+day"]
    for pair, share in record["labels_agree"].items():
        a, b = pair.split(" = ")
        assert a in columns and b in columns
        assert share == round(sum(r[a] == r[b] for r in rows) / len(rows), 6) > 0
    # Every pair that agrees somewhere is named, each once, whichever way round.
    counted = {frozenset((a, b)) for i, a in enumerate(columns) for b in columns[i + 1:]
               if any(r[a] == r[b] for r in rows)}
    assert {frozenset(pair.split(" = ")) for pair in record["labels_agree"]} == counted
    assert len(record["labels_agree"]) == len(counted)
