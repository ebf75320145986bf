"""Tasks whose circuit is known from the literature, for the circuit models: induction and IOI-style prompts.

- ``induction`` (Olsson et al. 2022): random tokens, then a chunk of them, then the chunk again; the next token
  of the repeat is the one that followed its earlier occurrence. A two-layer attention-only model solves it
  with a previous-token head (layer 0) whose output the induction head (layer 1) reads through its key.
- ``ioi`` (Wang et al. 2022): "When Mary and John went to the store , John gave a drink to" -> " Mary": the
  indirect object, the name of the first clause that is not repeated as the subject.

Rows carry ``base``/``counterfactual`` prompts of the same length and the base's answer (and, for IOI, the
``subject`` whose logit the answer's is scored against). The counterfactual is the
corruption circuit work patches from: for induction the chunk shuffled (another token follows each), for IOI
the same template with three other names (Wang et al.'s "ABC" distribution). Train and test differ in what
the answer is computed from: held-out induction chunks start with a token the training chunks never start with;
held-out IOI pairs (indirect object, subject) never occur in training.
"""

from __future__ import annotations

import random

TOKENS = tuple(f"t{i}" for i in range(48))
LENGTH = 26
"""Tokens after the BOS in a training sequence: a random prefix, then a chunk twice."""
HELD_OUT_FIRST = TOKENS[::8]
"""Held-out induction chunks start with one of these six tokens (training chunks never do)."""


def induction_sequence(rng: random.Random, test: bool = False) -> tuple[list[str], int]:
    """A training sequence (``LENGTH`` tokens: random ones, a chunk of 6-12 distinct tokens, the chunk again)
    and the chunk's length."""
    n = rng.randint(6, 12)
    chunk = _chunk(rng, n, test)
    prefix = [rng.choice(TOKENS) for _ in range(LENGTH - 2 * n)]
    return prefix + chunk + chunk, n


def _chunk(rng: random.Random, n: int, test: bool) -> list[str]:
    while True:
        chunk = rng.sample(TOKENS, n)
        if (chunk[0] in HELD_OUT_FIRST) == test:
            return chunk


def induction_pair(rng: random.Random, test: bool, n: int = 8, shown: int = 4, prefix: int = 4) -> dict:
    """``prefix`` random tokens, a chunk of ``n``, then its first ``shown``: the answer is the token that followed
    the last one shown. The counterfactual shows the same tokens after the chunk shuffled, so every token is
    where another was, and the last one shown is followed by another token (``cf_answer``): what an induction
    circuit reads through its previous-token head and its keys changes, the tokens themselves do not. ``fresh``
    shows them after another chunk, where they never occurred: an induction head finds no match there."""
    chunk = _chunk(rng, n, test)
    head = [rng.choice([t for t in TOKENS if t not in chunk]) for _ in range(prefix)]
    last = chunk[shown - 1]
    while True:
        shuffled = rng.sample(chunk, n)
        at = shuffled.index(last)
        if at < n - 1 and shuffled[at + 1] != chunk[shown] and all(a != b for a, b in zip(shuffled, chunk)):
            break
    fresh = rng.sample([t for t in TOKENS if t not in chunk and t not in head], n)
    return {
        "base": " ".join(head + chunk + chunk[:shown]), "counterfactual": " ".join(head + shuffled + chunk[:shown]),
        "fresh": " ".join(head + fresh + chunk[:shown]),  # the tokens shown occur nowhere before: nothing to copy
        "base_answer": " " + chunk[shown], "cf_answer": " " + shuffled[at + 1],
        "copied": " " + last,  # the token just shown: what copying the current token would say
    }


IOI_NAMES = ("Mary", "John", "Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy",
             "Kevin", "Laura", "Oscar", "Peggy", "Quinn", "Rita", "Sam", "Tina", "Uma", "Victor", "Wendy", "Xavier",
             "Yara", "Zack", "Anna", "Ben", "Clara", "Dan", "Eva", "Fred")
PLACES = ("store", "garden", "school", "park", "office", "station")
OBJECTS = ("drink", "book", "ball", "key", "letter", "apple")
TEMPLATES = (  # each 14 words: every prompt of the task is as long as every other
    "When {a} and {b} went to the {place} , {s} gave a {obj} to",
    "Once {a} and {b} sat in the {place} , {s} threw a {obj} to",
    "After {a} and {b} walked to the {place} , {s} passed the {obj} to",
)


def _ioi_test(io: str, s: str) -> bool:
    # A fixed fifth of the (indirect object, subject) pairs is held out from training.
    return (IOI_NAMES.index(io) * 17 + IOI_NAMES.index(s)) * 2654435761 % 97 < 20


def ioi_pair(rng: random.Random, test: bool) -> dict:
    """An IOI prompt, ABBA or BABA at random, and its "ABC" counterfactual: the same template, place and object
    with three names that are not the base's."""
    while True:
        io, s = rng.sample(IOI_NAMES, 2)
        if _ioi_test(io, s) == test:
            break
    template, place, obj = rng.randrange(len(TEMPLATES)), rng.choice(PLACES), rng.choice(OBJECTS)
    order = rng.choice(("ABBA", "BABA"))
    a, b = (io, s) if order == "ABBA" else (s, io)
    c, d, e = rng.sample([n for n in IOI_NAMES if n not in (io, s)], 3)
    text = TEMPLATES[template]
    return {
        "base": text.format(a=a, b=b, s=s, place=place, obj=obj),
        "counterfactual": text.format(a=c, b=d, s=e, place=place, obj=obj),
        "base_answer": " " + io, "subject": " " + s,  # scored as the logit difference IO - S (Wang et al.)
        "io": io, "s": s, "order": order, "template": str(template),
    }


IOI_WORDS = tuple(dict.fromkeys(w for t in TEMPLATES for w in t.split() if not w.startswith("{"))) \
    + IOI_NAMES + PLACES + OBJECTS


def rows(task: str, n: int, split: str, seed: int = 0) -> list[dict]:
    """``n`` rows of ``induction`` or ``ioi`` from its ``train`` or ``test`` split."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be train or test, got {split!r}")
    rng = random.Random(f"{task}-{split}-{seed}")
    pair = {"induction": induction_pair, "ioi": ioi_pair}[task]
    return [pair(rng, split == "test") for _ in range(n)]
