"""Interchange data from a causal model: base and counterfactual settings, and the label of each intervention."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from typing import Any

from causalab_core.errors import DocumentError, PluginError, echo

ROW_COLUMNS = ("base", "counterfactual", "base_answer", "cf_answer")
"""The columns a generated row has whatever the model: both prompts and both answers."""


def solve(model: Any, inputs: dict[str, Any], fixed: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every variable's value from the inputs; a variable in ``fixed`` takes that value (an intervention)."""
    fixed = fixed or {}
    values = {v: fixed.get(v, inputs[v]) for v in model.inputs}
    for variable, parents in model.mechanisms.items():
        values[variable] = fixed[variable] if variable in fixed else model.compute(
            variable, {p: values[p] for p in parents})
    return values


def variables(model: Any) -> tuple[str, ...]:
    return (*model.inputs, *model.mechanisms)


def value_columns(model: Any, where: str = "") -> dict[str, tuple[str, str]]:
    """Each variable's base and counterfactual value columns: ``v`` and ``cf_v``, renamed ``var_v`` and
    ``cf_var_v`` where they would take a column every row has or a label's (a variable ``answer``: ``cf_answer``
    is the counterfactual's answer text, which would overwrite its value). A clash renaming cannot undo
    (``cf_day`` beside ``day``) is a `PluginError` naming the model and the variable."""
    names = variables(model)
    labels = {f"label_{v}": v for v in names}
    columns = {v: (v, f"cf_{v}") for v in names}
    for v, plain in columns.items():
        if set(plain) & {*ROW_COLUMNS, *labels}:
            columns[v] = (f"var_{v}", f"cf_var_{v}")
    owner = {c: f"every row's {c!r} column" for c in ROW_COLUMNS} | {
        c: f"the label column of variable {v!r}" for c, v in labels.items()}
    for v, pair in columns.items():
        for c in pair:
            if c in owner:
                at = f"{where}: " if where else ""
                raise PluginError(f"{at}causal model {model.name!r}: variable {echo(v)} would write its value to "
                                  f"{c!r}, which is {owner[c]}; rename the variable")
            owner[c] = f"a value column of variable {v!r}"
    return columns


def row(model: Any, base: dict[str, Any], source: dict[str, Any], joint: tuple[tuple[str, ...], ...] = ()) -> dict[str, Any]:
    """One row: both prompts, both answers, each variable of both (``value_columns``), each single
    intervention's label, and the label of each set of variables in ``joint`` (``label_a+b``: the base run takes
    all of them from the source)."""
    b, s = solve(model, base), solve(model, source)
    out = {}
    for v, (base_column, cf_column) in value_columns(model).items():
        out[base_column], out[cf_column] = _plain(b[v]), _plain(s[v])
    # The prompts and answers as the model reads and says them.
    out |= {"base": model.prompt(b), "counterfactual": model.prompt(s),
            "base_answer": model.answer(b), "cf_answer": model.answer(s)}
    for v in variables(model):
        # The answer if the base run took this one variable's value from the counterfactual run.
        out[f"label_{v}"] = model.answer(solve(model, base, {v: s[v]}))
    for names in joint:
        out[f"label_{'+'.join(names)}"] = model.answer(solve(model, base, {v: s[v] for v in names}))
    return out


def _plain(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool)) else json.dumps(value)


def generate(model: Any, spec: Any, where: str) -> list[dict[str, Any]]:
    """``spec.rows`` distinct rows of ``spec.split``: base inputs sampled, the counterfactual's ``spec.intervene``
    inputs resampled until each differs; both settings in the split (so splits never share a setting)."""
    unknown = [v for v in spec.intervene if v not in model.inputs]
    if unknown:
        raise DocumentError(f"{where}.intervene: {unknown[0]!r} is not an input variable of causal model "
                            f"{model.name!r} (inputs: {', '.join(model.inputs)})")
    for i, names in enumerate(spec.labels):
        unknown = [v for v in names if v not in variables(model)]
        if unknown or len(set(names)) != len(names) or not names:
            what = f"{unknown[0]!r} is not a variable" if unknown else "a set names each variable once, at least one"
            raise DocumentError(f"{where}.labels[{i}]: {what} of causal model {model.name!r} "
                                f"(variables: {', '.join(variables(model))})")
    value_columns(model, where)  # a variable clashing with a column: refused before any row is made
    joint = tuple(tuple(names) for names in spec.labels)
    known = [*variables(model), *("+".join(names) for names in joint)]
    unknown = [v for v in spec.distinct_labels if v not in known]
    if unknown:
        raise DocumentError(f"{where}.distinct_labels: {echo(unknown[0])} is not a variable of causal model "
                            f"{model.name!r} nor a set of its `labels` (labels: {', '.join(known)})")
    if spec.rows == "all":
        return population(model, spec, joint, where)
    rng = random.Random(f"{model.name}-{spec.split}-{spec.seed}")
    rows, seen, tries, dropped = [], set(), 0, 0
    while len(rows) < spec.rows:
        tries += 1
        if tries > 200 * spec.rows + 10_000:
            if dropped and not rows:
                raise DocumentError(f"{where}.distinct_labels: keeps none of the {dropped} distinct pairs of split "
                                    f"{spec.split!r} changing {spec.intervene} drawn: on each, the base answer and "
                                    f"the labels of {spec.distinct_labels} are not all different")
            filtered = f" (distinct_labels dropped {dropped} of the {dropped + len(rows)} pairs drawn)" if dropped else ""
            raise DocumentError(f"{where}.rows: causal model {model.name!r} gave only {len(rows)} distinct rows "
                                f"of split {spec.split!r} changing {spec.intervene}{filtered}; ask for fewer")
        base = {v: model.sample(rng, v) for v in model.inputs}
        source = {**base, **{v: model.sample(rng, v) for v in spec.intervene}}
        if any(source[v] == base[v] for v in spec.intervene):
            continue
        if model.split(base) != spec.split or model.split(source) != spec.split:
            continue
        key = json.dumps([sorted(base.items()), sorted(source.items())], default=str)
        if key in seen:
            continue
        seen.add(key)
        made = row(model, base, source, joint)
        if separates(made, spec):
            rows.append(made)
        else:
            dropped += 1
    return rows


def separates(made: dict[str, Any], spec: Any) -> bool:
    """The row's base answer and its ``distinct_labels`` all differ."""
    answers = [made["base_answer"], *(made[f"label_{v}"] for v in spec.distinct_labels)]
    return len(set(answers)) == len(answers)


def population(model: Any, spec: Any, joint: tuple, where: str) -> list[dict[str, Any]]:
    """Every (base, counterfactual) pair of the split: each base setting of the inputs' domains, each
    counterfactual changing every ``intervene`` input, in the domains' order; ``spec.cap`` at most."""
    domains = {v: model.domain(v) for v in model.inputs}
    missing = [v for v, values in domains.items() if values is None]
    if missing:
        raise DocumentError(f"{where}.rows: causal model {model.name!r} cannot enumerate input {missing[0]!r}; "
                            "ask for a sample (a number of rows)")
    settings = [dict(zip(model.inputs, values)) for values in itertools.product(*domains.values())]
    settings = [s for s in settings if model.split(s) == spec.split]
    rows, pairs = [], 0
    for base in settings:
        for changed in itertools.product(*(domains[v] for v in spec.intervene)):
            source = {**base, **dict(zip(spec.intervene, changed))}
            if any(source[v] == base[v] for v in spec.intervene) or model.split(source) != spec.split:
                continue
            pairs += 1
            made = row(model, base, source, joint)
            if separates(made, spec):
                rows.append(made)
                if len(rows) > spec.cap:
                    raise DocumentError(f"{where}.cap: the population of split {spec.split!r} has more than "
                                        f"{spec.cap} rows; raise `cap` or ask for a sample (a number of rows)")
    if not rows and pairs:  # the pairs were there: the filter took them all
        raise DocumentError(f"{where}.distinct_labels: keeps none of the {pairs} pairs of split {spec.split!r} "
                            f"changing {spec.intervene}: on each, the base answer and the labels of "
                            f"{spec.distinct_labels} are not all different")
    if not rows:
        raise DocumentError(f"{where}.rows: causal model {model.name!r} has no pair of split {spec.split!r} "
                            f"changing {spec.intervene}")
    return rows


def rows_digest(rows: Any) -> str:
    """sha256 of rows as canonical JSON lines."""
    return hashlib.sha256("\n".join(json.dumps(r, sort_keys=True) for r in rows).encode()).hexdigest()
