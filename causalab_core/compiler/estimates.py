"""A document's ``estimate``: its intervened runs marked for attribution patching, and what cannot be estimated."""

from __future__ import annotations

from typing import Any

from causalab_core.errors import PlanError
from causalab_core.plugins import returns
from causalab_core.ir import Point


def differentiable_kinds(registry: Any) -> list[str]:
    return sorted(name for name, cls in registry.components("metric").items() if cls.differentiable)


def check_estimable(doc: Any, registry: Any, metric_params: dict[str, Any]) -> None:
    """Refuse, in one line naming the JSON path, what attribution cannot estimate: a metric with no gradient
    (an argmax, a rank) or one reading more of a run than its answer logits; a read of an intervened run."""
    works = ", ".join(differentiable_kinds(registry))
    for name, metric in doc.metrics.items():
        cls = registry.get("metric", metric.kind)
        needs = returns.needs(cls().needs(metric_params[name]), registry.who("metric", metric.kind))
        if not cls.differentiable:
            raise PlanError(f"$.metrics.{name}: metric kind {metric.kind!r} has no gradient, so "
                            f"$.estimate cannot estimate it (metrics that work: {works})")
        wide = sorted({v for views in needs.values() for v in views} - {"answers"})
        if wide:
            raise PlanError(f"$.metrics.{name}: metric kind {metric.kind!r} reads the view {wide[0]!r}, which "
                            f"$.estimate does not estimate (metrics that work: {works})")
    if doc.estimate.steps > 1 and any(e.path is not None for e in doc.edges.values()):
        name = next(n for n, e in doc.edges.items() if e.path is not None)
        raise PlanError(f"$.edges.{name}.path: integrated gradients move edges, not a path patch's frozen run; "
                        "estimate a path patch with steps 1")
    changes = {**{f"$.writes.{n}": w for n, w in doc.writes.items()}, **{f"$.edges.{n}": e for n, e in doc.edges.items()}}
    if not changes:
        raise PlanError("$.estimate: the document writes nothing, so there is nothing to estimate")
    written = {w.input for w in changes.values()}
    default = next(iter(changes.values())).input
    scored = {m.input or default for m in doc.metrics.values()}
    for where, write in changes.items():
        if write.input not in scored:
            raise PlanError(f"{where}: $.estimate estimates the scores of input {write.input!r}'s run, and "
                            "no metric scores it")
    for name, read in doc.reads.items():
        if read.input in written:
            raise PlanError(f"$.reads.{name}: reads input {read.input!r}, whose run $.estimate estimates "
                            "instead of running: there is no intervened activation to read")
    if doc.estimate.confirm is not None and doc.estimate.confirm.metric not in (None, *doc.metrics):
        raise PlanError(f"$.estimate.confirm.metric: {doc.estimate.confirm.metric!r} is not one of $.metrics "
                        f"({', '.join(doc.metrics)})")


def combinations(step, doc: Any, registry: Any, metric_params: dict[str, Any]) -> tuple | None:
    """The linear combinations of ``step``'s scores (its columns, then the log-sum-exp) its metrics read it
    through (``Metric.linear``), or None where one of them reads more, or as many as there are scores."""
    default = next(iter((*doc.writes.values(), *doc.edges.values()))).input
    found = []
    for name, metric in doc.metrics.items():
        if (metric.input or default) != step.input:
            continue
        instance, who = registry.get("metric", metric.kind)(), registry.who("metric", metric.kind)
        params = metric_params[name]
        linear = returns.linear(instance.linear(params), who, tuple(instance.columns(params)))
        if linear is None:
            return None
        row = tuple(float(linear.get(key, 0.0)) for key in step.scoring.scores)
        if row not in found:
            found.append(row)
    return tuple(found) if len(found) < len(step.scoring.scores) else None


def estimated(points: tuple[Point, ...], doc: Any, registry: Any, metric_params: dict[str, Any]) -> tuple[Point, ...]:
    """Each point's estimable runs marked ``estimate``, with the combinations of their scores the metrics read
    (``combinations``: the same for every run of an input, worked out once and shared)."""
    by_input: dict[str, tuple | None] = {}

    def shared(step):
        if step.input not in by_input:
            by_input[step.input] = combinations(step, doc, registry, metric_params)
        return by_input[step.input]

    return tuple(point.estimated(doc.estimate.method, shared, doc.estimate.steps) for point in points)
