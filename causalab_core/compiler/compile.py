"""Document + weightless shell -> plan. No weights are loaded here."""

from __future__ import annotations

import json
from typing import Any

from causalab_core.compiler.prompts import tokenize_inputs
from causalab_core.compiler.shell import Shell, load_shell, resolve_source
from causalab_core.compiler.sweep import points, substitute
from causalab_core.contracts import Resolved
from causalab_core.document import LoadedDocument, check_document
from causalab_core.document.schema import ReadSpec, WriteSpec
from causalab_core.errors import PlanError
from causalab_core.plan import (
    FeaturizerRef, MetricPlan, Plan, Point, PositionRecord, Read, Run, Scoring, Write,
)
from causalab_core.plugins import Registry


def answer_token(tokenizer: Any, rows: tuple[dict, ...], column: str, where: str) -> tuple[int, ...]:
    """The single token id of an answer column on each row."""
    ids = []
    for i, row in enumerate(rows):
        if column not in row:
            raise PlanError(f"{where}: data row {i} has no column {column!r}")
        value = row[column]
        if not isinstance(value, str):
            raise PlanError(f"{where}: data row {i}, column {column!r}: an answer must be a string")
        tokens = tokenizer(value, add_special_tokens=False)["input_ids"]
        if len(tokens) != 1:
            raise PlanError(
                f"{where}: data row {i}, column {column!r}: answer {value!r} is {len(tokens)} tokens, "
                "not one (answers are scored as the next token; mind the leading space)"
            )
        ids.append(tokens[0])
    return tuple(ids)


def _some(by_row: dict, limit: int = 8) -> str:
    """A dict of rows for a message, cut after ``limit`` entries."""
    shown = dict(list(by_row.items())[:limit])
    more = len(by_row) - len(shown)
    return f"{shown}" + (f" and {more} more" if more else "")


class Compiler:
    """Compiles one loaded document against one shell."""

    def __init__(self, loaded: LoadedDocument, shell: Shell, registry: Registry):
        self.loaded, self.doc, self.shell, self.registry = loaded, loaded.document, shell, registry
        self.ref = shell.model_ref(self.doc.model.key, self.doc.model.revision, self.doc.model.dtype)
        self.prompts = tokenize_inputs(self.doc.inputs, loaded.rows, shell.tokenizer, self.doc.variables)
        self.resolvers = [cls() for cls in registry.components("position").values()]
        self._positions: dict[tuple[str, str], tuple[Resolved, ...]] = {}
        self.scorings = self._scorings()

    # -- positions --------------------------------------------------------------

    def resolve(self, input_name: str, spec: Any) -> tuple[Resolved, ...]:
        key = (input_name, json.dumps(spec, sort_keys=True))
        if key not in self._positions:
            resolver = next(r for r in self.resolvers if r.accepts(spec))
            self._positions[key] = tuple(resolver.resolve(spec, row) for row in self.prompts[input_name])
        return self._positions[key]

    def record(self, name: str, role: str, input_name: str, resolved: tuple[Resolved, ...]) -> PositionRecord:
        decode = self.shell.tokenizer.decode
        rows = self.prompts[input_name]
        return PositionRecord(
            name=name, role=role, input=input_name,
            windows=tuple(r.positions for r in resolved),
            tokens=tuple(tuple(decode([row.ids[p]]) for p in r.positions) for r, row in zip(resolved, rows)),
            reasons=tuple(r.reason for r in resolved),
        )

    # -- sites ------------------------------------------------------------------

    def site(self, spec: ReadSpec | WriteSpec, where: str, point: str):
        at = f" (sweep point {point})" if point else ""
        if spec.layer >= self.ref.layers:
            raise PlanError(
                f"{where}.layer: layer {spec.layer} is out of range: {self.ref.architecture} "
                f"has {self.ref.layers} layers (0 to {self.ref.layers - 1}){at}"
            )
        if spec.head is not None and spec.head >= self.ref.heads:
            raise PlanError(f"{where}.head: head {spec.head} is out of range: {self.ref.heads} heads{at}")
        return self.shell.site(spec.site, spec.layer, spec.head)

    # -- scoring ----------------------------------------------------------------

    def metric_step_input(self, metric) -> str:
        return metric.input or next(iter(self.doc.writes.values())).input

    def _scorings(self) -> dict[str, Scoring]:
        """Per scored input: the answer columns every metric on it needs, tokenized."""
        columns: dict[str, list[str]] = {}
        tokens: dict[str, tuple[int, ...]] = {}
        for name, metric in self.doc.metrics.items():
            cls = self.registry.get("metric", metric.kind)
            params = cls.Params.model_validate(metric.model_dump(exclude={"kind", "input"}))
            wanted = columns.setdefault(self.metric_step_input(metric), [])
            for column in cls().columns(params):
                if column not in tokens:
                    tokens[column] = answer_token(self.shell.tokenizer, self.loaded.rows, column, f"$.metrics.{name}")
                if column not in wanted:
                    wanted.append(column)
        return {
            input_name: Scoring(tuple(cols), tuple(zip(*(tokens[c] for c in cols))))
            for input_name, cols in columns.items()
        }

    # -- points -----------------------------------------------------------------

    def point(self, name: str, values: tuple) -> Point:
        point_doc = substitute(self.doc, values)
        rows = self.loaded.rows
        eligible = [True] * len(rows)
        records: list[PositionRecord] = []
        reads: dict[str, Read] = {}
        read_inputs: dict[str, str] = {}
        for rname, raw in point_doc["reads"].items():
            spec = ReadSpec.model_validate(raw)
            site = self.site(spec, f"$.reads.{rname}", name)
            resolved = self.resolve(spec.input, spec.position)
            records.append(self.record(rname, "read", spec.input, resolved))
            for i, r in enumerate(resolved):
                eligible[i] = eligible[i] and r.reason is None
            reads[rname] = Read(rname, site, tuple(r.positions for r in resolved))
            read_inputs[rname] = spec.input
        writes: dict[str, list[Write]] = {}
        for wname, raw in point_doc["writes"].items():
            spec = WriteSpec.model_validate(raw)
            where = f"$.writes.{wname}"
            site = self.site(spec, where, name)
            resolved = self.resolve(spec.input, spec.position)
            records.append(self.record(wname, "write", spec.input, resolved))
            source = reads[spec.source]
            self._check_write(wname, where, name, site, resolved, source)
            featurizer = None
            if spec.featurizer is not None:
                fspec = self.doc.featurizers[spec.featurizer]
                featurizer = FeaturizerRef(spec.featurizer, fspec.kind, fspec.model_dump(exclude={"kind"}))
            writes.setdefault(spec.input, []).append(
                Write(wname, spec.source, site, tuple(r.positions for r in resolved), featurizer)
            )
        steps = self._steps(name, reads, read_inputs, writes)
        metrics = tuple(
            MetricPlan(mname, m.kind, self._path(name, self.metric_step_input(m)), m.model_dump(exclude={"kind", "input"}))
            for mname, m in self.doc.metrics.items()
        )
        return Point(name, values, steps, metrics, tuple(records), tuple(eligible), point_doc)

    def _check_write(self, wname, where, point, site, resolved, source: Read) -> None:
        at = f" at sweep point {point}" if point else ""
        missing = {i: r.reason for i, r in enumerate(resolved) if r.reason is not None}
        if missing:
            raise PlanError(
                f"write {wname!r} has nothing to write on row(s) {_some(missing)}{at}. A read may skip a row; "
                "a write may not: the row would score as if an intervention had happened"
            )
        unread = {i: "source_not_eligible" for i, w in enumerate(source.windows) if not w}
        if unread:
            raise PlanError(f"write {wname!r}: its source read {source.name!r} has no value on row(s) {_some(unread)}{at}")
        if site.width != source.site.width:
            raise PlanError(
                f"{where}: site width {site.width} differs from read {source.name!r}'s width {source.site.width}{at}"
            )
        widths = {i: (len(w.positions), len(s)) for i, (w, s) in enumerate(zip(resolved, source.windows))
                  if len(w.positions) != len(s)}
        if widths:
            raise PlanError(
                f"write {wname!r}: window widths differ from read {source.name!r} on row(s) "
                f"{{row: (write, read)}} {_some(widths)}{at}"
            )

    def _path(self, point: str, input_name: str) -> str:
        return f"{point}/{input_name}" if point else input_name

    def _steps(self, point, reads, read_inputs, writes) -> tuple[Run, ...]:
        """One run per input that has work; inputs read from run before inputs written to."""
        order = sorted(self.doc.inputs, key=lambda i: (i in writes, self.doc.inputs.index(i)))
        steps = []
        for input_name in order:
            mine = tuple(r for n, r in reads.items() if read_inputs[n] == input_name)
            wrote = tuple(writes.get(input_name, ()))
            scoring = self.scorings.get(input_name)
            if mine or wrote or scoring:
                steps.append(Run(self._path(point, input_name), input_name, mine, wrote, scoring))
        return tuple(steps)

    @staticmethod
    def _token_segments(row) -> dict[str, tuple[int, int]]:
        """Each chat turn as a token span [start, stop), as the plan ships it."""
        out = {}
        for name, (start, end) in row.segments.items():
            tokens = [i for i, (s, e) in enumerate(row.offsets) if e > s and s < end and e > start]
            if tokens:
                out[name] = (tokens[0], tokens[-1] + 1)
        return out

    def plan(self) -> Plan:
        built = tuple(self.point(name, values) for name, values in points(self.doc))
        requires = ("heads",) if any(
            s.site.component == "head" for p in built for st in p.steps for s in (*st.reads, *st.writes)
        ) else ()
        return Plan(
            model=self.ref,
            rows=len(self.loaded.rows),
            prompts={name: tuple(r.ids for r in rows) for name, rows in self.prompts.items()},
            segments={name: tuple(self._token_segments(r) for r in rows)
                      for name, rows in self.prompts.items() if any(r.segments for r in rows)},
            points=built,
            requires=requires,
            document=self.doc.model_dump(mode="json"),
        )


def compile_document(loaded: LoadedDocument, registry: Registry) -> Plan:
    """Validate against the installed plugins, build the shell, and compile the plan."""
    check_document(loaded.document, registry, loaded.source)
    model = loaded.document.model
    shell = load_shell(resolve_source(model.key, model.revision, registry))
    return Compiler(loaded, shell, registry).plan()
