"""Conformance suites a plugin package runs against its own components.

Suites: ``MetricConformance``, ``FeaturizerConformance``, ``PositionResolverConformance``,
``CausalModelConformance``, ``EngineConformance``. Subclass the suite in your plugin's tests and override its fixtures (each raises
until overridden), as fsspec's abstract filesystem tests work::

    from causalab_testing.conformance import MetricConformance

    class TestBrier(MetricConformance):
        @pytest.fixture
        def metric(self):
            return Brier()

        @pytest.fixture
        def params(self):
            return Brier.Params(answer="gold")
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from causalab_core.contracts import MetricInputs, RowText
from causalab_core.runtime import swap

UNKNOWN_KEY = "surely_not_a_parameter"


def _override(name: str):
    raise NotImplementedError(f"override the `{name}` fixture in your conformance subclass")


def assert_params_forbid_unknown_keys(owner: str, params_cls: type, valid: dict) -> None:
    """``params_cls`` takes ``valid`` (the JSON form of a document's parameters) and refuses one more, unknown key."""
    import pydantic

    params_cls.model_validate(valid)
    try:
        params_cls.model_validate({**valid, UNKNOWN_KEY: 1})
    except pydantic.ValidationError:
        return
    pytest.fail(f"{owner}: {params_cls.__name__} accepted the unknown key {UNKNOWN_KEY!r}, so a misspelt key in "
                "a document would be silently ignored; set model_config = ConfigDict(extra=\"forbid\")", pytrace=False)


# -- metrics -------------------------------------------------------------------

DECOYS = ("decoy_first", "decoy_last")
"""Columns a metric does not name: a scored step brings home every column of the document, so a metric
sees others beside its own, in any order."""


def metric_needs(metric, params) -> dict[str, tuple[str, ...]]:
    """The runs and views a metric reads (``Metric.needs``; answer columns of the intervened run by default)."""
    needs = getattr(metric, "needs", None)
    return dict(needs(params)) if needs is not None else {"intervened": ("answers",)}


def metric_inputs(vocab: torch.Tensor, columns, token_ids, eligible, views=("answers",)) -> MetricInputs:
    """What an engine brings home of one run, computed here from its full next-token logits ``[rows, vocab]``."""
    ids = torch.tensor([[token_ids[c][r] for c in columns] for r in range(len(vocab))]).reshape(len(vocab), len(columns))
    chosen = vocab.gather(1, ids)
    fields = {f.name for f in dataclasses.fields(MetricInputs)}
    extra = {}
    if "ranks" in views and "ranks" in fields:
        extra["ranks"] = (vocab.unsqueeze(1) > chosen.unsqueeze(2)).sum(-1).to(torch.int32)
    if "logprobs" in views and "logprobs" in fields:
        extra["logprobs"] = torch.log_softmax(vocab, -1)
    return MetricInputs(logits=chosen, logsumexp=vocab.logsumexp(-1), columns=tuple(columns),
                        token_ids={c: list(token_ids[c]) for c in columns}, eligible=list(eligible), **extra)


def _plain(values) -> str:
    """A metric's values as text, NaN included, so two results compare whatever they hold."""
    return json.dumps({"rows": values.rows, "summary": values.summary}, sort_keys=True, default=repr)


class MetricConformance:
    """A metric names its columns, reads those columns (not positions in the logits), gives one finite value
    per eligible row and None for the others, forbids unknown parameters and is deterministic.

    Inputs are built from random full-vocabulary logits for every run and view the metric ``needs``, with
    the metric's columns mixed among columns it does not name.
    """

    #: the vocabulary of the synthetic runs (token ids of the columns are below it).
    vocab = 64

    @pytest.fixture
    def metric(self):
        _override("metric")

    @pytest.fixture
    def params(self):
        _override("params")

    def columns_of(self, metric, params, order: str = "named_first") -> tuple[str, ...]:
        named = tuple(metric.columns(params))
        if order == "named_first":
            return (*named, *DECOYS)
        return (DECOYS[0], *reversed(named), DECOYS[1])

    def logits(self, rows: int, seed: int, scale: float = 3.0) -> dict[str, torch.Tensor]:
        """Full next-token logits of each run a metric may read, drawn from ``seed``."""
        gen = torch.Generator().manual_seed(seed)
        return {role: scale * torch.randn(rows, self.vocab, generator=gen)
                for role in ("intervened", "base", "counterfactual")}

    def build(self, metric, params, logits: dict[str, torch.Tensor], order: str = "named_first",
              shared: bool = True) -> MetricInputs:
        """The inputs a metric sees when its runs have these full logits (columns in ``order``).

        Column i's token is 10 + 3i on every row; with ``shared``, the last named column has the first's
        token on row 1 (two answers that are the same token, as real data has).
        """
        columns = self.columns_of(metric, params, order)
        rows = len(logits["intervened"])
        token_ids = {c: [10 + 3 * i] * rows for i, c in enumerate(sorted(columns))}
        named = list(metric.columns(params))
        if shared and len(named) > 1 and rows > 1:
            token_ids[named[-1]][1] = token_ids[named[0]][1]
        eligible = [i % 3 != 0 for i in range(rows)]
        needs = metric_needs(metric, params)
        runs = {role: metric_inputs(logits[role], columns, token_ids, eligible, views)
                for role, views in needs.items() if role != "intervened"}
        inputs = metric_inputs(logits["intervened"], columns, token_ids, eligible, needs.get("intervened", ("answers",)))
        if runs:
            inputs = dataclasses.replace(inputs, runs=runs)
        return inputs

    def inputs(self, metric, params, rows: int = 9, seed: int = 0) -> MetricInputs:
        return self.build(metric, params, self.logits(rows, seed))

    def test_has_a_name_and_a_params_model(self, metric, params):
        assert isinstance(metric.name, str) and metric.name
        assert type(params) is type(metric).Params
        reads_vocabulary = any("logprobs" in views for views in metric_needs(metric, params).values())
        assert metric.columns(params) or reads_vocabulary, "a metric reads at least one answer column"

    def test_is_constructed_without_arguments(self, metric, params):
        """The runner makes a metric as ``cls()`` and hands it ``params`` and inputs in ``compute``."""
        fresh = type(metric)()
        assert _plain(fresh.compute(params, self.inputs(metric, params))) == _plain(
            metric.compute(params, self.inputs(metric, params)))

    def test_one_value_per_row_and_none_where_not_eligible(self, metric, params):
        inputs = self.inputs(metric, params)
        values = metric.compute(params, inputs)
        assert len(values.rows) == len(inputs.eligible), (
            f"metric {metric.name!r} gave {len(values.rows)} values for {len(inputs.eligible)} rows")
        for row, (value, ok) in enumerate(zip(values.rows, inputs.eligible)):
            assert (value is None) == (not ok), (
                f"metric {metric.name!r}, row {row}: {value!r} for a row that is {'' if ok else 'not '}eligible "
                "(None exactly where a row is not eligible)")
        json.dumps(values.summary)  # plain data

    @pytest.mark.parametrize("seed,scale", [(0, 3.0), (1, 3.0), (3, 30.0)], ids=["random", "random-again", "peaked"])
    def test_values_are_finite_numbers(self, metric, params, seed, scale):
        """On generic inputs (distinct answer tokens, untied logits) every eligible row has a finite value:
        NaN is only for a row where the metric is undefined, and the output files keep it apart from null."""
        inputs = self.build(metric, params, self.logits(9, seed, scale), shared=False)
        self._check_values(metric, metric.compute(params, inputs), f"on generic {scale:g}-scale logits (seed {seed})",
                           nan=False)

    def test_degenerate_inputs_give_numbers(self, metric, params):
        """All logits tied and two answers one token: a float per eligible row (NaN where undefined), never inf."""
        inputs = self.build(metric, params, self.logits(9, 2, scale=0.0))
        self._check_values(metric, metric.compute(params, inputs), "on tied logits with a shared answer token", nan=True)

    @staticmethod
    def _check_values(metric, values, where: str, nan: bool) -> None:
        for row, value in enumerate(values.rows):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                pytest.fail(f"metric {metric.name!r} gave {value!r} ({type(value).__name__}) for row {row} {where}: "
                            "a row's value is a float (or None where the row is not eligible)", pytrace=False)
            if math.isinf(value) or (math.isnan(value) and not nan):
                pytest.fail(f"metric {metric.name!r} gave {value} for eligible row {row} {where}: a value must be a "
                            "finite number (NaN only where the metric is undefined for the row)", pytrace=False)
        for key, value in values.summary.items():
            if isinstance(value, float) and not math.isfinite(value):
                pytest.fail(f"metric {metric.name!r} gave {value} in its summary {key!r} {where}: a summary is "
                            "finite numbers or None", pytrace=False)

    def test_reads_the_columns_it_names(self, metric, params):
        """The same runs with the columns in another order, among columns it does not name, give the same values."""
        logits = self.logits(9, seed=4)
        first = metric.compute(params, self.build(metric, params, logits, "named_first"))
        moved = metric.compute(params, self.build(metric, params, logits, "named_last_reversed"))
        if _plain(first) != _plain(moved):
            pytest.fail(f"metric {metric.name!r} changed when its columns {tuple(metric.columns(params))} moved among "
                        f"others {DECOYS}: it reads a position in `logits`, not the columns it names (use "
                        f"`inputs.column(name)` or `inputs.columns.index(name)`)\n  before: {_plain(first)}\n"
                        f"  after:  {_plain(moved)}", pytrace=False)

    def test_follows_each_column_it_names(self, metric, params):
        """Raising or lowering one named column's token (in every run) changes some row's value."""
        logits = self.logits(9, seed=5)
        inputs = self.build(metric, params, logits)
        before = _plain(metric.compute(params, inputs))
        for column in metric.columns(params):
            token = inputs.token_ids[column][0]
            changed = False
            for shift in (8.0, -8.0):
                moved = {role: t.clone() for role, t in logits.items()}
                for t in moved.values():
                    t[:, token] += shift
                changed |= _plain(metric.compute(params, self.build(metric, params, moved))) != before
            if not changed:
                pytest.fail(f"metric {metric.name!r} gave the same values with column {column!r}'s logit raised and "
                            "lowered by 8: it does not read a column it names", pytrace=False)

    def test_params_forbid_unknown_keys(self, metric, params):
        assert_params_forbid_unknown_keys(f"metric {metric.name!r}", type(metric).Params, params.model_dump(mode="json"))

    def test_is_deterministic(self, metric, params):
        first = metric.compute(params, self.inputs(metric, params))
        again = metric.compute(params, self.inputs(metric, params))
        assert _plain(first) == _plain(again), f"metric {metric.name!r} gave two results for the same inputs"


# -- featurizers -----------------------------------------------------------------


def _outputs(featurizer, x: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad():
        f, err = featurizer.featurize(x)
        return [t for t in (f, err, featurizer.inverse(f, err), swap(featurizer, x, x.flip(0))) if t is not None]


class FeaturizerConformance:
    """``inverse(featurize(x)) == x``; swapping a value with itself changes nothing; two instances made with the
    same parameters agree whatever torch's global random state (engines make their own, separately); the
    parameters forbid unknown keys; a trainable featurizer's ``state()`` loaded into a fresh one gives its outputs.

    Override ``featurizer``: an instance, made as an engine makes it (``cls(params, width)``).
    """

    @pytest.fixture
    def featurizer(self):
        _override("featurizer")

    def sample(self, featurizer, rows: int = 6) -> torch.Tensor:
        return torch.randn(rows, featurizer.width, generator=torch.Generator().manual_seed(0))

    def fresh(self, featurizer, global_seed: int):
        """A new instance with the same parameters, made under another global random state (restored after)."""
        cls = type(featurizer)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(global_seed)
            return cls(cls.Params.model_validate(featurizer.params.model_dump(mode="json")), featurizer.width)

    def test_inverse_undoes_featurize(self, featurizer):
        x = self.sample(featurizer)
        torch.testing.assert_close(featurizer.inverse(*featurizer.featurize(x)), x)

    def test_swapping_a_value_with_itself_is_the_identity(self, featurizer):
        x = self.sample(featurizer)
        torch.testing.assert_close(swap(featurizer, x, x), x)

    def test_swap_keeps_the_base_dtype(self, featurizer):
        x = self.sample(featurizer).to(torch.bfloat16)
        assert swap(featurizer, x, x.flip(0)).dtype == torch.bfloat16

    def test_two_instances_with_the_same_params_agree(self, featurizer):
        """Each engine (and each run) makes its own instance: what it computes follows from its parameters alone."""
        x = self.sample(featurizer)
        one, other = self.fresh(featurizer, 1), self.fresh(featurizer, 2)
        for a, b in zip(_outputs(one, x), _outputs(other, x)):
            if a.shape != b.shape or not torch.equal(a, b):
                pytest.fail(f"featurizer {featurizer.name!r}: two instances with parameters "
                            f"{featurizer.params.model_dump(mode='json')} compute different values (made under "
                            "different global random states): draw anything random from a generator seeded by "
                            "the parameters", pytrace=False)

    def test_params_forbid_unknown_keys(self, featurizer):
        assert_params_forbid_unknown_keys(f"featurizer {featurizer.name!r}", type(featurizer).Params,
                                          featurizer.params.model_dump(mode="json"))

    def test_state_round_trips_into_a_fresh_instance(self, featurizer):
        """What training saves (``state()``, as safetensors bytes) loaded into a fresh instance gives the same outputs."""
        if not getattr(featurizer, "trainable", False):
            pytest.skip("not trainable")
        from safetensors.torch import load, save

        trained = self.fresh(featurizer, 3)
        assert list(trained.parameters()), f"trainable featurizer {featurizer.name!r} has no parameters to train"
        gen = torch.Generator().manual_seed(11)
        with torch.no_grad():  # stands in for training: every parameter moves
            for p in trained.parameters():
                p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        state = trained.state()
        assert state and all(isinstance(v, torch.Tensor) for v in state.values()), (
            f"featurizer {featurizer.name!r}: state() must be a non-empty dict of tensors for a trainable featurizer")
        loaded = self.fresh(featurizer, 4)
        loaded.load_state(load(save({k: v.contiguous() for k, v in state.items()})))
        x = self.sample(featurizer)
        for a, b in zip(_outputs(trained, x), _outputs(loaded, x)):
            if a.shape != b.shape or not torch.allclose(a, b, rtol=0, atol=1e-5):
                pytest.fail(f"featurizer {featurizer.name!r}: a fresh instance after load_state(state()) computes "
                            "other values than the one whose state it loaded", pytrace=False)
        untrained = self.fresh(featurizer, 3)
        assert any(not torch.allclose(a, b, rtol=0, atol=1e-5) for a, b in zip(_outputs(trained, x), _outputs(untrained, x))), (
            f"featurizer {featurizer.name!r}: moving every parameter changed nothing it computes")


# -- position resolvers --------------------------------------------------------------

UNOWNED_SPECS = (None, True, False, 1.5, [], [0, 1], {}, {UNKNOWN_KEY: 1})
"""Forms no resolver should take."""

KNOWN_SPECS = (0, 3, -1, -7, {"index": 2}, {"index": -1, "scope": {"variable": "day"}}, {"variable": "day"},
               {"variable": "day", "segment": "user[0]"}, "last", "first")
"""Forms some resolver may own: each is foreign to a resolver when another installed resolver accepts it."""


class PositionResolverConformance:
    """A resolver's windows are in range and deterministic; a failure has a reason and no positions;
    it refuses forms it does not own (another installed resolver's, and forms nobody owns).

    Override ``resolver``, ``specs`` and ``rows``; ``foreign_specs`` defaults to :data:`UNOWNED_SPECS` plus each
    of :data:`KNOWN_SPECS` that another resolver of the installed registry accepts.
    """

    @pytest.fixture
    def resolver(self):
        _override("resolver")

    @pytest.fixture
    def specs(self):
        """Position specs the resolver accepts (include some that fail on some rows)."""
        _override("specs")

    @pytest.fixture
    def rows(self) -> list[RowText]:
        _override("rows")

    @pytest.fixture
    def foreign_specs(self, resolver):
        """Specs the resolver must refuse (``accepts`` is False)."""
        return self.foreign_specs_for(resolver)

    @staticmethod
    def foreign_specs_for(resolver) -> list:
        """:data:`UNOWNED_SPECS`, and each of :data:`KNOWN_SPECS` another installed resolver accepts."""
        from causalab_core.plugins import registry

        others = [cls() for name, cls in registry().components("position").items() if name != resolver.name]
        return [*UNOWNED_SPECS, *(s for s in KNOWN_SPECS if any(_accepts(o, s) for o in others))]

    def test_accepts_its_own_specs(self, resolver, specs):
        for spec in specs:
            assert resolver.accepts(spec), f"resolver {resolver.name!r} does not accept its own spec {spec!r}"
            resolver.check(spec)

    def test_refuses_forms_it_does_not_own(self, resolver, specs, foreign_specs):
        own = lambda s: any(type(s) is type(t) and s == t for t in specs)  # noqa: E731 - True == 1, but not here
        taken = [s for s in foreign_specs if not own(s) and _accepts(resolver, s)]
        if taken:
            pytest.fail(f"resolver {resolver.name!r} accepts {', '.join(map(repr, taken))}, forms it does not own "
                        "(another resolver's, or nobody's): a position form has exactly one resolver", pytrace=False)

    def test_windows_are_in_range_or_a_reason_is_given(self, resolver, specs, rows):
        for spec in specs:
            for row in rows:
                got = resolver.resolve(spec, row)
                if got.reason is None:
                    assert got.positions and all(0 <= p < len(row.ids) for p in got.positions)
                else:
                    assert got.positions == () and isinstance(got.reason, str)

    def test_is_deterministic(self, resolver, specs, rows):
        for spec in specs:
            assert [resolver.resolve(spec, r) for r in rows] == [resolver.resolve(spec, r) for r in rows]


def _accepts(resolver, spec) -> bool:
    try:
        return bool(resolver.accepts(spec))
    except Exception as exc:  # noqa: BLE001 - a resolver must answer False, not raise, for a form it does not own
        pytest.fail(f"resolver {resolver.name!r}: accepts({spec!r}) raised {type(exc).__name__}: {exc}; "
                    "it must answer False for a form it does not own", pytrace=False)


# -- causal models ----------------------------------------------------------------


def settings(model, n: int, seed: int = 0) -> list[dict]:
    """``n`` settings of ``model``'s inputs, each sampled with a ``random.Random`` seeded from ``seed``."""
    import random

    rng = random.Random(seed)
    return [{v: model.sample(rng, v) for v in model.inputs} for _ in range(n)]


def descendants(model, variable: str) -> set[str]:
    """The derived variables computed, directly or not, from ``variable``."""
    found: set[str] = set()
    for derived, parents in model.mechanisms.items():  # causal order: a parent is listed first
        if variable in parents or found & set(parents):
            found.add(derived)
    return found


class CausalModelConformance:
    """A causal model's contract (``causalab_core.contracts.CausalModel``): variables in causal order, sampling
    from the rng it is handed alone, each derived value a function of its parents, a prompt and an answer text
    for every setting, every setting in ``train`` or ``test`` (both reached) from its inputs alone, an
    intervention that changes only the variable and its descendants, columns that leave the row's own alone,
    and rows generated for both splits.

    Override ``causal_model`` (an instance); ``samples`` is how many settings each check draws.
    """

    samples = 200

    @pytest.fixture
    def causal_model(self):
        _override("causal_model")

    def _settings(self, model, seed: int = 0) -> list[dict]:
        return settings(model, self.samples, seed)

    def _solved(self, model, inputs: dict) -> dict:
        from causalab_core.causal import solve

        try:
            return solve(model, inputs)
        except KeyError as exc:
            pytest.fail(f"causal model {model.name!r}: computing from the inputs {inputs!r} read {exc}, which is not "
                        "among the parents `mechanisms` lists for it: compute sees its parents alone", pytrace=False)

    def test_has_a_name_and_variables_in_causal_order(self, causal_model):
        m = causal_model
        assert isinstance(m.name, str) and m.name, "a causal model needs a `name`"
        assert m.inputs and all(isinstance(v, str) and v for v in m.inputs), f"{m.name!r}: `inputs` are no names"
        known = list(m.inputs)
        for derived, parents in m.mechanisms.items():
            if derived in known:
                pytest.fail(f"causal model {m.name!r}: {derived!r} is defined twice (an input, or two mechanisms)",
                            pytrace=False)
            late = [p for p in parents if p not in known]
            if late:
                pytest.fail(f"causal model {m.name!r}: parent {late[0]!r} of {derived!r} is not an input nor a "
                            "variable listed before it (`mechanisms` is in causal order)", pytrace=False)
            known.append(derived)

    def test_params_forbid_unknown_keys(self, causal_model):
        params = getattr(causal_model, "params", None)
        if params is not None and type(causal_model).Params.model_fields:
            assert_params_forbid_unknown_keys(f"causal model {causal_model.name!r}", type(causal_model).Params,
                                              params.model_dump(mode="json"))

    def test_columns_leave_the_rows_own_alone(self, causal_model):
        from causalab_core.causal import value_columns
        from causalab_core.errors import PluginError

        try:
            value_columns(causal_model)
        except PluginError as exc:
            pytest.fail(str(exc), pytrace=False)

    def test_sampling_follows_the_rng_it_is_handed_alone(self, causal_model):
        import random

        state = random.getstate()
        try:
            random.seed(1)
            first = self._settings(causal_model, seed=5)
            random.seed(2)
            again = self._settings(causal_model, seed=5)
        finally:
            random.setstate(state)
        if first != again:
            pytest.fail(f"causal model {causal_model.name!r}: two rngs seeded alike sampled different settings: "
                        "sample must draw from the rng it is handed, never from `random`'s global state",
                        pytrace=False)
        try:
            json.dumps(first)
        except (TypeError, ValueError) as exc:
            pytest.fail(f"causal model {causal_model.name!r}: a sampled value is not plain JSON ({exc}): rows are "
                        "written as data.jsonl", pytrace=False)

    def test_each_derived_value_is_a_function_of_its_parents(self, causal_model):
        m = causal_model
        for inputs in self._settings(m):
            values = self._solved(m, inputs)
            for derived, parents in m.mechanisms.items():
                again = m.compute(derived, {p: values[p] for p in parents})
                if again != values[derived]:
                    pytest.fail(f"causal model {m.name!r}: {derived!r} from the same parents gave {values[derived]!r} "
                                f"and then {again!r}: compute must be a function of its parents", pytrace=False)
            try:
                json.dumps({v: values[v] for v in m.mechanisms})
            except (TypeError, ValueError) as exc:
                pytest.fail(f"causal model {m.name!r}: a derived value is not plain JSON ({exc})", pytrace=False)

    def test_prompt_and_answer_are_texts(self, causal_model):
        m = causal_model
        for inputs in self._settings(m):
            values = self._solved(m, inputs)
            prompt, answer = m.prompt(values), m.answer(values)
            if not (isinstance(prompt, str) and prompt and isinstance(answer, str) and answer):
                pytest.fail(f"causal model {m.name!r}: prompt {prompt!r} and answer {answer!r} of {inputs!r}: each "
                            "must be a non-empty string", pytrace=False)

    def test_split_puts_every_setting_in_train_or_test_from_its_inputs(self, causal_model):
        m = causal_model
        seen = set()
        for inputs in self._settings(m):
            try:
                split = m.split(dict(inputs))
            except KeyError as exc:
                pytest.fail(f"causal model {m.name!r}: split read {exc}, which is not an input: it decides from the "
                            "inputs alone", pytrace=False)
            if split not in ("train", "test"):
                pytest.fail(f"causal model {m.name!r}: split of {inputs!r} is {split!r}, not 'train' or 'test'",
                            pytrace=False)
            if m.split(dict(inputs)) != split:
                pytest.fail(f"causal model {m.name!r}: split of {inputs!r} changed between two calls", pytrace=False)
            seen.add(split)
        if seen != {"train", "test"}:
            pytest.fail(f"causal model {m.name!r}: {self.samples} sampled settings all fell in {seen.pop()!r}: a "
                        "document asking for the other split gets no rows", pytrace=False)

    def test_an_intervention_changes_only_the_variable_and_its_descendants(self, causal_model):
        from causalab_core.causal import solve, variables

        m = causal_model
        drawn = self._settings(m)
        for base, source in zip(drawn, drawn[1:] + drawn[:1]):
            clean, other = self._solved(m, base), self._solved(m, source)
            for v in variables(m):
                got = solve(m, base, {v: other[v]})
                kept = [w for w in variables(m) if w != v and w not in descendants(m, v) and got[w] != clean[w]]
                if got[v] != other[v] or kept:
                    what = f"{kept[0]!r}, not a descendant," if kept else f"{v!r} itself did not take the value and"
                    pytest.fail(f"causal model {m.name!r}: setting {v!r} to {other[v]!r} on {base!r} changed "
                                f"{what} (an intervention changes only the variable and what is computed from it)",
                                pytrace=False)

    def test_generates_distinct_rows_for_each_split(self, causal_model):
        from causalab_core.causal import generate
        from causalab_core.document.schema import CausalModelSpec

        from causalab_core.errors import DocumentError

        m = causal_model
        for split in ("train", "test"):
            made = 0
            for v in m.inputs:  # a split may keep some input fixed: intervening on it leaves the split
                spec = CausalModelSpec(kind=m.name, intervene=[v], rows=4, split=split, seed=0)
                try:
                    rows = generate(m, spec, "$.data.causal_model")
                except DocumentError:
                    continue
                assert generate(m, spec, "$.data.causal_model") == rows, f"{m.name!r}: the same spec gave other rows"
                assert len({json.dumps(r, sort_keys=True) for r in rows}) == 4
                made += 1
            if not made:
                pytest.fail(f"causal model {m.name!r}: no intervention on one input gives 4 rows of split {split!r}",
                            pytrace=False)


def ragged_rows(n: int = 10):
    """Weekday rows of several lengths (some prompts carry extra leading words), for padded batches."""
    from causalab_testing.data import weekday_rows

    rows = weekday_rows(n, seed=7)
    for i, r in enumerate(rows):
        prefix = "hello " * (i % 3)
        r["base"], r["counterfactual"] = prefix + r["base"], "hi " * (i % 2) + r["counterfactual"]
    return rows


DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def independent_forward(plan, featurizers=None) -> dict[str, dict[str, torch.Tensor]]:
    """Every scored step of ``plan`` computed without any engine: each row alone (no padding, no batches),
    a plain ``transformers`` forward with the step's reads and writes made by torch hooks written here.

    Returns ``{step path: {"answer_logits", "logsumexp"[, "answer_ranks"][, "logprobs"]}}`` for the scored steps;
    ``featurizers`` maps a kind to its class (by default the installed registry's). A plan that trains
    (a ``Fit`` step) is refused: this reference does not train.
    """
    from safetensors.torch import load
    from transformers import AutoModelForCausalLM

    if any(step.kind == "fit" for step in plan.steps()):
        raise NotImplementedError("the independent forward does not train: give it a plan without `train`")
    if featurizers is None and plan.featurizers():
        from causalab_core.api import featurizer_classes
        from causalab_core.plugins import registry

        featurizers = featurizer_classes(plan, registry())
    model = AutoModelForCausalLM.from_pretrained(plan.model.source, dtype=DTYPES[plan.model.dtype],
                                                 local_files_only=True).eval().requires_grad_(False)

    def make(ref, width):
        if ref is None:
            return None
        cls = featurizers[ref.kind]
        made = cls(cls.Params.model_validate(ref.params), width)
        if ref.state is not None:
            made.load_state(load(ref.state))
        return made

    def view(hidden, site):  # [positions, width] of row 0 (of one head, for a head site)
        hidden = hidden[0]
        return hidden if site.head is None else hidden.unflatten(-1, (site.heads, site.width))[:, site.head, :]

    out: dict[str, dict[str, torch.Tensor]] = {}
    for point in plan.points:
        store: dict[str, list] = {}
        for step in point.steps:
            swaps = {w.name: make(w.featurizer, w.site.width) for w in step.writes}
            prompts = plan.prompts[step.input]
            for read in step.reads:
                store[read.name] = [None] * len(prompts)
            scored = []
            for row, ids in enumerate(prompts):
                def patch(hidden, site_key, row=row):
                    for read in step.reads:
                        if (read.site.module, read.site.tensor) == site_key and read.windows[row]:
                            store[read.name][row] = view(hidden, read.site)[list(read.windows[row])].clone()
                    writes = [w for w in step.writes if (w.site.module, w.site.tensor) == site_key and w.windows[row]]
                    if not writes:
                        return hidden
                    hidden = hidden.clone()
                    for write in writes:
                        where = list(write.windows[row])
                        target = view(hidden, write.site)
                        base, source = target[where], store[write.source][row]
                        featurizer = swaps[write.name]
                        if featurizer is None:
                            target[where] = source.to(base.dtype)
                        else:
                            features, _ = featurizer.featurize(source.float())
                            _, error = featurizer.featurize(base.float())
                            target[where] = featurizer.inverse(features, error).to(base.dtype)
                    return hidden

                handles = []
                for key in {(op.site.module, op.site.tensor) for op in (*step.reads, *step.writes)}:
                    module = model.get_submodule(key[0])
                    if key[1] == "output":
                        def after(mod, args, output, key=key):
                            if isinstance(output, tuple):
                                return (patch(output[0], key), *output[1:])
                            return patch(output, key)
                        handles.append(module.register_forward_hook(after))
                    else:
                        def before(mod, args, kwargs, key=key):
                            if args:
                                return (patch(args[0], key), *args[1:]), kwargs
                            return args, {**kwargs, "hidden_states": patch(kwargs["hidden_states"], key)}
                        handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
                try:
                    with torch.no_grad():
                        last = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].float()
                finally:
                    for h in handles:
                        h.remove()
                if step.scoring is not None:
                    scored.append(last)
            if step.scoring is None:
                continue
            last = torch.stack(scored)
            chosen = last.gather(1, torch.tensor(step.scoring.token_ids))
            found = {"answer_logits": chosen, "logsumexp": last.logsumexp(-1)}
            views = getattr(step.scoring, "views", ("answers",))
            if "ranks" in views:
                found["answer_ranks"] = (last.unsqueeze(1) > chosen.unsqueeze(2)).sum(-1).to(torch.int32)
            if "logprobs" in views:
                found["logprobs"] = torch.log_softmax(last, -1)
            out[step.path] = found
    return out


class EngineConformance:
    """An engine runs every step, returns flat tensors, agrees with an independent forward and with the
    reference engine, and refuses options it does not know.

    Override ``engine``. Every engine is checked against :func:`independent_forward` (each row alone through a
    plain ``transformers`` forward, patched by hooks written in this kit) to ``independent_tolerance``; and,
    unless it is the reference itself, against ``reference`` (the ``hooks`` engine by default, itself checked
    bit for bit against pyvene in causalab's own tests) to ``tolerance``. Needs the fixtures of
    :mod:`causalab_testing.fixtures`.
    """

    #: how close scores must be to the reference engine's (0 means bit-identical).
    tolerance = 0.0
    #: how close scores must be to the independent forward's (unpadded rows: the last bits may differ).
    independent_tolerance = 1e-4

    @pytest.fixture
    def engine(self):
        _override("engine")

    @pytest.fixture
    def reference(self, engine):
        """The engine whose numbers this one must match to ``tolerance``; None where ``engine`` is that engine."""
        return self.reference_for(engine)

    @staticmethod
    def reference_for(engine):
        """The ``hooks`` engine, or None for the hooks engine itself (an engine is not its own reference)."""
        from causalab_core.plugins import registry

        hooks = registry().get("engine", "hooks")
        return None if isinstance(engine, hooks) else hooks()

    @pytest.fixture(params=["tiny_llama", "tiny_gpt2"])
    def ragged_plan(self, request, write_doc):
        from causalab_core import api
        from causalab_testing.data import sweep_document

        model = request.getfixturevalue(request.param)
        return api.plan(write_doc(sweep_document(str(model), layers=[0, 2], positions=[-4, -1]), ragged_rows()))

    def assert_same(self, got, expected):
        assert set(got) == set(expected)
        for path in expected:
            assert set(got[path]) == set(expected[path]), path
            for name, tensor in expected[path].items():
                torch.testing.assert_close(got[path][name], tensor, rtol=0, atol=self.tolerance, msg=path)

    def test_returns_a_flat_dict_of_tensors_keyed_by_step_path(self, engine, ragged_plan):
        got = engine.execute(ragged_plan)
        assert set(got) == {s.path for s in ragged_plan.steps()}
        for path, named in got.items():
            assert all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in named.items()), path

    def test_scores_match_an_independent_forward(self, engine, ragged_plan):
        """Padded batches give each row's numbers from a plain forward of that row alone, patched by hand."""
        got = engine.execute(ragged_plan, batch_size=4)
        for path, expected in independent_forward(ragged_plan).items():
            assert path in got, f"engine {engine.name!r} returned nothing for scored step {path!r}"
            for name, tensor in expected.items():
                assert name in got[path], f"engine {engine.name!r} returned no {name!r} for step {path!r}"
                atol = 0 if not tensor.is_floating_point() else self.independent_tolerance
                torch.testing.assert_close(got[path][name].to(tensor.dtype), tensor, rtol=0, atol=atol,
                                           msg=lambda m, path=path, name=name: f"{path} {name}: {m}")

    def test_scores_match_the_reference_engine_on_padded_batches(self, engine, reference, ragged_plan):
        if reference is None:
            pytest.skip("the engine is the reference engine (it is checked against the independent forward)")
        self.assert_same(engine.execute(ragged_plan, batch_size=4), reference.execute(ragged_plan, batch_size=4))

    def test_options_forbid_unknown_keys(self, engine):
        assert_params_forbid_unknown_keys(f"engine {engine.name!r}", type(engine).Options,
                                          engine.options.model_dump(mode="json"))

    def test_batch_size_does_not_change_the_scores(self, engine, ragged_plan):
        whole = engine.execute(ragged_plan)
        for path, named in engine.execute(ragged_plan, batch_size=3).items():
            for name, tensor in named.items():
                torch.testing.assert_close(tensor, whole[path][name], rtol=1e-5, atol=1e-5)

    def test_progress_is_reported_once_per_step(self, engine, ragged_plan):
        seen = []
        engine.execute(ragged_plan, progress=seen.append)
        assert seen == [s.path for s in ragged_plan.steps()]

    def test_a_batch_size_below_one_is_refused(self, engine, ragged_plan):
        from causalab_core.errors import EngineError

        with pytest.raises(EngineError, match="batch size must be 1 or more"):
            engine.execute(ragged_plan, batch_size=0)

    def test_remote_is_local_simulation_or_refused(self, engine, ragged_plan):
        """A remote-capable engine gives the same numbers through nnsight's serialized path; others refuse."""
        from causalab_core.errors import EngineError

        if "remote" in engine.capabilities:
            self.assert_same(engine.execute(ragged_plan, remote="local"), engine.execute(ragged_plan))
        else:
            with pytest.raises(EngineError, match="remote"):
                engine.execute(ragged_plan, remote=True)
