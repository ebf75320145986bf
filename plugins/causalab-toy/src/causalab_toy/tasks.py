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


def _weekday_pair(rng: random.Random, test: bool) -> dict:
    while True:
        k = rng.randrange(len(COUNTS))
        day, cf_day = rng.sample(range(7), 2)
        if _weekday_test(k, day) == test and _weekday_test(k, cf_day) == test:
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


WEEKDAYS = Task(
    "weekdays",
    ("Q", ":", "what", "day", "is", "days", "after", "?", "A", *COUNTS, *DAYS, *CHAT_WORDS),
    _weekday_pair,
)


# -- entity lookup ------------------------------------------------------------

ORDINALS = ("first", "second", "third", "fourth")
ENTITY_PROMPT = "{line} are in line. Q: who is {ordinal}? A:"


def _entity_test(line: tuple[str, ...], q: int) -> bool:
    # A fixed fifth of (line, asked place) arrangements is held out from training.
    key = sum(NAMES.index(n) * (i + 3) for i, n in enumerate(line)) * 5 + q
    return key * 2654435761 % 97 < 20


def _line(names) -> str:
    return ", ".join(names[:-1]) + " and " + names[-1]


def _entity_pair(rng: random.Random, test: bool) -> dict:
    while True:
        names = rng.sample(NAMES, 5)
        line, spare = tuple(names[:4]), names[4]
        q = rng.randrange(4)
        cf_line = tuple(spare if i == q else n for i, n in enumerate(line))
        if _entity_test(line, q) == test and _entity_test(cf_line, q) == test:
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


ENTITY = Task(
    "entity",
    ("Q", ":", "who", "is", "are", "in", "line", "and", "?", "A", *NAMES, *ORDINALS, *CHAT_WORDS),
    _entity_pair,
)

TASKS = {t.name: t for t in (WEEKDAYS, ENTITY)}


# -- the splits, by value: public, for a third party's causal model or data over the toy models --------------

def weekday_split(count: str, day: str) -> str:
    """``"test"`` where the weekdays model never trained on this (count, day), else ``"train"``;
    ``count`` is one of ``COUNTS`` ("1"-"27"), ``day`` one of ``DAYS``."""
    return "test" if _weekday_test(COUNTS.index(str(count)), DAYS.index(day)) else "train"


def entity_split(line: Sequence[str], place: str) -> str:
    """``"test"`` where the entity model never trained on this queue (four of ``NAMES``) asked at ``place``
    (one of ``ORDINALS``), else ``"train"``."""
    return "test" if _entity_test(tuple(line), ORDINALS.index(place)) else "train"


def rows(task: str, n: int, split: str, seed: int = 0) -> list[dict]:
    """``n`` rows of a task from its ``train`` or ``test`` split."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be train or test, got {split!r}")
    rng = random.Random(f"{task}-{split}-{seed}")
    return [TASKS[task].pair(rng, split == "test") for _ in range(n)]
