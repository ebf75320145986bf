"""Checks a schema cannot express: references between names, and plugin-provided kinds."""

from __future__ import annotations

import itertools
import json
from typing import Any

from pydantic import ValidationError

from causalab_core.document.messages import json_path
from causalab_core.document.interventions import check_interventions
from causalab_core.document.schema import ROLES, SWEEPABLE, Document, SweepRef, is_sweep_ref
from causalab_core.errors import DocumentError, MissingPlugin, PluginError, clip, echo, shorten
from causalab_core.plugins.registry import Registry


def _sweep_refs(document: Document) -> list[tuple[str, str]]:
    """Every (json path, axis) that references a sweep axis."""
    refs = []
    for group, specs in (("reads", document.reads), ("writes", document.writes)):
        for name, spec in specs.items():
            for field in ("layer", "position", "head", "site"):
                value = getattr(spec, field)
                if isinstance(value, SweepRef):
                    refs.append((f"$.{group}.{name}.{field}", value.sweep))
    for name, spec in document.featurizers.items():
        for key, value in spec.model_dump().items():
            if is_sweep_ref(value):
                refs.append((f"$.featurizers.{name}.{key}", value["sweep"]))
        for key in ("seed", "labels"):
            if spec.train is not None and isinstance(getattr(spec.train, key), SweepRef):
                refs.append((f"$.featurizers.{name}.train.{key}", getattr(spec.train, key).sweep))
    for name, spec in document.edges.items():
        if isinstance(spec.edges, SweepRef):
            refs.append((f"$.edges.{name}.edges", spec.edges.sweep))
    for name, spec in document.writes.items():  # an intervention's parameters (e.g. a steering's alpha)
        for key, value in (spec.intervention.model_dump() if spec.intervention else {}).items():
            if is_sweep_ref(value):
                refs.append((f"$.writes.{name}.intervention.{key}", value["sweep"]))
    return refs


RESERVED_FILES = ("document", "run", "manifest", "circuit", "faithfulness")
"""What causalab writes as ``<name>.json`` beside the metric files, which are ``<metric>.json``."""


def check_references(document: Document) -> None:
    inputs = set(document.inputs)
    inputs_shown = shorten(str(document.inputs))
    if len(inputs) != len(document.inputs):
        raise DocumentError("$.inputs: an input is listed twice")
    for group in ("variables", "columns"):
        for name in getattr(document, group):
            if name not in inputs:
                raise DocumentError(f"$.{group}.{name}: {echo(name)} is not one of the inputs {inputs_shown}")
    check_direction(document, inputs_shown)
    for name, read in document.reads.items():
        if read.input not in inputs:
            raise DocumentError(f"$.reads.{name}.input: {echo(read.input)} is not one of the inputs {inputs_shown}")
    for name, write in document.writes.items():
        where = f"$.writes.{name}"
        if write.input not in inputs:
            raise DocumentError(f"{where}.input: {echo(write.input)} is not one of the inputs {inputs_shown}")
        if write.source is not None and write.source not in document.reads:
            raise DocumentError(f"{where}.source: no read named {echo(write.source)}")
        if write.source is not None and document.reads[write.source].input == write.input:
            raise DocumentError(f"{where}.source: read {echo(write.source)} is taken from {echo(write.input)}, the input this write changes")
        if write.featurizer is not None and write.featurizer not in document.featurizers:
            raise DocumentError(f"{where}.featurizer: no featurizer named {echo(write.featurizer)} under $.featurizers")
    check_edges(document, inputs_shown)
    check_circuit(document)
    for group, specs in (("reads", document.reads), ("writes", document.writes)):
        for name, spec in specs.items():
            sites = document.sweep.get(spec.site.sweep, []) if isinstance(spec.site, SweepRef) else [spec.site]
            if any((site == "head") != (spec.head is not None) for site in sites):
                raise DocumentError(f"$.{group}.{name}.head: `head` is required with site 'head' and only allowed there")
    for name, metric in document.metrics.items():
        if name in RESERVED_FILES:
            raise DocumentError(f"$.metrics.{name}: the name is taken: causalab writes {name}.json itself")
        if metric.input is not None and metric.input not in inputs:
            raise DocumentError(f"$.metrics.{name}.input: {echo(metric.input)} is not one of the inputs {inputs_shown}")
    if document.metrics and not (document.writes or document.edges) \
            and any(m.input is None for m in document.metrics.values()):
        name = next(n for n, m in document.metrics.items() if m.input is None)
        raise DocumentError(f"$.metrics.{name}.input: there are no writes, so say which input to score")
    targets = {w.input for w in (*document.writes.values(), *document.edges.values())}
    if len(targets) > 1 and any(m.input is None for m in document.metrics.values()):
        name = next(n for n, m in document.metrics.items() if m.input is None)
        raise DocumentError(f"$.metrics.{name}.input: writes change several inputs {sorted(targets)}; say which to score")
    used = set()
    for where, axis in _sweep_refs(document):
        if axis not in document.sweep:
            raise DocumentError(f"{where}: no sweep axis named {echo(axis)} under $.sweep")
        used.add(axis)
        field = where.rsplit(".", 1)[1]
        if (where.startswith(("$.reads.", "$.writes.", "$.edges.")) or where.endswith((".train.seed", ".train.labels"))) \
                and field in SWEEPABLE:
            kind, accepts = SWEEPABLE[field]
            for i, value in enumerate(document.sweep[axis]):
                if not accepts(value) or is_sweep_ref(value):
                    raise DocumentError(f"$.sweep.{axis}[{i}] (used by {where}): expected {kind}, got {echo(value)}")
    for axis, values in document.sweep.items():
        if axis not in used:
            raise DocumentError(f"$.sweep.{axis}: the axis is not referenced by any read or write")
        first: dict[str, int] = {}
        for i, value in enumerate(values):
            key = json.dumps(value, sort_keys=True)
            if key in first:
                raise DocumentError(f"$.sweep.{axis}[{i}]: repeats $.sweep.{axis}[{first[key]}] "
                                    f"({echo(value)}); each point would run twice")
            first[key] = i


EDGE_KINDS = ("swap", "mean", "zero")


def check_edges(document: Document, inputs_shown: str) -> None:
    """An edge patch names inputs, a source where its kind reads one, and an input no write or other patch
    changes (one run patches edges or writes sites)."""
    patched: dict[str, str] = {}
    for name, spec in document.edges.items():
        where = f"$.edges.{name}"
        for key in ("input", "source"):
            value = getattr(spec, key)
            if value is not None and value not in document.inputs:
                raise DocumentError(f"{where}.{key}: {echo(value)} is not one of the inputs {inputs_shown}")
        kind = spec.intervention.kind if spec.intervention is not None else "swap"
        if kind not in EDGE_KINDS:
            raise DocumentError(f"{where}.intervention.kind: an edge is patched by {', '.join(EDGE_KINDS)}, "
                                f"not {echo(kind)}")
        if spec.intervention is not None and set(spec.intervention.model_dump()) != {"kind"}:
            extra = sorted(set(spec.intervention.model_dump()) - {"kind"})
            raise DocumentError(f"{where}.intervention.{extra[0]}: an edge's {kind} takes no parameters")
        if kind == "zero" and spec.source is not None:
            raise DocumentError(f"{where}.source: a zero patch reads no run; leave `source` out")
        if kind != "zero" and spec.source is None:
            raise DocumentError(f"{where}.source: a {kind} patch takes the senders' terms from another input's "
                                "run; name it")
        if spec.source == spec.input:
            raise DocumentError(f"{where}.source: {echo(spec.source)} is the input this patch changes")
        if spec.input in patched:
            raise DocumentError(f"{where}.input: {echo(spec.input)}'s run is patched by $.edges.{patched[spec.input]} "
                                "already; put every edge of one run in one patch")
        patched[spec.input] = name
        written = [w for w, write in document.writes.items() if write.input == spec.input]
        if written:
            raise DocumentError(f"{where}.input: $.writes.{written[0]} writes {echo(spec.input)}'s run too; a run "
                                "patches edges or writes sites, not both")
        reads = [r for r, read in document.reads.items() if read.input == spec.input]
        if reads:
            raise DocumentError(f"{where}.input: $.reads.{reads[0]} reads {echo(spec.input)}'s run, which this "
                                "patch changes; read another input")


def check_circuit(document: Document) -> None:
    """A circuit names an edge patch that scores each edge, a metric of the document, and no other sweep."""
    spec = document.circuit
    each = [n for n, e in document.edges.items() if e.edges == "each"]
    if len(each) > 1:
        raise DocumentError(f"$.edges.{each[1]}.edges: \"each\" makes the sweep axis `edge`, and "
                            f"$.edges.{each[0]} makes it already")
    if each and "edge" in document.sweep:
        raise DocumentError(f"$.sweep.edge: $.edges.{each[0]}.edges \"each\" makes this axis; name yours otherwise")
    if spec is None:
        return
    if spec.patch not in document.edges:
        raise DocumentError(f"$.circuit.patch: no edge patch named {echo(spec.patch)} under $.edges")
    if document.edges[spec.patch].edges != "each":
        raise DocumentError(f"$.circuit.patch: $.edges.{spec.patch}.edges must be \"each\": its points score the "
                            "edges a circuit is chosen from")
    if spec.metric is not None and spec.metric not in document.metrics:
        raise DocumentError(f"$.circuit.metric: {echo(spec.metric)} is not one of $.metrics")
    if not document.metrics:
        raise DocumentError("$.circuit: a circuit is chosen by a metric, and $.metrics has none")
    if document.sweep:
        raise DocumentError(f"$.sweep.{next(iter(document.sweep))}: a circuit is found over one sweep, the edges'; "
                            "run other settings as documents of their own")
    if spec.select.acdc is not None and document.estimate is not None:
        raise DocumentError("$.circuit.select.acdc: ACDC patches each edge for real; leave out $.estimate")


def check_direction(document: Document, inputs_shown: str) -> None:
    """``direction`` names two different inputs, none of which is called by a role's name; without one, a
    role used as an input is named as what it is."""
    direction = document.direction
    if direction is None:
        for group in ("reads", "writes", "metrics"):
            for name, spec in getattr(document, group).items():
                if spec.input in ROLES and spec.input not in document.inputs:
                    raise DocumentError(f"$.{group}.{name}.input: {echo(spec.input)} is a role under $.direction, "
                                        "and the document has none")
        return
    for key in ("clean", "corrupted"):
        if getattr(direction, key) not in document.inputs:
            raise DocumentError(f"$.direction.{key}: {echo(getattr(direction, key))} is not one of the inputs "
                                f"{inputs_shown}")
    if direction.clean == direction.corrupted:
        raise DocumentError("$.direction.corrupted: the clean and the corrupted input are one input")
    for name in document.inputs:
        if name in ROLES:
            raise DocumentError(f"$.inputs: {echo(name)} is a role under $.direction; name the input otherwise")


def _sweep_variants(document: Document, spec: Any) -> list[tuple[dict, dict[str, tuple[str, int]]]]:
    """A spec's parameters at each point: every combination of the axes its parameters take, and for each
    swept key the axis and index its value came from (a key's axis is one choice, however many keys use it)."""
    base = spec.model_dump()
    keys = {key: value["sweep"] for key, value in base.items() if is_sweep_ref(value)}
    axes = list(dict.fromkeys(keys.values()))
    variants = []
    for combo in itertools.product(*(range(len(document.sweep.get(a, []))) for a in axes)):
        index = dict(zip(axes, combo))
        chosen = {key: (axis, index[axis]) for key, axis in keys.items()}
        variants.append(({**base, **{k: document.sweep[a][i] for k, (a, i) in chosen.items()}}, chosen))
    return variants


def _check_params(cls: type, spec: Any, where: str, skip: set[str],
                  swept: dict[str, tuple[str, int]] | None = None) -> Any:
    dumped = spec if isinstance(spec, dict) else spec.model_dump()
    data = {k: v for k, v in dumped.items() if k not in skip}
    try:  # strict, as JSON: "0.5" or true is not a number, 2.0 not an integer, whatever a plugin's fields say
        return cls.Params.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        if swept and loc and loc[0] in swept:  # a swept value: named where it is written, like literal ones
            axis, i = swept[loc[0]]
            inner = json_path(loc[1:], data[loc[0]]).removeprefix("$")
            raise DocumentError(f"$.sweep.{axis}[{i}]{inner} (used by {where}.{loc[0]}): {clip(msg)}") from None
        path = json_path(loc, data).removeprefix("$")
        raise DocumentError(f"{where}{path}: {clip(msg)}") from None


def _same_once_checked(document: Document, checked: dict[str, dict[int, list[str]]]) -> None:
    """Refuse two values of an axis that only featurizer parameters take and that validate to the same
    parameters (``"3"`` and ``3`` for a rank): each point would run twice."""
    other_uses = {axis for where, axis in _sweep_refs(document) if not _is_featurizer_param(where)}
    for axis, by_index in checked.items():
        if axis in other_uses:
            continue  # the raw values differ (repeats are refused), and a read or write sees them raw
        first: dict[tuple, int] = {}
        for i in sorted(by_index):
            key = tuple(by_index[i])
            if key in first:
                j = first[key]
                values = document.sweep[axis]
                uses = ", ".join(sorted({"$.featurizers.{}.{}".format(*json.loads(use)[:2]) for use in key}))
                raise DocumentError(f"$.sweep.{axis}[{i}] (used by {uses}): {echo(values[i])} checks to the same "
                                    f"parameters as $.sweep.{axis}[{j}] ({echo(values[j])}); each point would run twice")
            first[key] = i


def _is_featurizer_param(where: str) -> bool:
    return where.startswith("$.featurizers.") and not where.endswith((".train.seed", ".train.labels"))


def check_plugins(document: Document, registry: Registry) -> dict[str, Any]:
    """Every kind a document names is installed, and its parameters are valid; returns each metric's parameters."""
    metric_params = {}
    try:
        for name, metric in document.metrics.items():
            cls = registry.get("metric", metric.kind, f"$.metrics.{name}.kind")
            metric_params[name] = _check_params(cls, metric, f"$.metrics.{name}", {"kind", "input"})
            named = cls().columns(metric_params[name])
            if not isinstance(named, (tuple, list)) or not all(isinstance(c, str) for c in named):
                # a str would be read as its letters, each "a column the data lacks": blame the metric, not the data
                owner = registry.provider("metric", metric.kind).distribution
                raise PluginError(f"metric {metric.kind!r} of {owner} at $.metrics.{name}: columns() returned "
                                  f"{echo(repr(named))}, not a tuple of column names")
            columns = list(named)
            twice = next((c for i, c in enumerate(columns) if c in columns[:i]), None)
            if twice is not None:  # one answer against itself: every row would score the same, whatever ran
                raise DocumentError(f"$.metrics.{name}: column {echo(twice)} is named twice; the metric would "
                                    "compare the answer with itself")
        checked: dict[str, dict[int, list[str]]] = {}  # axis -> index -> each featurizer parameter it becomes
        for name, feat in document.featurizers.items():
            cls = registry.get("featurizer", feat.kind, f"$.featurizers.{name}.kind")
            for values, swept in _sweep_variants(document, feat):
                params = _check_params(cls, values, f"$.featurizers.{name}", {"kind", "train", "over"}, swept)
                dumped = params.model_dump(mode="json")
                for key, (axis, i) in swept.items():
                    if all(j == 0 or a == axis for a, j in swept.values()):  # vary this axis alone
                        checked.setdefault(axis, {}).setdefault(i, []).append(
                            json.dumps([name, key, dumped[key] if key in dumped else values[key]], sort_keys=True))
            check_training(name, feat, cls, params, document)
        _same_once_checked(document, checked)
        check_interventions(document, registry, _sweep_variants, _check_params)
        resolvers = [cls() for cls in registry.components("position").values()]
        for group, specs in (("reads", document.reads), ("writes", document.writes)):
            for name, spec in specs.items():
                where = f"$.{group}.{name}.position"
                if isinstance(spec.position, SweepRef):
                    axis = spec.position.sweep
                    for i, value in enumerate(document.sweep.get(axis, [])):
                        check_position(value, resolvers, registry, f"$.sweep.{axis}[{i}] (used by {where})")
                else:
                    check_position(spec.position, resolvers, registry, where)
    except MissingPlugin as exc:  # the document names what is not installed; a plugin's own mistake stays its own
        raise DocumentError(str(exc)) from None
    return metric_params


def check_training(name: str, feat: Any, cls: type, params: Any, document: Document) -> None:
    """What a featurizer's ``train`` (or its absence) and ``over`` must be for its kind."""
    where = f"$.featurizers.{name}"
    if feat.over is not None and feat.over not in document.featurizers:
        raise DocumentError(f"{where}.over: no featurizer named {echo(feat.over)} "
                            f"(defined: {', '.join(sorted(document.featurizers))})")
    if feat.over == name:
        raise DocumentError(f"{where}.over: a featurizer cannot work over its own features")
    fits = getattr(cls, "fits", "interchange")
    if feat.train is None:
        if fits == "activations" and not getattr(params, "load", None):
            raise DocumentError(f"{where}: featurizer kind {echo(feat.kind)} is fitted from the site's activations: "
                                "give it `train` (the rows to fit on) or `load` (a file a run fitted)")
        if getattr(cls, "needs_fit", False) and not getattr(params, "load", None):
            raise DocumentError(f"{where}: featurizer kind {echo(feat.kind)} changes nothing untrained: give it "
                                "`train` or `load` (a file a run trained)")
        return
    if not getattr(cls, "trainable", False):
        raise DocumentError(f"{where}.train: featurizer kind {echo(feat.kind)} has nothing to train")
    if getattr(params, "load", None):
        raise DocumentError(f"{where}: `train` and `load` together; give one (a loaded file is used as it is)")
    if fits == "activations":
        unused = sorted({"label", "epochs", "lr"} & feat.train.model_fields_set)
        if unused:
            raise DocumentError(f"{where}.train.{unused[0]}: featurizer kind {echo(feat.kind)} is fitted in one pass "
                                f"from the activations; {', '.join(f'`{u}`' for u in unused)} do not apply")
    if fits == "interchange" and feat.train.label is None:
        raise DocumentError(f"{where}.train.label: featurizer kind {echo(feat.kind)} is trained to predict an answer "
                            "column; name it")
    if fits == "activations" and feat.train.labels == "shuffled":
        raise DocumentError(f"{where}.train.labels: featurizer kind {echo(feat.kind)} is fitted from activations, not "
                            "labels, so shuffling them would change nothing; its control is a random subspace")


def resolver_for(value: Any, resolvers: list, where: str) -> Any:
    """The one resolver that accepts a position form; None for none. Two that both accept it is an
    error naming them: no plugin may take over a form another one owns."""
    accepting = [r for r in resolvers if r.accepts(value)]
    if len(accepting) > 1:
        raise DocumentError(f"{where}: position {echo(value)} is accepted by more than one resolver "
                            f"({', '.join(sorted(r.name for r in accepting))}); a form must belong to one")
    return accepting[0] if accepting else None


def check_position(value: Any, resolvers: list, registry: Registry, where: str) -> None:
    resolver = resolver_for(value, resolvers, where)
    if resolver is not None:
        try:
            resolver.check(value)
        except ValueError as exc:
            raise DocumentError(f"{where}: {clip(str(exc))}") from None
        return
    if isinstance(value, int) and not registry.names("position"):
        registry.get("position", "index", where)
    raise DocumentError(
        f"{where}: no installed position resolver accepts {echo(value)} "
        f"(installed: {', '.join(registry.names('position')) or 'none'})"
    )


def check_document(document: Document, registry: Registry, source: str = "") -> dict[str, Any]:
    """Raise a DocumentError (prefixed with the document's file) for what the schema cannot see.

    Returns each metric's validated parameters (validated here, once, with the document's paths).
    """
    try:
        check_references(document)
        return check_plugins(document, registry)
    except DocumentError as exc:
        if not source:
            raise
        raise DocumentError(f"{source}: {exc}") from None
