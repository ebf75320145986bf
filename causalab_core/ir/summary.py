"""A plan in a few lines: what ``causalab plan`` prints first, and what a notebook shows of a plan."""

from __future__ import annotations

from typing import Any


def head(plan: Any) -> list[str]:
    """The plan in a few lines: the model, the rows and inputs, the points and steps, position reuse, the metrics."""
    m = plan.model
    metrics = list(dict.fromkeys(f"{x.name} ({x.kind})" for point in plan.points for x in point.metrics))
    return [
        f"model  {m.key} (revision {m.revision or 'unpinned'}, {m.dtype}) from {m.source}",
        f"       {m.architecture}: {m.layers} layers, width {m.width}, {m.heads} heads of {m.head_dim}, vocab {m.vocab}",
        f"rows   {plan.rows}; inputs {', '.join(f'{k} ({max(len(p) for p in v)} tokens max)' for k, v in plan.prompts.items())}",
        f"points {len(plan.points)}; steps {len(plan.steps())}" + (f"; requires {', '.join(plan.requires)}" if plan.requires else ""),
        f"reuse  positions {'on' if plan.position_reuse else 'off'}: {plan.position_reuse_why}",
        f"scores {', '.join(metrics) or 'none'}",
    ]


def summary(plan: Any) -> str:
    """What a notebook shows of a plan: its name and ``head``."""
    name = plan.document.get("name") if isinstance(plan.document, dict) else None
    return "\n".join([f"<causalab Plan{' ' + repr(name) if name else ''}>", *("  " + line for line in head(plan))])
