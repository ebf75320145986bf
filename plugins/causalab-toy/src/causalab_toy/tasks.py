"""The toy tasks: their vocabularies, prompts, and base/counterfactual rows.

Each task knows its words (for a word-level tokenizer), how to make one
example from a rng, and how to split its examples into train and test so that
test prompts never appear in training.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
COUNTS = tuple(str(n) for n in range(1, 28))
NAMES = ("Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory", "Oscar")
CHAT_WORDS = ("system", "user", "assistant", "you", "are", "a", "helpful", "hello", "hi", "tell", "me", ".", ",")

WEEKDAY_PROMPT = "Q: what day is {count} days after {day}? A:"


@dataclass(frozen=True)
class Task:
    """A toy task: vocabulary, example maker, and which key splits train from test."""

    name: str
    words: tuple[str, ...]
    pair: Callable[[random.Random, bool], dict]
    """Make one base/counterfactual row; ``test`` chooses from the held-out half."""


# -- weekdays -----------------------------------------------------------------

def _weekday_test(count: int, day: int) -> bool:
    # A fixed fifth of (count, day) combinations is held out from training.
    return (count * 7 + day) * 2654435761 % 97 < 20


# Held out in what the task computes: (count mod 7, day), of which the answer is a function. A count whose
# residue and a day form one of these ten pairs is never trained on, under any count with that residue
# (drawn once: random.Random("weekdays-residues").sample of the 49, sorted).
HELD_OUT_RESIDUES = ((1, 1), (2, 2), (2, 3), (3, 2), (4, 1), (4, 2), (4, 3), (5, 4), (5, 5), (6, 2))


def _weekday_residue_test(count: int, day: int) -> bool:
    """``count`` is an index into COUNTS (the count is ``count + 1``), ``day`` into DAYS."""
    return ((count + 1) % 7, day) in HELD_OUT_RESIDUES


def _weekday_pair(rng: random.Random, test: bool, held_out=_weekday_test) -> dict:
    while True:
        k = rng.randrange(len(COUNTS))
        day, cf_day = rng.sample(range(7), 2)
        if held_out(k, day) == test and held_out(k, cf_day) == test:
            break
    n = int(COUNTS[k])
    return {
        "base": WEEKDAY_PROMPT.format(count=COUNTS[k], day=DAYS[day]),
        "counterfactual": WEEKDAY_PROMPT.format(count=COUNTS[k], day=DAYS[cf_day]),
        "base_answer": " " + DAYS[(day + n) % 7],
        "cf_answer": " " + DAYS[(cf_day + n) % 7],
        "day": DAYS[day],
        "cf_day": DAYS[cf_day],
        "count": COUNTS[k],
    }


WEEKDAY_WORDS = ("Q", ":", "what", "day", "is", "days", "after", "?", "A", *COUNTS, *DAYS, *CHAT_WORDS)
WEEKDAYS = Task("weekdays", WEEKDAY_WORDS, _weekday_pair)
WEEKDAYS_RESIDUES = Task(
    "weekdays_residues", WEEKDAY_WORDS, lambda rng, test: _weekday_pair(rng, test, _weekday_residue_test))


# -- entity lookup ------------------------------------------------------------

ORDINALS = ("first", "second", "third", "fourth")
ENTITY_PROMPT = "{line} are in line. Q: who is {ordinal}? A:"


def _entity_test(line: tuple[str, ...], q: int) -> bool:
    # A fixed fifth of (line, asked place) arrangements is held out from training.
    key = sum(NAMES.index(n) * (i + 3) for i, n in enumerate(line)) * 5 + q
    return key * 2654435761 % 97 < 20


# Held out in what the task computes: (the asked name, its place). A name is never asked for at one of these
# places in training (it may stand there unasked); (NAMES index, ORDINALS index), drawn once:
# random.Random("entity-answers").sample of the 48, sorted.
HELD_OUT_ANSWERS = ((0, 0), (0, 1), (5, 3), (7, 1), (7, 3), (8, 1), (9, 0), (10, 0), (10, 1), (11, 0))


def _entity_answer_test(line: tuple[str, ...], q: int) -> bool:
    return (NAMES.index(line[q]), q) in HELD_OUT_ANSWERS


def _line(names) -> str:
    return ", ".join(names[:-1]) + " and " + names[-1]


def _entity_pair(rng: random.Random, test: bool, held_out=_entity_test) -> dict:
    while True:
        names = rng.sample(NAMES, 5)
        line, spare = tuple(names[:4]), names[4]
        q = rng.randrange(4)
        cf_line = tuple(spare if i == q else n for i, n in enumerate(line))
        if held_out(line, q) == test and held_out(cf_line, q) == test:
            break
    return {
        "base": ENTITY_PROMPT.format(line=_line(line), ordinal=ORDINALS[q]),
        "counterfactual": ENTITY_PROMPT.format(line=_line(cf_line), ordinal=ORDINALS[q]),
        "base_answer": " " + line[q],
        "cf_answer": " " + cf_line[q],
        "entity": line[q],
        "cf_entity": cf_line[q],
        "place": ORDINALS[q],
    }


ENTITY_WORDS = ("Q", ":", "who", "is", "are", "in", "line", "and", "?", "A", *NAMES, *ORDINALS, *CHAT_WORDS)
ENTITY = Task("entity", ENTITY_WORDS, _entity_pair)
ENTITY_ANSWERS = Task("entity_answers", ENTITY_WORDS, lambda rng, test: _entity_pair(rng, test, _entity_answer_test))

TASKS = {t.name: t for t in (WEEKDAYS, ENTITY, WEEKDAYS_RESIDUES, ENTITY_ANSWERS)}
HELD_OUT = ("settings", "computed")
"""What a split holds out: ``settings``, a fifth of the (count, day) and (queue, asked place) settings (the
shipped ``weekdays`` and ``entity``); ``computed``, what the task computes from: (count mod 7, day) and
(asked name, place) combinations (the seeded checkpoints ``weekdays-s*``, ``entity-s*``)."""


# -- the splits, by value: public, for a third party's causal model or data over the toy models --------------

def weekday_split(count: str, day: str, held_out: str = "settings") -> str:
    """``"test"`` where the weekdays model never trained on this (count, day), else ``"train"``;
    ``count`` is one of ``COUNTS`` ("1"-"27"), ``day`` one of ``DAYS``; ``held_out="computed"``: the
    seeded checkpoints' split, (count mod 7, day) held out."""
    test = _weekday_residue_test if held_out == "computed" else _weekday_test
    return "test" if test(COUNTS.index(str(count)), DAYS.index(day)) else "train"


def entity_split(line: Sequence[str], place: str, held_out: str = "settings") -> str:
    """``"test"`` where the entity model never trained on this queue (four of ``NAMES``) asked at ``place``
    (one of ``ORDINALS``), else ``"train"``; ``held_out="computed"``: the seeded checkpoints' split,
    (asked name, place) held out."""
    test = _entity_answer_test if held_out == "computed" else _entity_test
    return "test" if test(tuple(line), ORDINALS.index(place)) else "train"


def rows(task: str, n: int, split: str, seed: int = 0) -> list[dict]:
    """``n`` rows of a task from its ``train`` or ``test`` split."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be train or test, got {split!r}")
    rng = random.Random(f"{task}-{split}-{seed}")
    return [TASKS[task].pair(rng, split == "test") for _ in range(n)]
