"""Fill the plan the client kept with what an engine returned, score it, and lay out the output files."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

from causalab_core.plugins.contracts import MetricInputs
from causalab_core.plugins.returns import values_problem
from causalab_core.results.intervals import METHOD, with_interval
from causalab_core.errors import EngineError, PluginError
from causalab_core.ir import Fit, Plan, Point, PositionRecord
from causalab_core.plugins.provenance import trained_digest
from causalab_core.plugins.registry import Registry


@dataclass(frozen=True)
class MetricResult:
    """One metric at one point: what goes in ``<metric>.json``."""

    point: Point
    name: str
    content: dict[str, Any]


NOT_A_NUMBER = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
"""How a value a metric computed but that is no number is written: a string, so that ``null`` always
means a row that was not scored (not eligible), never a NaN."""


def _number(x: Any) -> Any:
    """Fixed float formatting: 9 significant digits (exact for float32); NaN and infinities as strings."""
    if isinstance(x, float):
        return NOT_A_NUMBER[str(x)] if not math.isfinite(x) else float(format(x, ".9g"))
    if isinstance(x, dict):
        return {k: _number(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_number(v) for v in x]
    return x


def position_record(rec: PositionRecord) -> dict[str, Any]:
    return {
        "role": rec.role,
        "input": rec.input,
        "rows": [
            {"window": list(w), "tokens": list(t), "reason": r}
            for w, t, r in zip(rec.windows, rec.tokens, rec.reasons)
        ],
    }


def positions_record(point: Point, shown: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Each read's and write's record by name. A record the points share (the compiler shares one per
    position, across layers) is built once, into ``shown`` by its id, and shared by their results."""
    for rec in point.positions:
        if id(rec) not in shown:
            shown[id(rec)] = position_record(rec)
    return {rec.name: shown[id(rec)] for rec in point.positions}


def run_inputs(step: Any, outputs: dict[str, dict[str, Any]], eligible: Any) -> MetricInputs:
    """What a metric sees of one scored step, from the engine's flat outputs."""
    got = outputs.get(step.path, {})
    missing = [key for key, view in (("answer_logits", "answers"), ("logsumexp", "answers"),
                                     ("answer_ranks", "ranks"), ("logprobs", "logprobs"))
               if view in step.scoring.views and key not in got]
    if missing:
        raise EngineError(f"the engine returned no {missing[0]} for step {step.path!r}")
    cols = step.scoring.columns
    return MetricInputs(
        logits=got["answer_logits"].float(),
        logsumexp=got["logsumexp"].float(),
        columns=cols,
        token_ids={c: [ids[i] for ids in step.scoring.token_ids] for i, c in enumerate(cols)},
        eligible=eligible,
        ranks=got.get("answer_ranks"),
        logprobs=got["logprobs"].float() if "logprobs" in got else None,
    )


ANSWERS_COINCIDE = "answers_coincide"
"""A row on which two of a metric's answer columns are one token: a comparison of an answer with itself
(a logit difference of 0, an IIA that the label wins whichever of the two the model picks)."""


def position_reasons(point: Point) -> list[str | None]:
    """Per row: None where every read resolved, else the first read's reason code."""
    reads = [rec.reasons for rec in point.positions if rec.role == "read"]
    return [None if ok else next((r[i] for r in reads if r[i] is not None), "position_unresolved")
            for i, ok in enumerate(point.eligible)]


def coinciding(scoring: Any, columns: tuple[str, ...]) -> list[str | None]:
    """Per row: ``answers_coincide`` where two of ``columns`` are one token on that row, else None."""
    at = [scoring.columns.index(c) for c in dict.fromkeys(columns)]
    return [ANSWERS_COINCIDE if len({ids[k] for k in at}) < len(at) else None for ids in scoring.token_ids]


LOGITS_NOT_FINITE = "logits_not_finite"
"""A row on which a logit a metric scores (one of its answer columns', or the log-sum-exp over the
vocabulary) is NaN or infinite in one of the runs it reads: no number can be read from it (a float16
overflow, an intervention of a huge scale)."""


def not_finite(steps: list[Any], outputs: dict[str, dict[str, Any]], columns: tuple[str, ...]) -> list[str | None]:
    """Per row: ``logits_not_finite`` where a scored logit of ``columns`` or the log-sum-exp is not finite in
    one of ``steps``, else None. A view a step did not bring back is not looked at (``run_inputs`` names it)."""
    bad = None
    for step in steps:
        got = outputs.get(step.path, {})
        at = [step.scoring.columns.index(c) for c in dict.fromkeys(columns) if c in step.scoring.columns]
        for key, cols in (("answer_logits", at), ("logsumexp", None)):
            if key not in got:
                continue
            x = got[key].float()
            x = x[:, cols] if cols is not None else x
            rows = ~x.reshape(x.shape[0], -1).isfinite().all(dim=1)
            bad = rows if bad is None else bad | rows
    if bad is None:
        return []
    return [LOGITS_NOT_FINITE if b else None for b in bad.tolist()]


def score(plan: Plan, outputs: dict[str, dict[str, Any]], registry: Registry) -> list[MetricResult]:
    """Compute every metric of every point from the engine's flat outputs.

    A row is scored where its reads resolved, its answers are distinct tokens (``coinciding``) and the
    logits the metric scores are finite in every run it reads (``not_finite``);
    ``reasons`` in the metric file says, per row, why it was not."""
    results, shown, own = [], {}, {}
    for point in plan.points:
        steps = {s.path: s for s in point.steps}
        unresolved = position_reasons(point)
        for metric in point.metrics:
            cls = registry.get("metric", metric.kind)
            params = cls.Params.model_validate(metric.params)
            scoring = steps[metric.step].scoring
            columns = tuple(cls().columns(params))
            key = (metric.name, id(scoring))  # the same for every point: the rows' answers do not change
            if key not in own:
                own[key] = coinciding(scoring, columns)
            reasons = [p or m for p, m in zip(unresolved, own[key])]
            used = [steps[metric.step], *(steps[path] for path in metric.runs.values())]
            if nonfinite := not_finite(used, outputs, columns):
                reasons = [r or n for r, n in zip(reasons, nonfinite)]
            eligible = [r is None for r in reasons]
            inputs = run_inputs(steps[metric.step], outputs, eligible)
            inputs = replace(inputs, runs={role: run_inputs(steps[path], outputs, eligible)
                                           for role, path in metric.runs.items()})
            values = cls().compute(params, inputs)
            if (problem := values_problem(values, eligible)) is not None:  # named, before any file
                raise PluginError(f"metric {metric.kind!r} of {registry.provider('metric', metric.kind).distribution} "
                                  f"at $.metrics.{metric.name}: {problem}")
            estimated = steps[metric.step].estimate
            # The counts are core's, from the mask itself, whatever the metric wrote (or left out).
            summary = with_interval({**values.summary, "eligible": sum(eligible), "rows": len(eligible)}, values.rows)
            content = {
                "metric": metric.name,
                "kind": metric.kind,
                "point": dict(point.values),
                "summary": _number(summary),
                **({"interval": METHOD} if "mean_low" in summary else {}),
                **({"estimate": metric_estimate(steps[metric.step], cls(), params, inputs, outputs[metric.step])}
                   if estimated else {}),
                "values": _number(values.rows),
                "eligible": eligible,
                "reasons": reasons,
                **predicted(steps[metric.step], {role: steps[path] for role, path in metric.runs.items()}, outputs),
                "positions": positions_record(point, shown),
            }
            results.append(MetricResult(point, metric.name, content))
    return results


def predicted(scored: Any, runs: dict[str, Any], outputs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"predicted": {run: [token id per row]}}``: the top next token of the intervened run the metric scores
    and of the clean (``base``) run where the metric reads one; nothing where the engine brought no ``top`` back,
    or where the values are estimates (an estimated point has no intervened run)."""
    shown = {}
    for role, step in (("intervened", scored), ("base", runs.get("base"))):
        top = outputs.get(step.path, {}).get("top") if step is not None and not getattr(step, "estimate", None) else None
        if top is not None:
            shown[role] = [int(t) for t in top.tolist()]
    return {"predicted": shown} if shown else {}


def metric_estimate(step: Any, metric: Any, params: Any, inputs: MetricInputs, got: dict[str, Any]) -> dict:
    """What a metric file of an estimated run says besides its values: the method (and its integrated-gradient
    steps), and the metric's mean on the clean run the estimate starts from (the point's estimated effect is the
    mean's distance from it)."""
    clean = replace(inputs, logits=got["clean_answer_logits"].float(), logsumexp=got["clean_logsumexp"].float())
    return {"method": step.estimate, **({"steps": step.estimate_steps} if step.estimate_steps else {}),
            "clean_mean": _number(metric.compute(params, clean).summary.get("mean"))}


# One encoder for every value: json.dumps with options builds a new one per call.
_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode


def _render(obj: Any, indent: int) -> str:
    """JSON with short containers on one line and longer ones one item per line."""
    flat = _encode(obj)
    if not isinstance(obj, (dict, list)) or len(flat) + indent <= 100 or not obj:
        return flat
    pad = " " * (indent + 1)
    if isinstance(obj, dict):
        items = [f"{pad}{_encode(k)}: {_render(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if all(not isinstance(v, (dict, list)) for v in obj):
        # A long list of numbers: wrapped, several to a line.
        if all(type(v) in (int, float) for v in obj):
            parts = flat[1:-1].split(", ")  # numbers: json's text of each, already made once
        else:
            parts = [_encode(v) for v in obj]
        lines, line, width = [], [], 0
        for part in parts:
            width += len(part) + (2 if line else 0)
            line.append(part)
            if width + len(pad) > 96:
                lines.append(", ".join(line))
                line, width = [], 0
        lines += [", ".join(line)] if line else []
        return "[\n" + ",\n".join(pad + ln for ln in lines) + "\n" + " " * indent + "]"
    items = [pad + _render(v, indent + 1) for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def dump(obj: Any) -> bytes:
    """Canonical JSON bytes: key order as built, fixed layout, trailing newline."""
    return (_render(obj, 0) + "\n").encode()


def featurizer_file(plan: Plan, fit: Fit, state: dict[str, Any], run: dict[str, Any]) -> bytes:
    """A trained featurizer as safetensors, its identity in the header."""
    from safetensors.torch import save

    metadata = {
        **fit.identity,
        "dtype": plan.model.dtype,
        "train_data": fit.data_digest,
        "causalab": trained_digest(run, fit.featurizer.kind),
    }
    if "units" in state:  # the features it keeps (a mask's units, a boundary's dimensions): in load's table
        units = [int(u) for u in state["units"].reshape(-1).tolist()]
        metadata.update(units=json.dumps(units), size=str(len(units)))
    return canonical_safetensors(save({k: v.contiguous() for k, v in state.items()}, metadata=metadata))


def canonical_safetensors(blob: bytes) -> bytes:
    """The same file with its JSON header's keys sorted: safetensors writes them in hash order, which
    changes from one process to the next, so two saves of the same tensors would differ in bytes.
    Offsets in the header count from the end of the header, so the tensor bytes stay as they are."""
    size = int.from_bytes(blob[:8], "little")
    header = json.dumps(json.loads(blob[8:8 + size]), sort_keys=True, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)  # the format pads the header to 8 bytes
    return len(header).to_bytes(8, "little") + header + blob[8 + size:]


def output_files(
    plan: Plan, metrics: list[MetricResult], run: dict[str, Any], outputs: dict[str, Any] | None = None
) -> dict[str, bytes]:
    """Relative path -> bytes for everything the output folder holds."""
    files = {"document.json": dump(plan.document), "run.json": dump(run)}
    for point in plan.points:
        prefix = f"{point.name}/" if point.name else ""
        for step in point.steps:
            if step.kind == "fit":
                if step.path not in (outputs or {}):
                    raise EngineError(f"the engine returned no trained state for step {step.path!r}")
                files[f"{prefix}{step.featurizer.name}.safetensors"] = featurizer_file(
                    plan, step, outputs[step.path], run)
    for point in plan.points:
        if point.name:
            files[f"{point.name}/document.json"] = dump(point.document)
    for result in metrics:
        prefix = f"{result.point.name}/" if result.point.name else ""
        files[f"{prefix}{result.name}.json"] = dump(result.content)
    return files
