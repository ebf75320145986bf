"""The toy causal models pass the causal-model conformance suite; their splits are public and are the checkpoints' own."""

from __future__ import annotations

import pytest

import causalab_toy
from causalab_testing.conformance import CausalModelConformance
from causalab_toy import tasks
from causalab_toy.causal import Entity, Weekdays


class TestToyCausalModels(CausalModelConformance):
    @pytest.fixture(params=[Weekdays, Entity], ids=["weekdays", "entity"])
    def causal_model(self, request):
        return request.param()


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
