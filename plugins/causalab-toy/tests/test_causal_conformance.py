"""The toy causal models pass the causal-model conformance suite; their splits are public and are the checkpoints' own."""

from __future__ import annotations

import pytest

import causalab_toy
from causalab_testing.conformance import CausalModelConformance
from causalab_toy import tasks
from causalab_toy.causal import Entity, HeldOut, Weekdays


class TestToyCausalModels(CausalModelConformance):
    @pytest.fixture(params=[(Weekdays, "settings"), (Entity, "settings"), (Weekdays, "computed"), (Entity, "computed")],
                    ids=["weekdays", "entity", "weekdays-computed", "entity-computed"])
    def causal_model(self, request):
        cls, held_out = request.param
        return cls(HeldOut(held_out=held_out))


def test_the_splits_are_public_and_hold_out_what_the_checkpoints_never_trained_on():
    for k, count in enumerate(tasks.COUNTS):
        for d, day in enumerate(tasks.DAYS):
            assert (causalab_toy.weekday_split(count, day) == "test") == tasks._weekday_test(k, d)
    line = ("Alice", "Bob", "Carol", "Dave")
    for q, place in enumerate(tasks.ORDINALS):
        assert (causalab_toy.entity_split(line, place) == "test") == tasks._entity_test(line, q)
    # The weekdays training rows all lie in its train split, as the public function says.
    for row in tasks.rows("weekdays", 50, "train"):
        assert causalab_toy.weekday_split(row["count"], row["day"]) == "train"


def test_the_computed_split_holds_out_what_the_task_computes():
    """weekdays-s*: a (count mod 7, day) combination is held out under every count with that residue;
    entity-s*: an (asked name, place) combination is never asked in training."""
    residues = {(int(c) % 7, d): causalab_toy.weekday_split(c, d, "computed") for c in tasks.COUNTS for d in tasks.DAYS}
    for (r, d), split in residues.items():
        assert split == ("test" if (r, tasks.DAYS.index(d)) in tasks.HELD_OUT_RESIDUES else "train")
    assert sum(split == "test" for split in residues.values()) == 10
    for row in tasks.rows("weekdays_residues", 300, "train"):
        assert (int(row["count"]) % 7, tasks.DAYS.index(row["day"])) not in tasks.HELD_OUT_RESIDUES
    for row in tasks.rows("entity_answers", 300, "train"):
        assert (tasks.NAMES.index(row["entity"]), tasks.ORDINALS.index(row["place"])) not in tasks.HELD_OUT_ANSWERS
    for row in tasks.rows("entity_answers", 100, "test"):
        line = row["base"].split(" are in line")[0].replace(" and ", ", ").split(", ")
        assert causalab_toy.entity_split(line, row["place"], "computed") == "test"
