"""Document + weightless shell -> plan. No weights are loaded here."""

from __future__ import annotations

import json
from typing import Any

from causalab_core.compiler.answers import answer_token
from causalab_core.compiler.circuits import EdgePatching, each_edge
from causalab_core.compiler.prompts import check_prompts, tokenize_inputs
from causalab_core.compiler.shell import Shell, load_shell, resolve_source
from causalab_core.document.sweep import points, substitute
from causalab_core.compiler.reuse import choose as choose_position_reuse
from causalab_core.plugins import returns
from causalab_core.plugins.contracts import VIEWS, Resolved
from causalab_core.document import LoadedDocument, check_document
from causalab_core.document.load import row_name
from causalab_core.document.schema import ReadSpec, WriteSpec
from causalab_core.errors import DocumentError, PlanError, echo
from causalab_core.compiler.interventions import lowered
from causalab_core.compiler.estimates import check_estimable, estimated
from causalab_core.compiler.featurizers import (
    Featurizing, TrainingRows, defaults_of, identity, train_rows, trained_labels,
)
from causalab_core.compiler.steps import eligible_rows, run_order
from causalab_core.ir import (
    FeaturizerRef, Fit, MetricPlan, Plan, Point, PositionRecord, Read, Run, Scoring, Write,
)
from causalab_core.plugins.registry import Registry


def _some(by_row: dict, rows: Any, limit: int = 8) -> str:
    """Rows (by index) for a message, named as every message names them, cut after ``limit`` entries."""
    shown = {row_name(rows, i).removeprefix("row "): v for i, v in list(by_row.items())[:limit]}
    more = len(by_row) - len(shown)
    return f"{shown}" + (f" and {more} more" if more else "")


class Compiler(Featurizing):
    """Compiles one loaded document against one shell."""

    def __init__(self, loaded: LoadedDocument, shell: Shell, registry: Registry, metric_params: dict[str, Any]):
        self.loaded, self.doc, self.shell, self.registry = loaded, loaded.document, shell, registry
        self.metric_params = metric_params
        self.doc_json = self.doc.model_dump(mode="json")
        self.ref = shell.model_ref(self.doc.model.key, self.doc.model.revision, self.doc.model.dtype,
                                   self.doc.model.init_seed if self.doc.model.init == "random" else None)
        self.prompts = tokenize_inputs(self.doc.inputs, loaded.rows, shell.tokenizer, self.doc.variables,
                                       self.doc.columns)
        check_prompts(self.prompts, loaded.rows, shell.tokenizer, shell.config)
        self.resolvers = [cls() for cls in registry.components("position").values()]
        self._positions: dict[tuple[str, str, str], tuple[Resolved, ...]] = {}
        self.used_resolvers: set[str] = set()
        self._training: dict[str, TrainingRows] = {}
        """Training rows per data spec (canonical JSON)."""
        self.scorings = self._scorings()
        self._decoded: dict[int, str] = {}
        # What a large sweep repeats from point to point, built once and shared by the points (the plan is
        # frozen data): a resolved position's windows and record, a site, a metric's params and runs.
        self._windows: dict[int, tuple] = {}
        self._records: dict[tuple, PositionRecord] = {}
        self._sites: dict[tuple, Any] = {}
        self._metrics = {name: (m, m.model_dump(exclude={"kind", "input"}), self.metric_runs(name, m))
                         for name, m in self.doc.metrics.items()}
        self.edge_patching = EdgePatching(shell, self.ref, self.doc.model.key)
        self._every_position: dict[str, tuple] = {}

    def _decode(self, ids: list[int]) -> str:
        """One token's text (memoized: a sweep's position records decode the same tokens over and over)."""
        (token,) = ids
        if token not in self._decoded:
            self._decoded[token] = self.shell.tokenizer.decode([token])
        return self._decoded[token]

    # -- positions --------------------------------------------------------------

    def resolve(self, input_name: str, spec: Any, prompts: dict | None = None, dataset: str = "") -> tuple[Resolved, ...]:
        """Each row's window for a position spec (cached per dataset, input and spec)."""
        key = (dataset, input_name, json.dumps(spec, sort_keys=True))
        if key not in self._positions:
            resolver = next(r for r in self.resolvers if r.accepts(spec))
            self.used_resolvers.add(resolver.name)
            rows = (prompts or self.prompts)[input_name]
            who = self.registry.who("position", resolver.name)
            self._positions[key] = tuple(returns.resolved(resolver.resolve(spec, row), who, len(row.ids))
                                         for row in rows)
        return self._positions[key]

    def windows(self, resolved: tuple[Resolved, ...]) -> tuple:
        """Each row's token positions. ``resolve`` keeps every tuple it made, so its id names the spec."""
        if id(resolved) not in self._windows:
            self._windows[id(resolved)] = tuple(r.positions for r in resolved)
        return self._windows[id(resolved)]

    def record(self, name: str, role: str, input_name: str, resolved: tuple[Resolved, ...]) -> PositionRecord:
        key = (name, role, input_name, id(resolved))
        if key not in self._records:
            decode = self._decode
            rows = self.prompts[input_name]
            self._records[key] = PositionRecord(
                name=name, role=role, input=input_name,
                windows=self.windows(resolved),
                tokens=tuple(tuple(decode([row.ids[p]]) for p in r.positions) for r, row in zip(resolved, rows)),
                reasons=tuple(r.reason for r in resolved),
            )
        return self._records[key]

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
        key = (spec.site, spec.layer, spec.head)
        if key not in self._sites:
            self._sites[key] = self.shell.site(*key)
        return self._sites[key]

    # -- scoring ----------------------------------------------------------------

    def metric_step_input(self, metric) -> str:
        return metric.input or next(iter((*self.doc.writes.values(), *self.doc.edges.values()))).input

    def metric_runs(self, name: str, metric) -> dict[str, tuple[str, tuple[str, ...]]]:
        """Each run the metric reads (role -> the scoring key of its step, the views it needs there).

        A scoring key is an input's name (its run in the point) or ``INPUT.clean``: that input run with
        no intervention, a step of its own, there only for the metrics that need it."""
        needs = returns.needs(self.registry.get("metric", metric.kind)().needs(self.metric_params[name]),
                              self.registry.who("metric", metric.kind))
        scored = self.metric_step_input(metric)
        writes = list(self.doc.writes.values())
        if writes:
            source = self.doc.reads[writes[0].source].input if writes[0].source else None
        else:
            source = next((e.source for e in self.doc.edges.values()), scored) if self.doc.edges else scored
        if source is None and "counterfactual" in needs:
            raise PlanError(f"$.metrics.{name}: metric kind {metric.kind!r} reads the counterfactual run, and the "
                            "writes take their values from no read")
        keys = {"intervened": scored, "base": f"{scored}.clean", "counterfactual": source}
        needs.setdefault("intervened", ("answers",))
        return {role: (keys[role], tuple(views)) for role, views in needs.items()}

    def _scorings(self) -> dict[str, Scoring]:
        """Per scoring key (see ``metric_runs``): the answer columns and views every metric reading it needs."""
        columns: dict[str, list[str]] = {}
        views: dict[str, set[str]] = {}
        tokens: dict[str, tuple[int, ...]] = {}
        for name, metric in self.doc.metrics.items():
            cls = self.registry.get("metric", metric.kind)
            for key, wanted_views in self.metric_runs(name, metric).values():
                wanted = columns.setdefault(key, [])
                views.setdefault(key, {"answers"}).update(wanted_views)
                for column in cls().columns(self.metric_params[name]):
                    if column not in tokens:
                        tokens[column] = answer_token(self.shell.tokenizer, self.loaded.rows, column, f"$.metrics.{name}")
                    if column not in wanted:
                        wanted.append(column)
        return {
            key: Scoring(tuple(cols), tuple(tuple(tokens[c][r] for c in cols) for r in range(len(self.loaded.rows))),
                         tuple(v for v in VIEWS if v in views[key]))
            for key, cols in columns.items()
        }

    # -- points -----------------------------------------------------------------

    def point(self, name: str, values: tuple) -> Point:
        point_doc = substitute(self.doc_json, values)
        reads, records = self._reads(name, point_doc)
        edges, edge_reads = self._edges(point_doc)
        writes, write_records, fits = self._writes(name, point_doc, reads)
        eligible = eligible_rows(len(self.loaded.rows), [r for _, r in reads.values()], writes)
        steps = tuple(fits) + self._steps(
            name, {**{n: read for n, (_, read) in reads.items()}, **{n: r for n, (_, r) in edge_reads.items()}},
            {**{n: spec.input for n, (spec, _) in reads.items()}, **{n: i for n, (i, _) in edge_reads.items()}},
            writes, edges)
        metrics = tuple(
            MetricPlan(mname, m.kind, self._path(name, self.metric_step_input(m)), params,
                       {role: self._path(name, key) for role, (key, _) in runs.items() if role != "intervened"})
            for mname, (m, params, runs) in self._metrics.items()
        )
        return Point(name, values, steps, metrics, tuple(records + write_records), tuple(eligible), point_doc)

    def _reads(self, point: str, point_doc: dict) -> tuple[dict[str, tuple[ReadSpec, Read]], list]:
        """Each read's spec and plan node, and its position record."""
        reads, records = {}, []
        for rname, raw in point_doc["reads"].items():
            spec = ReadSpec.model_validate(raw)
            site = self.site(spec, f"$.reads.{rname}", point)
            resolved = self.resolve(spec.input, spec.position)
            if spec.where:
                resolved = self.only_where(resolved, spec.where, f"$.reads.{rname}.where")
            records.append(self.record(rname, "read", spec.input, resolved))
            reads[rname] = (spec, Read(rname, site, self.windows(resolved)))
        return reads, records

    def _edges(self, point_doc: dict) -> tuple[dict, dict]:
        """Each edge patch by the input it changes, and the reads of the source runs they take terms from
        (``{name: (input, Read)}``: every position of every row)."""
        patches, reads = {}, {}
        for pname, raw in point_doc.get("edges", {}).items():
            where, source = f"$.edges.{pname}", raw.get("source")
            kind = (raw.get("intervention") or {}).get("kind", "swap")
            if kind == "swap":
                lengths = {i: (len(s.ids), len(t.ids)) for i, (s, t) in
                           enumerate(zip(self.prompts[source], self.prompts[raw["input"]])) if len(s.ids) != len(t.ids)}
                if lengths:
                    raise PlanError(f"{where}.source: an edge swap takes every position of input {source!r}'s "
                                    f"run, and its prompt is not as long as input {raw['input']!r}'s on row(s) "
                                    f"{{row: (source, patched)}} {_some(lengths, self.loaded.rows)}")
            if source is not None and source not in self._every_position:
                self._every_position[source] = tuple(tuple(range(len(r.ids))) for r in self.prompts[source])
            patch, needed = self.edge_patching.patch(pname, raw, where, self._every_position.get(source, ()))
            patches[raw["input"]] = patch
            reads.update({n: (source, read) for n, read in needed.items()})
        return patches, reads

    def only_where(self, resolved: tuple[Resolved, ...], where: dict[str, str], at: str) -> tuple[Resolved, ...]:
        """``resolved`` on the rows whose columns hold ``where``'s values; the others excluded (kept per
        spec, like ``resolve``'s tuples, so points share it)."""
        key = (id(resolved), json.dumps(where, sort_keys=True))
        if key not in self._positions:
            rows = self.loaded.rows
            for column in where:
                if not any(column in row for row in rows):
                    raise PlanError(f"{at}.{column}: no row has a column {echo(column)}")
            self._positions[key] = tuple(
                r if all(row.get(c) == v for c, v in where.items()) else Resolved((), "row_excluded")
                for r, row in zip(resolved, rows))
        return self._positions[key]

    def _writes(self, point: str, point_doc: dict, reads: dict) -> tuple[dict[str, list[Write]], list, list[Fit]]:
        """Each write by the input it changes, its position record, and a Fit step per trained featurizer."""
        writes: dict[str, list[Write]] = {}
        records, fits = [], {}
        for wname, raw in point_doc["writes"].items():
            spec = WriteSpec.model_validate(raw)
            where = f"$.writes.{wname}"
            site = self.site(spec, where, point)
            resolved = self.resolve(spec.input, spec.position)
            records.append(self.record(wname, "write", spec.input, resolved))
            intervention = None
            if spec.intervention is not None:  # the point's own values, sweep references replaced
                intervention = lowered(self.registry, raw["intervention"], f"{where}.intervention", site,
                                       self.windows(resolved), spec.source, {n: r for n, (_, r) in reads.items()},
                                       self.loaded.data_folder, lambda i: row_name(self.loaded.rows, i))
            read_spec, source = reads[spec.source] if spec.source is not None else (None, None)
            plain = intervention is None or intervention.needs == "source"  # a resample or a mean reads other rows
            self._check_write(wname, where, point, site, resolved, source if plain else None)
            featurizer = None
            if spec.featurizer is not None:
                fspec = point_doc["featurizers"][spec.featurizer]
                featurizer = self._featurizer(spec.featurizer, point_doc["featurizers"], site, spec.position, point)
                if fspec.get("train") and intervention is not None and intervention.kind != "swap":
                    raise PlanError(f"{where}.intervention: featurizer {spec.featurizer!r} is trained by a swap; "
                                    f"a write through it cannot be {intervention.kind!r} too")
                if fspec.get("train") and spec.featurizer not in fits:
                    fits[spec.featurizer] = self.fit(point, featurizer, fspec["train"], spec, source, read_spec, site)
            writes.setdefault(spec.input, []).append(
                Write(wname, spec.source, site, self.windows(resolved), featurizer, intervention)
            )
        return writes, records, list(fits.values())

    def fit(self, point: str, featurizer: FeaturizerRef, train: dict, write: WriteSpec, read: Read,
            read_spec: ReadSpec, site) -> Fit:
        """The step that trains ``featurizer`` on the training rows, before this point's runs."""
        where = f"$.featurizers.{featurizer.name}.train"
        training = self.training(train["data"], where)
        rows, prompts, dataset = training.rows, training.prompts, training.dataset
        source = self.resolve(read_spec.input, read_spec.position, prompts, dataset)
        target = self.resolve(write.input, write.position, prompts, dataset)
        for name, resolved in (("read", source), ("write", target)):
            failed = {i: r.reason for i, r in enumerate(resolved) if r.reason is not None}
            if failed:
                raise PlanError(f"{where}: the {name} position has nothing on training row(s) {_some(failed, rows)}")
        widths = {i: (len(t.positions), len(s.positions)) for i, (t, s) in enumerate(zip(target, source))
                  if len(t.positions) != len(s.positions)}
        if widths:
            raise PlanError(f"{where}: window widths differ between write and read on training row(s) {_some(widths, rows)}")
        labels = trained_labels(answer_token(self.shell.tokenizer, rows, train["label"], f"{where}.label"),
                                train.get("labels", "as_given"), train["seed"], where) \
            if train.get("label") else (0,) * len(rows)  # fitted from activations: no answer to predict
        self._check_training(featurizer, site, len(rows), sum(2 * len(t.positions) for t in target), where)
        return Fit(
            path=self._path(point, f"fit/{featurizer.name}"),
            featurizer=featurizer,
            read=Read(read.name, read.site, tuple(r.positions for r in source)),
            write=Write(featurizer.name, read.name, site, tuple(r.positions for r in target), featurizer),
            source_input=read_spec.input,
            target_input=write.input,
            prompts={name: tuple(r.ids for r in prompts[name]) for name in (read_spec.input, write.input)},
            labels=labels,
            data_digest=dataset.removeprefix("train:"),
            epochs=train["epochs"], batch_size=train["batch_size"], lr=train["lr"], seed=train["seed"],
            identity={**identity(self.ref, site, write.position, featurizer,
                                 defaults_of(self.registry.get("featurizer", featurizer.kind))),
                      **({"labels": "shuffled"} if train.get("labels") == "shuffled" else {})},
        )

    def training(self, data: dict, where: str) -> TrainingRows:
        """The rows a ``train.data`` spec names, tokenized (once per spec: every point of a sweep shares them)."""
        key = json.dumps(data, sort_keys=True)
        if key not in self._training:
            def tokenize(rows):
                prompts = tokenize_inputs(self.doc.inputs, rows, self.shell.tokenizer, self.doc.variables,
                                          self.doc.columns)
                check_prompts(prompts, rows, self.shell.tokenizer, self.shell.config, where)
                return prompts
            self._training[key] = train_rows(data, self.loaded.data_folder, self.loaded.source, where, tokenize,
                                             self.registry)
        return self._training[key]

    def _check_write(self, wname, where, point, site, resolved, source: Read) -> None:
        at = f" at sweep point {point}" if point else ""
        missing = {i: r.reason for i, r in enumerate(resolved) if r.reason is not None}
        if missing:
            raise PlanError(
                f"write {wname!r} has nothing to write on row(s) {_some(missing, self.loaded.rows)}{at}. A read may skip a row; "
                "a write may not: the row would score as if an intervention had happened"
            )
        if source is None:  # the intervention checked what it reads (compiler.interventions)
            return
        unread = {i: "source_not_eligible" for i, w in enumerate(source.windows) if not w}
        if unread:
            raise PlanError(f"write {wname!r}: its source read {source.name!r} has no value on row(s) {_some(unread, self.loaded.rows)}{at}")
        if site.width != source.site.width:
            raise PlanError(
                f"{where}: site width {site.width} differs from read {source.name!r}'s width {source.site.width}{at}"
            )
        widths = {i: (len(w.positions), len(s)) for i, (w, s) in enumerate(zip(resolved, source.windows))
                  if len(w.positions) != len(s)}
        if widths:
            raise PlanError(
                f"write {wname!r}: window widths differ from read {source.name!r} on row(s) "
                f"{{row: (write, read)}} {_some(widths, self.loaded.rows)}{at}"
            )

    def _path(self, point: str, input_name: str) -> str:
        return f"{point}/{input_name}" if point else input_name

    def _steps(self, point, reads, read_inputs, writes, edges) -> tuple[Run, ...]:
        """One run per input that has work; an input runs after the inputs its writes (or edge patch) read
        from, and otherwise inputs nothing writes run first, in document order."""
        order = run_order(self.doc.inputs, read_inputs, writes, edges)
        steps = []
        for input_name in order:
            mine = tuple(r for n, r in reads.items() if read_inputs[n] == input_name)
            wrote = tuple(writes.get(input_name, ()))
            scoring = self.scorings.get(input_name)
            if mine or wrote or scoring or input_name in edges:
                steps.append(Run(self._path(point, input_name), input_name, mine, wrote, scoring,
                                 edges=edges.get(input_name)))
            clean = self.scorings.get(f"{input_name}.clean")
            if clean:  # the same input, nothing written: for metrics that compare with the clean run
                steps.append(Run(self._path(point, f"{input_name}.clean"), input_name, (), (), clean))
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
        if self.doc.estimate is not None:
            check_estimable(self.doc, self.registry, self.metric_params)
        built = tuple(self.point(name, values) for name, values in points(self.doc))
        if self.doc.estimate is not None:
            built = estimated(built, self.doc, self.registry, self.metric_params)
        runs = [st for p in built for st in p.steps if st.kind == "run"]
        requires = tuple(name for name, needed in (
            ("heads", any(s.site.component == "head" for st in runs for s in (*st.reads, *st.writes))),
            ("training", any(st.kind == "fit" for p in built for st in p.steps)),
        ) if needed)
        prompts = {name: tuple(r.ids for r in rows) for name, rows in self.prompts.items()}
        return Plan(
            model=self.ref,
            rows=len(self.loaded.rows),
            prompts=prompts,
            segments={name: tuple(self._token_segments(r) for r in rows)
                      for name, rows in self.prompts.items() if any(r.segments for r in rows)},
            points=built,
            requires=requires,
            document=self.doc_json,
            resolvers=tuple(sorted(self.used_resolvers)),
            data=self.loaded.generated or {},
            **choose_position_reuse(self.ref, prompts, built),
        )


def compile_document(loaded: LoadedDocument, registry: Registry) -> Plan:
    """Validate against the installed plugins, build the shell, and compile the plan."""
    metric_params = check_document(loaded.document, registry, loaded.source)
    model = loaded.document.model
    try:
        shell = load_shell(resolve_source(model.key, model.revision, registry, loaded.home))
        loaded = each_edge(loaded, shell)
        return Compiler(loaded, shell, registry, metric_params).plan()
    except (PlanError, DocumentError) as exc:  # a vector file's line names the document, as every other does
        if str(exc).startswith(loaded.source):
            raise
        raise type(exc)(f"{loaded.source}: {exc}") from None
