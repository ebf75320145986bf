"""What the run did, in words, read from its document.

Per write, where it landed, what it put there and from where; what was scored; the command that runs it
again, and when the run was written."""

from __future__ import annotations

import html
import json
from datetime import datetime, timezone
from typing import Any

from causalab_core.results.manifest import MANIFEST
from causalab_core.results.table import LoadedRun


def _value(value: Any) -> str:
    """A document value as a reader says it: a sweep reference as the axis it runs over."""
    if isinstance(value, dict) and set(value) == {"sweep"}:
        return f"each of {value['sweep']}"
    if isinstance(value, dict) and len(value) == 1:  # a position form such as {"variable": "entity"}
        (key, inner), = value.items()
        return f"{key} {_value(inner)}"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _site(spec: dict[str, Any]) -> str:
    head = f" head {_value(spec['head'])}" if spec.get("head") is not None else ""
    return (f"{_value(spec.get('site', 'block_output'))}{head}, layer {_value(spec.get('layer'))}, "
            f"position {_value(spec.get('position'))}")


def _featurizer(document: dict[str, Any], name: str | None) -> str:
    if not name:
        return "the whole vector"
    spec = (document.get("featurizers") or {}).get(name) or {}
    how = "trained in this run" if spec.get("train") else ("loaded from " + _value(spec["load"]) if spec.get("load")
                                                          else "as given")
    params = {k: v for k, v in spec.items() if k not in ("kind", "train", "load")}
    shown = ", ".join(f"{k} {_value(v)}" for k, v in params.items())
    return f"{name}: {spec.get('kind')}{' (' + shown + ')' if shown else ''}, {how}"


def writes(document: dict[str, Any]) -> list[dict[str, str]]:
    """One entry per write: its name, the run it changes, where, what it does, its source and featurizer."""
    reads = document.get("reads") or {}
    done = []
    for name, spec in (document.get("writes") or {}).items():
        intervention = spec.get("intervention") or {"kind": "swap"}
        params = {k: v for k, v in intervention.items() if k != "kind"}
        source = reads.get(spec.get("source")) if spec.get("source") else None
        done.append({
            "write": name,
            "into": f"the {spec.get('input')} run",
            "at": _site(spec),
            "does": intervention.get("kind", "swap") + (
                " (" + ", ".join(f"{k} {_value(v)}" for k, v in params.items()) + ")" if params else ""),
            "source": (f"{spec['source']}: the {source.get('input')} run at {_site(source)}" if source else "none"),
            "featurizer": _featurizer(document, spec.get("featurizer")),
        })
    return done


def scored(document: dict[str, Any]) -> list[str]:
    """What was measured: each metric, its kind and the run it scores; the direction and an estimate."""
    lines = [f"{name}: {spec.get('kind')} of the {spec.get('input') or 'written'} run"
             for name, spec in (document.get("metrics") or {}).items() if isinstance(spec, dict)]
    direction = document.get("direction")
    if isinstance(direction, dict):
        lines.append(f"direction: {direction.get('patch')} (clean {direction.get('clean')}, "
                     f"corrupted {direction.get('corrupted')})")
    if isinstance(document.get("estimate"), dict):
        steps = document["estimate"].get("steps", 1)
        lines.append(f"estimated by {document['estimate'].get('method')}"
                     + (f" (integrated gradients, {steps} steps)" if steps > 1 else "") + ", not patched")
    return lines


def command(run: LoadedRun) -> str:
    """The command that runs this document again as this run ran it."""
    r = run.run if isinstance(run.run, dict) else {}
    parts = ["causalab run document.json", f"--engine {r.get('engine')}"]
    if r.get("batch_size"):
        parts.append(f"--batch-size {r['batch_size']}")
    parts.append(f"--out {run.folder if run.folder is not None else 'OUT'}")
    return " ".join(parts)


def written(run: LoadedRun) -> str:
    """When the run's folder was written (its manifest's time), in UTC; a run kept in memory says so."""
    if run.folder is None:
        return "not written (kept in memory)"
    try:
        stamp = (run.folder / MANIFEST).stat().st_mtime
    except OSError:
        return "unknown"
    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def done_html(run: LoadedRun) -> str:
    """The section at the top of the page: the writes as a table, then what was scored."""
    e = html.escape
    entries = writes(run.document)
    columns = ["write", "into", "at", "does", "source", "featurizer"]
    table = ("<table class=\"done\"><thead><tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr></thead><tbody>"
             + "".join("<tr>" + "".join(f"<td>{e(entry[c])}</td>" for c in columns) + "</tr>" for entry in entries)
             + "</tbody></table>") if entries else "<p>No writes: the runs as the prompts give them.</p>"
    lines = "".join(f"<li>{e(line)}</li>" for line in scored(run.document))
    return f'<section class="what" id="what"><h2>What was done</h2>{table}<ul>{lines}</ul></section>'
