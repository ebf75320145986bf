"""An estimated sweep's top points patched for real (``estimate.confirm``), and how well the two agree on them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from causalab_core.ir import Plan
from causalab_core.results.score import MetricResult, _number, dump


def run_estimate(plan: Plan) -> dict[str, Any] | None:
    """run.json's ``estimate``: the method, and (filled by ``confirm``) what confirmation found; None without."""
    spec = plan.document.get("estimate")
    if spec is None:
        return None
    return {"method": spec["method"], **({"steps": spec["steps"]} if spec.get("steps", 1) > 1 else {})}


def effect(content: dict[str, Any]) -> float | None:
    """How far an estimated point moves its metric's mean from the clean run's (None where either has none)."""
    mean, clean = content["summary"].get("mean"), content["estimate"]["clean_mean"]
    return None if not isinstance(mean, float) or not isinstance(clean, float) else mean - clean


def ranks(values: list[float]) -> list[float]:
    """Each value's rank (1 = smallest), ties sharing their mean rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in order[i:j + 1]:
            out[k] = (i + j) / 2 + 1
        i = j + 1
    return out


POOR = {"spearman": 0.5, "same_sign": 0.8, "relative_error": 0.5}
"""Where a confirmation's agreement is poor: Spearman or the share of signs right below these, or the mean
error above this share of the mean patched effect."""


def poor_agreement(estimate: dict[str, Any] | None) -> str | None:
    """One warning line where run.json's confirmed estimate agrees poorly with patching, naming the figures
    that fall short; None where it agrees (or nothing was confirmed)."""
    confirmed = (estimate or {}).get("confirmed")
    if not confirmed:
        return None
    rho, sign = confirmed.get("spearman"), confirmed.get("same_sign")
    error, scale = confirmed.get("mean_abs_error"), confirmed.get("mean_abs_effect")
    short = []
    if rho is not None and rho < POOR["spearman"]:
        short.append(f"Spearman {rho:.2f}")
    if sign is not None and sign < POOR["same_sign"]:
        short.append(f"same sign on {sign:.0%}")
    if error is not None and scale and error > POOR["relative_error"] * scale:
        short.append(f"mean error {error:.3g}, {error / scale:.0%} of the mean patched effect {scale:.3g}")
    if not short:
        return None
    return (f"warning: the estimate agrees poorly with patching on the {len(confirmed['points'])} confirmed points "
            f"({confirmed['metric']}): {'; '.join(short)}; read the estimated points as a guess of where to look")


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rank correlation (None with under 3 points or no spread)."""
    if len(a) < 3:
        return None
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return None if var == 0 else cov / var


def confirm(plan: Plan, metrics: list[MetricResult], files: dict[str, bytes], record: dict[str, Any],
            execute: Callable[[Plan], tuple]) -> tuple[list[MetricResult], dict[str, bytes], dict[str, Any]]:
    """Patch for real the ``top`` points whose estimated effect on ``metric`` is largest in size; add each of
    their metric files a ``patched`` summary and values, and run.json's ``estimate.confirmed`` the agreement."""
    spec = plan.document["estimate"]["confirm"]
    by = spec.get("metric") or next(iter(plan.document["metrics"]))
    ranked = [(abs(e), i) for i, m in enumerate(r for r in metrics if r.name == by) if (e := effect(m.content)) is not None]
    chosen = sorted(i for _, i in sorted(ranked, key=lambda t: (-t[0], t[1]))[:spec["top"]])
    points = tuple(plan.points[i].patched() for i in chosen)
    found, _, _ = execute(replace(plan, points=points))
    results = {(m.point.name, m.name): m for m in metrics}
    for real in found:
        path = f"{real.point.name}/{real.name}.json" if real.point.name else f"{real.name}.json"
        content = {**results[(real.point.name, real.name)].content,
                   "patched": {"summary": real.content["summary"], "values": real.content["values"]}}
        files[path] = dump(content)
        results[(real.point.name, real.name)] = replace(results[(real.point.name, real.name)], content=content)
    pairs = [(effect(results[(m.point.name, by)].content), m.content["summary"].get("mean")
              - results[(m.point.name, by)].content["estimate"]["clean_mean"])
             for m in found if m.name == by and isinstance(m.content["summary"].get("mean"), float)]
    estimated, actual = [e for e, _ in pairs], [a for _, a in pairs]
    record = {**record, "estimate": {**record["estimate"], "confirmed": _number({
        "metric": by, "top": spec["top"], "points": [p.name for p in points],
        "spearman": spearman(estimated, actual),
        "same_sign": sum((e > 0) == (a > 0) for e, a in pairs) / len(pairs) if pairs else None,
        "mean_abs_error": sum(abs(e - a) for e, a in pairs) / len(pairs) if pairs else None,
        "mean_abs_effect": sum(abs(a) for a in actual) / len(actual) if actual else None,
    })}}
    files["run.json"] = dump(record)
    return [results[(m.point.name, m.name)] for m in metrics], files, record
