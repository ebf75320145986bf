"""The report page: a finished run (and another to compare it with) as one self-contained HTML file.

Everything the page shows is read through ``causalab_core.load`` (only files the run's manifest lists, each
checked against it) and laid out as one JSON payload that the page's own script draws: per metric the
sweep as a heatmap (two axes) or a line (one), each point's rows with their prompts' tokens and the
read/write windows, and the run's provenance. No file is fetched when the page opens: the script, the
style and the data are inlined, and no URL is written into it but the ones a user's own data holds."""

from __future__ import annotations

import html
import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

from causalab_core.document.sweep import axis_label
from causalab_core.errors import OutputError
from causalab_core.results.added import add_file
from causalab_core.results.manifest import MANIFEST
from causalab_core.results.circuit import reading_nodes
from causalab_core.results.table import LoadedRun, load, position_axes

from causalab_report.done import command, done_html, written
from causalab_report.plot import _token as _token_label
from causalab_report.prompts import data_rows, decode_predicted, mismatch, prompt_tokens

PAGE = "report.html"
"""The file ``causalab report`` adds to the run's folder."""


def where(run: LoadedRun) -> Path:
    """How the page and its messages name a run: its folder, or ``(in memory)`` for ``run(out=None)``'s."""
    return run.folder if run.folder is not None else Path("(in memory)")


def _title(run: LoadedRun) -> str:
    return run.document.get("name") or where(run).name


def _metric_file(point: str, metric: str) -> str:
    return f"{point}/{metric}.json" if point else f"{metric}.json"


def _content(run: LoadedRun, rel: str) -> dict[str, Any]:
    return json.loads(run.files[rel])


def _answer_columns(spec: dict[str, Any], rows: list[dict[str, Any]] | None) -> list[str]:
    """The data columns a metric names (its answers and labels), in the order its spec names them."""
    names: list[str] = []
    for key, value in spec.items():
        if key in ("kind", "input"):
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and v not in names and (rows is None or any(v in r for r in rows[:1])):
                names.append(v)
    return names


def _summary(content: dict[str, Any]) -> dict[str, Any]:
    """A metric file's summary; an estimated point's also says so, with the clean run's mean it starts from and,
    where the point was confirmed, its patched mean."""
    out = dict(content.get("summary") or {})
    if isinstance(content.get("estimate"), dict):
        out.update(estimated=True, clean_mean=content["estimate"].get("clean_mean"))
        patched = (content.get("patched") or {}).get("summary") or {}
        if "mean" in patched:
            out["patched_mean"] = patched["mean"]
    return out


def run_payload(run: LoadedRun, data_file: Path | None = None) -> tuple[dict[str, Any], list[str]]:
    """What the page draws of one run, and notes for the terminal (what it cannot show, and why)."""
    document, notes = run.document, []
    if not isinstance(document.get("metrics"), dict) or not document["metrics"]:
        raise OutputError(f"{where(run) / 'document.json'}: not a document causalab wrote (no metrics)")
    sweep = document.get("sweep") or {}
    axes = list(sweep)
    labels = {a: [axis_label(v) for v in values] for a, values in sweep.items()}
    points = list(dict.fromkeys(s["point"] for s in run.records["summaries"]))  # the sweep's order
    metric_names = list(document["metrics"])
    rows, rows_note = data_rows(run, data_file)
    metrics = [{"name": m, "kind": (document["metrics"][m] or {}).get("kind"),
                "columns": _answer_columns(document["metrics"][m] or {}, rows)} for m in metric_names]
    summary: dict[str, list] = {m: [] for m in metric_names}
    values: dict[str, list] = {m: [] for m in metric_names}
    reasons: dict[str, list] = {m: [] for m in metric_names}
    predicted: dict[str, list] = {m: [] for m in metric_names}
    records: list[dict[str, Any]] = []
    record_index: dict[str, int] = {}
    at_point, coords = [], []
    ticks = {a: list(labels[a]) for a in axes}
    named = position_axes(document)
    rows_count = 0
    for point in points:
        contents = [_content(run, _metric_file(point, m)) for m in metric_names]
        for m, content in zip(metric_names, contents):
            summary[m].append(_summary(content))
            values[m].append(content["values"])
            rows_count = max(rows_count, len(content["values"]))
            reasons[m].append({str(i): r for i, r in enumerate(content.get("reasons") or []) if r is not None})
            predicted[m].append(content.get("predicted") if isinstance(content.get("predicted"), dict) else None)
        # A point's positions record and coordinates: its metric files share them, the first one says.
        positions = contents[0].get("positions") or {}
        point_records = []
        for name, record in positions.items():
            if not isinstance(record, dict):
                continue
            key = json.dumps([name, record], sort_keys=True)
            if key not in record_index:
                record_index[key] = len(records)
                rs = [r if isinstance(r, dict) else {} for r in record.get("rows") or []]
                records.append({"name": name, "role": record.get("role"), "input": record.get("input"),
                                "windows": [r.get("window") or [] for r in rs],
                                "tokens": [r.get("tokens") or [] for r in rs],
                                "reasons": {str(i): r["reason"] for i, r in enumerate(rs) if r.get("reason")}})
            point_records.append(record_index[key])
        at_point.append(point_records)
        chosen = contents[0].get("point") or {}
        coords.append([labels[a].index(axis_label(chosen.get(a))) if axis_label(chosen.get(a)) in labels[a] else 0
                       for a in axes])
        for a, names in named.items():  # an axis value's label carries the token it lands on
            if a not in labels or ticks[a][coords[-1][axes.index(a)]] != labels[a][coords[-1][axes.index(a)]]:
                continue
            i = coords[-1][axes.index(a)]
            token = next((t for t in (_token_label(positions[n]) for n in names
                                      if isinstance(positions.get(n), dict)) if t), None)
            if token is not None:
                ticks[a][i] = f"{labels[a][i]} ({token})"
    prompts, prompts_note = prompt_tokens(run, rows)
    if prompts is not None:
        prompts_note = mismatch(prompts, records)
        if prompts_note:
            prompts = None
    predicted_tokens, predicted_note = decode_predicted(run, predicted)
    for note in (rows_note, prompts_note, predicted_note):
        if note:
            notes.append(note)
    undefined = {m: sum(1 for s in summary[m] if not _finite(s.get("mean"))) for m in metric_names}
    for m, count in undefined.items():
        if count:
            notes.append(f"{m}: {count} of {len(points)} points have no defined value (shown as n/a)")
    payload = {
        "title": _title(run), "description": document.get("description") or "",
        "folder": str(where(run)), "axes": axes, "labels": labels, "ticks": ticks, "metrics": metrics,
        "points": [{"name": point, "at": c} for point, c in zip(points, coords)],
        "summary": summary, "values": values, "reasons": reasons, "records": records, "at_point": at_point,
        "rows": rows_count, "data": rows, "data_note": rows_note, "inputs": list(document.get("inputs") or []),
        "prompts": prompts, "prompts_note": prompts_note, "predicted": predicted_tokens,
        "featurizers": [{k: v for k, v in f.items()} for f in run.records["featurizers"]],
        "circuit": circuit_payload(run, labels, coords),
        "estimate": run.run.get("estimate") if isinstance(run.run, dict) else None,
    }
    return payload, notes


def circuit_payload(run: LoadedRun, labels: dict[str, list[str]], coords: list[list[int]]) -> dict[str, Any] | None:
    """A circuit search's circuit as the page draws it: its nodes by row (the embeddings at the bottom, each
    layer's heads then its MLP, the logits on top), its edges with their scores and the sweep point that scored
    each (a click shows that point's rows), its faithfulness and curve; None without one."""
    found = run.circuit
    if found is None or "edge" not in labels:
        return None
    curve = json.loads(run.files["faithfulness.json"])
    layers = max((int(n[1:].partition(".")[0]) for n in found["nodes"] if n[0] in "am" and n != "input"),
                 default=0) + 1
    point_of = {labels["edge"][c[0]]: p for p, c in enumerate(coords)}

    def row(node: str) -> int:
        if node == "input":
            return 0
        if node == "logits":
            return 2 * layers + 1
        layer = int(node[1:].partition(".")[0])
        return 2 * layer + (1 if node.startswith("a") else 2)

    readers = reading_nodes([tuple(v[0]) for v in run.document["sweep"]["edge"]])
    edges = []
    for sender, receiver in found["edges"]:
        label = f"{sender}->{receiver}"
        edges.append({"s": sender, "r": receiver, "to": sorted(readers[receiver]),  # a key/value group: its heads
                      "score": found["scores"].get(label), "p": point_of.get(label)})
    nodes = sorted({n for e in edges for n in (e["s"], *e["to"])}, key=lambda n: (row(n), n))
    return {"metric": found["metric"], "size": found["size"], "select": found["select"],
            "scored_by": found["scored_by"], "ablation": found["ablation"], "faithfulness": found["faithfulness"],
            "cpr": curve.get("cpr"), "curve": curve.get("curve"), "rows": 2 * layers + 2,
            "nodes": [{"name": n, "row": row(n)} for n in nodes], "edges": edges}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _differs(x: Any, y: Any, tolerance: float = 0.0) -> bool:
    """Whether two row values differ: by more than ``tolerance`` where both are numbers, else at all."""
    if _finite(x) and _finite(y):
        return abs(x - y) > tolerance
    return not (x == y and type(x) is type(y))


def compare_payload(a: LoadedRun, b: LoadedRun, report: dict[str, Any], line: str,
                    tolerance: float = 0.0) -> dict[str, Any]:
    """What the page shows of run B beside run A: B's summaries at A's points, B's rows where its metric
    file differs, the rows that differ by more than ``tolerance`` and the IIA rows that flipped
    (``causalab_core.results.compare``'s); ``hidden`` counts the points whose rows differ by no more."""
    points = list(dict.fromkeys(s["point"] for s in a.records["summaries"]))
    theirs = set(dict.fromkeys(s["point"] for s in b.records["summaries"]))
    summary_b: dict[str, list] = {}
    values_b: dict[str, dict[str, list]] = {}
    reasons_b: dict[str, dict[str, dict]] = {}
    differs: dict[str, dict[str, list[int]]] = {}
    hidden = 0
    for m in a.document["metrics"]:
        summary_b[m] = []
        for p, point in enumerate(points):
            rel = _metric_file(point, m)
            if point not in theirs or rel not in b.files:
                summary_b[m].append(None)
                continue
            mine, other = _content(a, rel), _content(b, rel)
            summary_b[m].append(_summary(other))
            if a.files[rel] == b.files[rel]:
                continue
            rows = [i for i in range(max(len(mine["values"]), len(other["values"])))
                    if i >= len(mine["values"]) or i >= len(other["values"])
                    or _differs(mine["values"][i], other["values"][i], tolerance)
                    or mine["eligible"][i] != other["eligible"][i]]
            if not rows:
                hidden += 1
                continue
            values_b.setdefault(m, {})[str(p)] = other["values"]
            reasons_b.setdefault(m, {})[str(p)] = {str(i): r for i, r in enumerate(other.get("reasons") or [])
                                                    if r is not None}
            differs.setdefault(m, {})[str(p)] = rows
    index = {point: p for p, point in enumerate(points)}
    flips = {m: {str(index[point]): rows for point, rows in entry["flips"].items() if point in index}
             for m, entry in report["metrics"].items() if entry.get("flips")}
    return {"title": _title(b), "folder": str(where(b)), "line": line,
            "identical": report["identical"], "same_experiment": report["same_experiment"],
            "experiment": report["experiment"], "metrics": report["metrics"],
            "only_in_a": report["only_in_a"], "only_in_b": report["only_in_b"],
            "summary": summary_b, "values": values_b, "reasons": reasons_b, "differs": differs, "flips": flips,
            "tolerance": tolerance, "hidden": hidden}


# ---------------------------------------------------------------- provenance (drawn here, as plain HTML)

def warnings(run: dict[str, Any]) -> list[str]:
    """What ``run.json`` warns of: a served dtype other than the document's, an allowed version skew, a
    server that did not describe itself, hypotheses the rows cannot tell apart."""
    found = []
    if run.get("dtype_mismatch"):
        found.append(f"served dtype differs from the document's: {_plain(run['dtype_mismatch'])}")
    for name, pair in (run.get("skew") or {}).items():
        pair = list(pair) if isinstance(pair, (list, tuple)) else [pair, "?"]
        found.append(f"allowed version skew: {name} {pair[0]} here, {pair[1] if len(pair) > 1 else '?'} on the server")
    server = run.get("server")
    if isinstance(server, dict) and server.get("answered") is False:
        found.append(f"the server did not describe itself: {server.get('error')}")
    data = run.get("data") if isinstance(run.get("data"), dict) else {}
    for pair, share in (data.get("labels_agree") or {}).items():
        if share == 1 or share == 1.0:
            found.append(f"the rows cannot tell {pair} apart (they agree on every row): no finding may choose "
                         "between them")
    return found


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _short(digest: Any) -> str:
    return f"{digest[:12]}…" if isinstance(digest, str) and len(digest) > 12 else str(digest)


def provenance(run: LoadedRun) -> list[tuple[str, str, str]]:
    """(label, value, full value for its tooltip) of what the run ran on, in the order a reader asks."""
    r = run.run if isinstance(run.run, dict) else {}
    model = run.document.get("model") or {}
    items = [("command", command(run), "the command that runs this document again as this run ran it"),
             ("written", written(run), ""),
             ("engine", f"{r.get('engine')}{' (remote)' if r.get('remote') else ''}", "")]
    if isinstance(r.get("estimate"), dict):  # the values are attribution's first-order estimates, not patched runs
        confirmed = r["estimate"].get("confirmed") or {}
        agreement = (f"; top {confirmed.get('top')} patched for real, spearman {confirmed.get('spearman')}"
                     if confirmed else "")
        items.append(("estimated", f"by {r['estimate'].get('method')}, not patched{agreement}", _plain(r["estimate"])))
    if isinstance(r.get("server"), dict):
        server = r["server"]
        versions = server.get("versions") or {}
        items.append(("server", f"{server.get('asked')} python {server.get('python', '?')}",
                      ", ".join(f"{k} {v}" for k, v in versions.items())))
    if r.get("served_dtype"):
        items.append(("served dtype", str(r["served_dtype"]), ""))
    if r.get("code"):
        items.append(("code on server", _plain(r["code"].get("mode") if isinstance(r["code"], dict) else r["code"]),
                      _plain(r["code"])))
    items.append(("model", f"{model.get('key')}{'@' + str(model.get('revision'))[:12] if model.get('revision') else ''}"
                           f" {model.get('dtype', '')}".strip(), _plain(model)))
    if r.get("loaded_dtype"):
        items.append(("loaded dtype", str(r["loaded_dtype"]), ""))
    versions = r.get("versions") or {}
    items.append(("versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v), ""))
    causalab = r.get("causalab") or {}
    dists = causalab.get("distributions") or {}
    items.append(("causalab digest", _short(causalab.get("digest")),
                  "\n".join(f"{k} {v.get('version')} {v.get('digest')}" for k, v in dists.items()
                            if isinstance(v, dict)) or str(causalab.get("digest"))))
    data = r.get("data") if isinstance(r.get("data"), dict) else {}
    if data:
        source = data.get("causal_model") and f"causal model {data.get('causal_model')}" or "data file"
        items.append(("data", f"{data.get('rows')} rows ({source}), sha256 {_short(data.get('sha256'))}",
                      str(data.get("sha256"))))
    reuse = r.get("position_reuse")
    if isinstance(reuse, dict):
        items.append(("position reuse", f"{'on' if reuse.get('used') else 'off'} ({reuse.get('why') or reuse.get('by')})", ""))
    arithmetic = r.get("arithmetic") or {}
    if arithmetic:
        items.append(("arithmetic", ", ".join(f"{k} {v}" for k, v in arithmetic.items()), ""))
    return items


def _provenance_html(run: LoadedRun, side: str) -> str:
    e = html.escape
    rows = "".join(f'<tr><th>{e(label)}</th><td title="{e(full)}">{e(value)}</td></tr>'
                   for label, value, full in provenance(run))
    warned = "".join(f"<li>{e(w)}</li>" for w in warnings(run.run if isinstance(run.run, dict) else {}))
    box = f'<ul class="warnings" data-side="{side}">{warned}</ul>' if warned else ""
    return (f'<div class="prov" data-side="{side}"><h3>{e(side)}: {e(str(where(run)))}</h3>{box}'
            f'<table class="kv">{rows}</table></div>')


def _asset(name: str) -> str:
    return resources.files("causalab_report").joinpath("assets", name).read_text(encoding="utf-8")


def _embedded(payload: dict[str, Any]) -> str:
    """The payload as JSON that no ``</script>`` (nor any other markup) in a user's text can end early."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def render(payload: dict[str, Any], head: str, done: str = "") -> str:
    """The page: provenance (plain HTML, readable without the script), the payload, the style and the script."""
    e = html.escape
    title = payload["title"] + (f" vs {payload['compare']['title']}" if payload.get("compare") else "")
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{e(title)} · causalab report</title>"
        f"<style>{_asset('report.css')}</style></head>\n<body>\n"
        f"<header><h1>{e(title)}</h1><p class=\"description\">{e(payload['description'])}</p>"
        f"{done}<div class=\"provenance\">{head}</div></header>\n"
        "<main id=\"app\"><noscript>The heatmaps and rows need JavaScript.</noscript></main>\n"
        f"<div id=\"tip\" role=\"tooltip\" hidden></div>\n"
        f"<script type=\"application/json\" id=\"report-data\">{_embedded(payload)}</script>\n"
        f"<script>{_asset('report.js')}</script>\n</body></html>\n")


TOLERANCE = 1e-6
"""``--compare``: a row whose values differ by at most this much (absolute) is not listed as a difference."""


def page_html(run: LoadedRun, other: LoadedRun | None = None, data_file: Path | None = None,
              tolerance: float = TOLERANCE) -> tuple[str, list[str]]:
    """The page of ``run`` (a folder's, or one kept in memory), and notes; with ``other``: that run beside it, and
    what differs by more than ``tolerance`` (``causalab_core.results.compare``)."""
    payload, notes = run_payload(run, data_file)
    head = _provenance_html(run, "A" if other is not None else "run")
    if other is not None:
        from causalab_core.results.compare import compare_runs, describe

        report = compare_runs(run, other)
        payload["compare"] = compare_payload(run, other, report, describe(report, "A", "B"), tolerance)
        head += _provenance_html(other, "B")
    return render(payload, head, done_html(run)), notes


def inline(run: LoadedRun) -> str:
    """The page inside an iframe, for a notebook cell: its script runs in its own document, nothing fetched."""
    page, _ = page_html(run)
    return (f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" '
            'style="width:100%;height:720px;border:1px solid #ddd"></iframe>')


def compare_name(other: Path) -> str:
    """The page ``--compare`` adds to A's folder: named after B's, so that comparing with C keeps it."""
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in other.resolve().name)[:80] or "run"
    return f"compare-{stem}.html"


def write_report(folder: Path, compare_with: Path | None = None, data_file: Path | None = None,
                 out: Path | None = None, tolerance: float = TOLERANCE) -> tuple[Path, list[str]]:
    """Write the page and return its path and notes: ``<folder>/report.html``, or with ``compare_with``
    ``<folder>/compare-<B>.html`` (either listed in the folder's manifest, added atomically); with ``out``, that
    file instead (refused where it exists)."""
    run = load(folder)
    other = load(compare_with) if compare_with is not None else None
    page, notes = page_html(run, other, data_file, tolerance)
    data = page.encode("utf-8")
    if out is not None:
        return write_new(out, data), notes
    return add_file(folder, PAGE if compare_with is None else compare_name(compare_with), data), notes


def write_new(path: Path, data: bytes) -> Path:
    """Write ``data`` to a file that does not exist yet (never over one a user has), all of it or nothing."""
    import os
    import tempfile

    if path.exists() or path.is_symlink():
        raise OutputError(f"--out {path}: exists; name a new file (nothing a user has is overwritten)")
    if not path.parent.is_dir():
        raise OutputError(f"--out {path}: no folder {path.parent}")
    if (path.parent / MANIFEST).is_file():  # a file no manifest lists would make the run folder foreign
        raise OutputError(f"--out {path}: inside a run's folder; leave out --out to add the page there")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as any file the user writes, not mkstemp's private 0600
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.link(tmp, path)  # fails where the name was taken meanwhile: never replaces it
    except FileExistsError:
        raise OutputError(f"--out {path}: exists; name a new file (nothing a user has is overwritten)") from None
    except OSError as exc:
        raise OutputError(f"--out {path}: cannot write it: {exc.strerror or exc}") from None
    finally:
        os.unlink(tmp)
    return path
