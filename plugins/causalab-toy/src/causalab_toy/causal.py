"""Causal models of the toy tasks: the hypotheses the toy studies test, and the data that can refute them.

weekdays: inputs ``count`` (1-27) and ``day``; ``answer`` = the day ``count`` days after ``day``.
entity: inputs ``line`` (four names in a queue) and ``place`` (which one is asked); ``entity`` = the
name at that place; ``answer`` = ``entity``.

Each split is the toy model's own: a setting is in ``test`` exactly when the toy
model never saw it in training (``causalab_toy.weekday_split``, ``causalab_toy.entity_split``), so test
rows are held out by construction and train and test never share a setting.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from causalab_core.plugins.contracts import CausalModel
from causalab_toy import tasks


class HeldOut(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    held_out: Literal["settings", "computed"] = Field(
        "settings", description="Whose split: `settings`, the shipped checkpoints' (a fifth of the settings held "
        "out); `computed`, the seeded checkpoints' (`weekdays-s*`, `entity-s*`): what the task computes from is "
        "held out, (count mod 7, day) and (asked name, place).")


class Weekdays(CausalModel):
    name = "weekdays"
    Params = HeldOut
    inputs = ("count", "day")
    mechanisms = {"answer": ("count", "day")}

    def sample(self, rng, variable: str) -> Any:
        return rng.choice(tasks.COUNTS) if variable == "count" else rng.choice(tasks.DAYS)

    def domain(self, variable: str) -> list:
        return list(tasks.COUNTS if variable == "count" else tasks.DAYS)

    def compute(self, variable: str, parents) -> Any:
        return tasks.DAYS[(tasks.DAYS.index(parents["day"]) + int(parents["count"])) % 7]

    def prompt(self, values) -> str:
        return tasks.WEEKDAY_PROMPT.format(count=values["count"], day=values["day"])

    def answer(self, values) -> str:
        return " " + values["answer"]

    def split(self, inputs) -> str:
        return tasks.weekday_split(inputs["count"], inputs["day"], self.params.held_out)


class Entity(CausalModel):
    name = "entity"
    Params = HeldOut
    inputs = ("line", "place")
    mechanisms = {"entity": ("line", "place"), "answer": ("entity",)}

    def sample(self, rng, variable: str) -> Any:
        if variable == "place":
            return tasks.ORDINALS[rng.randrange(4)]
        return "|".join(rng.sample(tasks.NAMES, 4))

    def compute(self, variable: str, parents) -> Any:
        if variable == "entity":
            return parents["line"].split("|")[tasks.ORDINALS.index(parents["place"])]
        return parents["entity"]

    def prompt(self, values) -> str:
        return tasks.ENTITY_PROMPT.format(line=tasks._line(values["line"].split("|")), ordinal=values["place"])

    def answer(self, values) -> str:
        return " " + values["answer"]

    def split(self, inputs) -> str:
        return tasks.entity_split(inputs["line"].split("|"), inputs["place"], self.params.held_out)
