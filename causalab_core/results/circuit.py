"""A document's ``circuit``: the edge scores its sweep computed, a circuit chosen from them, its faithfulness.

The sweep (``edges: "each"``) patched, or estimated, each edge alone: an edge's score is how far that moves
the metric's mean from the clean run's. A circuit is chosen from the scores (``top``: the k largest in size;
``connected``: greedily from the logits back, as EAP-IG does; ``acdc``: Conmy et al.'s threshold search, each
edge patched for real). Then it is run with every edge outside it patched, as the document's patch patches
(from the source run, its mean, or zero), and so is each circuit size on the curve: its faithfulness is the
share of the full model's effect it keeps, ``(m(circuit) - m(nothing kept)) / (m(everything kept) -
m(nothing kept))``, with a percentile bootstrap over rows; the area under the curve over the share of edges
kept is MIB's CPR, the area between it and 1 its CMD (Mueller et al. 2025).

Runs after the sweep, as ``confirm`` does, through the run's own ``execute``; writes ``circuit.json`` and
``faithfulness.json`` beside the points, and ``circuit`` in run.json.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable

from causalab_core.results.intervals import LEVEL, resamples, scored
from causalab_core.results.score import MetricResult, _number, dump


def find_circuit(plan, metrics: list[MetricResult], files: dict[str, bytes], record: dict[str, Any],
                 execute: Callable, compiled: Callable[[dict], Any]) -> tuple[list, dict, dict]:
    """Choose the circuit and measure its faithfulness; ``compiled(document)`` compiles another document over
    the run's rows, ``execute(plan)`` runs it as the run's plan ran."""
    doc = plan.document
    spec = doc["circuit"]
    by = spec.get("metric") or next(iter(doc["metrics"]))
    edges = [tuple(e[0]) for e in doc["sweep"]["edge"]]
    runner = Runner(doc, spec["patch"], by, edges, execute, compiled)
    clean, corrupted = runner.means([edges, []])  # every edge as the clean run has it, every edge corrupted
    unpatched = corrupted if runner.denoising else clean  # the run the sweep's points patch one edge of
    scores = {}
    for m in metrics:
        if m.name == by:
            mean = m.content["summary"].get("mean")
            start = (m.content.get("estimate") or {}).get("clean_mean", unpatched)
            scores[tuple(dict(m.point.values)["edge"][0])] = mean - start if _finite(mean) and _finite(start) else 0.0
    select, readers = spec["select"], reading_nodes(edges)
    method = {key: len(value) if key == "edges" else value for key, value in select.items()}
    # The curve's circuits are the order's prefixes: the greedy order's for `connected`, the scores' otherwise.
    order = greedy(edges, scores, len(edges)) if "connected" in select else ranked(edges, scores)
    if "connected" in select:
        chosen = pruned(order[:select["connected"]], readers)
    elif "top" in select:
        chosen = order[:select["top"]]
    elif "acdc" in select:
        chosen = runner.acdc(select["acdc"], clean)
    else:  # one's own
        chosen = [tuple(e) for e in select["edges"]]
    counts = sorted(set(spec.get("curve") or default_curve(len(edges))) | {len(edges)} | {0})
    sets = [order[:c] for c in counts] + [chosen]
    rows = runner.values(sets)
    curve = [faithfulness(rows[i], rows[counts.index(0)], rows[counts.index(len(edges))]) | {"edges": c}
             for i, c in enumerate(counts)]
    mine = faithfulness(rows[-1], rows[counts.index(0)], rows[counts.index(len(edges))])
    x = [c / len(edges) for c in counts]
    cpr = trapezoid(x, [p["share"] for p in curve])
    cmd = trapezoid(x, [abs(1 - p["share"]) for p in curve])
    scored_by = (doc.get("estimate") or {}).get("method", "patching")
    ablation = ((doc["edges"][spec["patch"]].get("intervention") or {}).get("kind", "swap"))
    files["circuit.json"] = dump(_number({
        "metric": by, "select": method, "scored_by": scored_by, "ablation": ablation, "size": len(chosen),
        "edges": [list(e) for e in chosen], "nodes": nodes_of(chosen, readers), "faithfulness": mine,
        "scores": {f"{s}->{r}": scores.get((s, r), 0.0) for s, r in edges},
    }))
    files["faithfulness.json"] = dump(_number({
        "metric": by, "ablation": ablation, "edges_total": len(edges), "curve": curve, "cpr": cpr, "cmd": cmd,
        "interval": {"method": "percentile bootstrap over the rows, the three means resampled together",
                     "level": LEVEL},
    }))
    record = {**record, "circuit": _number({"metric": by, "select": method, "size": len(chosen),
                                            "faithfulness": mine["share"], "cpr": cpr, "cmd": cmd})}
    files["run.json"] = dump(record)
    return metrics, files, record


class Runner:
    """Runs edge sets of the document's patch for real: each set kept (every other edge patched), one point each."""

    def __init__(self, doc: dict, patch: str, metric: str, edges: list, execute: Callable, compiled: Callable):
        self.doc, self.patch, self.metric, self.edges = doc, patch, metric, edges
        self.execute, self.compiled = execute, compiled
        self.denoising = (doc.get("direction") or {}).get("patch") == "denoising"

    def values(self, kept_sets: list[list]) -> list[list]:
        """Per kept set, the metric's per-row values on the clean input with every edge outside the set patched
        from the corrupted run: each node reads the circuit's edges as the run computes them, the others
        corrupted (MIB's faithfulness). A denoising document's patch (clean into corrupted) is turned around for
        these runs: the clean input is run, the corrupted one is the source, and so is what its metrics score."""
        doc = copy.deepcopy({k: v for k, v in self.doc.items() if k not in ("circuit", "estimate", "direction")})
        patch = doc["edges"][self.patch]
        if self.denoising:
            clean, corrupted = self.doc["direction"]["clean"], self.doc["direction"]["corrupted"]
            patch["input"], patch["source"] = clean, corrupted if patch.get("source") else None
            patch = {k: v for k, v in patch.items() if v is not None}
            doc["edges"][self.patch] = patch
            for metric in doc["metrics"].values():
                if metric.get("input") == corrupted:
                    metric["input"] = clean
        keep = [frozenset(k) for k in kept_sets]
        distinct = list(dict.fromkeys(keep))  # a sweep runs each set once
        patch["edges"] = {"sweep": "patched"}
        doc["sweep"] = {"patched": [[list(e) for e in self.edges if e not in k] for k in distinct]}
        plan = self.compiled(doc)
        found, _, _ = self.execute(plan)
        by_point = {m.point.name: m.content["values"] for m in found if m.name == self.metric}
        values = [by_point[p.name] for p in plan.points]
        return [values[distinct.index(k)] for k in keep]

    def means(self, kept_sets: list[list]) -> list[float]:
        return [mean(v) for v in self.values(kept_sets)]

    def acdc(self, threshold: float, clean: float) -> list:
        """Conmy et al.'s search: receivers from the logits back, each edge into one patched for real and left out
        while the metric's mean moves less than ``threshold`` from the current circuit's. A node no kept edge
        leaves loses its inputs unpatched-for-free (nothing reads it)."""
        kept, current = list(self.edges), clean
        readers = reading_nodes(self.edges)
        receivers = list(dict.fromkeys(r for _, r in self.edges))[::-1]
        for receiver in receivers:
            into = [e for e in kept if e[1] == receiver][::-1]
            read = receiver == "logits" or any(s in readers[receiver] for s, _ in kept)
            if not read:
                kept = [e for e in kept if e[1] != receiver]
                continue
            for edge in into:
                trial = [e for e in kept if e != edge]
                (value,) = self.means([trial])
                if abs(value - current) < threshold:
                    kept, current = trial, value
        return kept


def reading_nodes(edges: list) -> dict[str, set[str]]:
    """Per receiver input of the whole graph's ``edges``, the nodes that read it: its own node, or under
    grouped-query attention (``a1.kv0<k>``) each head of the group (a layer's heads split evenly among its
    groups, in order)."""
    heads: dict[str, set[str]] = {}
    groups: dict[str, set[str]] = {}
    for _, r in edges:
        node = r.partition("<")[0]
        if r.endswith("<q>"):
            heads.setdefault(node.partition(".")[0], set()).add(node)
        elif ".kv" in node:
            groups.setdefault(node.partition(".")[0], set()).add(node)
    out = {}
    for _, r in edges:
        node = r.partition("<")[0]
        if ".kv" not in node:
            out[r] = {node}
            continue
        layer = node.partition(".")[0]
        names = sorted(heads[layer], key=lambda n: int(n.rpartition("h")[2]))
        per, g = len(names) // len(groups[layer]), int(node.rpartition("kv")[2])
        out[r] = set(names[g * per:(g + 1) * per])
    return out


def ranked(edges: list, scores: dict) -> list:
    """The edges by the size of their score, largest first (ties in graph order)."""
    return sorted(edges, key=lambda e: -abs(scores.get(e, 0.0)))


def greedy(edges: list, scores: dict, k: int) -> list:
    """EAP-IG's greedy choice: start from the logits; take the best-scored edge into a node already in the
    circuit, add its sender, repeat. Every prefix of the order is connected to the logits."""
    into: dict[str, list] = {}
    readers = reading_nodes(edges)
    for e in edges:
        for node in readers[e[1]]:
            into.setdefault(node, []).append(e)
    reached, order, candidates = {"logits"}, [], list(into.get("logits", []))
    while candidates and len(order) < k:
        best = max(candidates, key=lambda e: (abs(scores.get(e, 0.0)), -edges.index(e)))
        candidates.remove(best)
        order.append(best)
        if best[0] not in reached:
            reached.add(best[0])
            candidates += [e for e in into.get(best[0], []) if e not in order]
    return order


def reached_from_input(chosen: list, readers: dict) -> set[str]:
    """The nodes the input reaches through the chosen edges (``readers``: ``reading_nodes`` of the graph)."""
    reached, changed = {"input"}, True
    while changed:
        changed = False
        for s, r in chosen:
            if s in reached and not readers[r] <= reached:
                reached |= readers[r]
                changed = True
    return reached


def pruned(chosen: list, readers: dict) -> list:
    """The edges whose sender the input reaches through the chosen edges (EAP-IG prunes the rest)."""
    reached = reached_from_input(chosen, readers)
    return [e for e in chosen if e[0] in reached]


def reaches(chosen: list, edges: list) -> bool:
    """Whether the chosen edges hold a path from the input to the logits (``edges``: the whole graph's)."""
    return "logits" in reached_from_input(chosen, reading_nodes(edges))


def nodes_of(chosen: list, readers: dict) -> list[str]:
    return sorted({s for s, _ in chosen} | {n for _, r in chosen for n in readers[r]})


def default_curve(total: int) -> list[int]:
    """0, 1, 2, 4, ... below ``total``, and ``total``."""
    out, k = [0], 1
    while k < total:
        out.append(k)
        k *= 2
    return out + [total]


def mean(values: list) -> float:
    rows = scored(values)
    return math.fsum(rows) / len(rows) if rows else math.nan


def faithfulness(kept: list, nothing: list, everything: list) -> dict:
    """The circuit's mean, and the share of the full model's effect it keeps, each with a bootstrap interval:
    the three runs' rows resampled together (rows a run did not score left out of all three)."""
    import torch

    both = [(a, b, c) for a, b, c in zip(kept, nothing, everything) if all(_finite(v) for v in (a, b, c))]
    if not both:
        return {"mean": math.nan, "share": math.nan}
    x = torch.tensor(both, dtype=torch.float64)  # [rows, 3]
    share = lambda m: (m[..., 0] - m[..., 1]) / (m[..., 2] - m[..., 1])  # noqa: E731
    means = x.mean(0)
    out = {"mean": float(means[0]), "share": float(share(means))}
    if len(x) > 1:
        resampled = torch.cat([x[chunk].mean(1) for chunk in resamples(len(x))])  # [resamples, 3]
        tail = (1 - LEVEL) / 2
        q = torch.tensor([tail, 1 - tail], dtype=torch.float64)
        out["mean_low"], out["mean_high"] = torch.quantile(resampled[:, 0], q).tolist()
        out["share_low"], out["share_high"] = torch.quantile(share(resampled), q).tolist()
    return out


def trapezoid(x: list[float], y: list[float]) -> float:
    return sum((x[i + 1] - x[i]) * (y[i + 1] + y[i]) / 2 for i in range(len(x) - 1))


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
