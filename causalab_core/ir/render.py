"""A plan as readable text (``causalab plan``); ``--json`` prints the full data instead."""

from __future__ import annotations

from causalab_core.ir.nodes import Plan, PositionRecord, Site, head


def _site(site: Site) -> str:
    head = f" head {site.head}" if site.head is not None else ""
    return f"{site.component} L{site.layer}{head} ({site.module} {site.tensor}, width {site.width})"


def _via(featurizer) -> str:
    """A featurizer by name and kind, and the ones it works over: ``m (mask) over s (sae)``."""
    named = f"{featurizer.name} ({featurizer.kind})"
    return named + (f" over {_via(featurizer.over)}" if featurizer.over is not None else "")


def _windows(rec: PositionRecord, show: int = 3) -> str:
    parts = []
    for i, (w, t, r) in enumerate(zip(rec.windows, rec.tokens, rec.reasons)):
        if i == show:
            parts.append(f"... {len(rec.windows) - show} more")
            break
        parts.append(f"row {i}: {r}" if r else f"row {i}: {list(w)} {list(t)!r}")
    return "; ".join(parts)


def render(plan: Plan) -> str:
    lines = head(plan)[:-1]
    for point in plan.points:
        lines.append("")
        lines.append(f"[{point.name or 'document'}]  eligible {sum(point.eligible)}/{len(point.eligible)}")
        records = {r.name: r for r in point.positions}
        for step in point.steps:
            if step.kind == "fit":
                f = step.featurizer
                lines.append(f"  fit {step.path}: train {_via(f)} on {len(step.labels)} training rows, "
                             f"{step.epochs} epochs of batch {step.batch_size}, lr {step.lr:g}, seed {step.seed}")
                lines.append(f"    read  {step.read.name} @ {_site(step.read.site)} of {step.source_input}")
                lines.append(f"    write {step.write.name} @ {_site(step.write.site)} of {step.target_input}")
                continue
            lines.append(f"  run {step.path}" + (f" (estimated by {step.estimate}, not run)" if step.estimate else ""))
            for read in step.reads:
                lines.append(f"    read  {read.name} @ {_site(read.site)}")
                lines.append(f"          {_windows(records[read.name])}" if read.name in records
                             else "          every position (a sender's term, for an edge patch)")
            if step.edges is not None:
                e = step.edges
                pairs = [f"{e.senders[s].name} -> {e.receivers[r].name}" for s, r in e.edges]
                shown = ", ".join(pairs[:6]) + (f" and {len(pairs) - 6} more" if len(pairs) > 6 else "")
                lines.append(f"    {'path' if e.path else 'edge'} patch {e.name} ({e.ablation}): {shown}")
            for write in step.writes:
                via = f" via {_via(write.featurizer)}" if write.featurizer else ""
                if write.intervention is None:
                    lines.append(f"    write {write.name} <- {write.source}{via} @ {_site(write.site)}")
                else:
                    took = f" <- {write.source}" if write.source else ""
                    lines.append(f"    write {write.name} {write.intervention.kind}{took}{via} @ {_site(write.site)}")
                lines.append(f"          {_windows(records[write.name])}")
            if step.scoring:
                lines.append(f"    score next-token logits of {', '.join(step.scoring.columns)}")
        for metric in point.metrics:
            lines.append(f"  metric {metric.name} ({metric.kind}) on {metric.step}")
    return "\n".join(lines)
