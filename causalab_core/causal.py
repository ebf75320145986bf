"""Interchange data from a causal model: base and counterfactual settings, and the label of each intervention."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from causalab_core.errors import DocumentError, echo


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


def row(model: Any, base: dict[str, Any], source: dict[str, Any], joint: tuple[tuple[str, ...], ...] = ()) -> dict[str, Any]:
    """One row: both prompts, both answers, each variable of both, each single intervention's label, and the
    label of each set of variables in ``joint`` (``label_a+b``: the base run takes all of them from the source)."""
    b, s = solve(model, base), solve(model, source)
    out = {}
    for v in variables(model):
        out[v], out[f"cf_{v}"] = _plain(b[v]), _plain(s[v])
    # The prompts and answers as the model reads and says them (an ``answer`` variable's bare value yields).
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
    joint = tuple(tuple(names) for names in spec.labels)
    known = [*variables(model), *("+".join(names) for names in joint)]
    unknown = [v for v in spec.distinct_labels if v not in known]
    if unknown:
        raise DocumentError(f"{where}.distinct_labels: {echo(unknown[0])} is not a variable of causal model "
                            f"{model.name!r} nor a set of its `labels` (labels: {', '.join(known)})")
    rng = random.Random(f"{model.name}-{spec.split}-{spec.seed}")
    rows, seen, tries = [], set(), 0
    while len(rows) < spec.rows:
        tries += 1
        if tries > 200 * spec.rows + 10_000:
            raise DocumentError(f"{where}.rows: causal model {model.name!r} gave only {len(rows)} distinct rows "
                                f"of split {spec.split!r} changing {spec.intervene}; ask for fewer")
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
        answers = [made["base_answer"], *(made[f"label_{v}"] for v in spec.distinct_labels)]
        if len(set(answers)) == len(answers):
            rows.append(made)
    return rows


def rows_digest(rows: Any) -> str:
    """sha256 of rows as canonical JSON lines."""
    return hashlib.sha256("\n".join(json.dumps(r, sort_keys=True) for r in rows).encode()).hexdigest()
