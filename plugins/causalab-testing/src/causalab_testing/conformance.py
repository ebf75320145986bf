"""Conformance suites a plugin package runs against its own components.

Suites: ``MetricConformance``, ``FeaturizerConformance``, ``PositionResolverConformance``,
``CausalModelConformance``, ``EngineConformance``, ``InterventionConformance``. Subclass the suite in your plugin's
tests and override its fixtures (each raises until overridden), as fsspec's abstract filesystem tests work::

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
import random
import types
from typing import ClassVar

import pytest
import torch
from pydantic import BaseModel, ConfigDict
from safetensors.torch import save_file

from causalab_core import hookimpl
from causalab_core.plugins.contracts import COMBINES, NEEDS, Intervention, MetricInputs, Recipe, RowText
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

    def test_a_metric_with_a_gradient_is_smooth_in_the_answer_logits(self, metric, params):
        """``differentiable`` (attribution may estimate it): it reads only the answer logits and the log-sum-exp
        (view ``answers``) and moves by little when they move by little (no argmax, no rank)."""
        if not type(metric).differentiable:
            pytest.skip(f"metric {metric.name!r} does not say it has a gradient")
        views = {v for views in metric_needs(metric, params).values() for v in views}
        assert views <= {"answers"}, (f"metric {metric.name!r} says it has a gradient but reads {sorted(views)}: "
                                      "attribution estimates the answer logits and log-sum-exp only")
        for seed in range(3):
            logits = self.logits(9, seed=10 + seed)
            nudged = {role: t + 1e-4 * torch.randn(t.shape, generator=torch.Generator().manual_seed(seed))
                      for role, t in logits.items()}
            a = metric.compute(params, self.build(metric, params, logits, shared=False)).rows
            b = metric.compute(params, self.build(metric, params, nudged, shared=False)).rows
            jumps = [abs(x - y) for x, y in zip(a, b) if x is not None and x == x and y == y]
            assert max(jumps, default=0.0) < 1e-2, (
                f"metric {metric.name!r} says it has a gradient but jumps by {max(jumps):.3g} when the logits move "
                "by 1e-4 (an argmax or a rank has no gradient: leave `differentiable` False)")
            linear = metric.linear(params)
            if linear is not None:  # an estimate then gets that combination right, not each score
                inputs = self.build(metric, params, logits, shared=False)
                keys = (*inputs.columns, "logsumexp")
                c = torch.tensor([float(linear.get(k, 0.0)) for k in keys])
                noise = torch.randn(len(inputs.eligible), len(keys), generator=torch.Generator().manual_seed(seed))
                noise -= (noise @ c)[:, None] * c / (c @ c)  # moves every score but not the combination
                moved = dataclasses.replace(inputs, logits=inputs.logits + noise[:, :-1],
                                            logsumexp=inputs.logsumexp + noise[:, -1])
                a, b = metric.compute(params, inputs).rows, metric.compute(params, moved).rows
                assert all(x is None and y is None or abs(x - y) < 1e-4 for x, y in zip(a, b) if x == x), (
                    f"metric {metric.name!r} says it reads the scores only through {dict(linear)} (`linear`) but its "
                    "values change when they move and that combination does not")

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
        from causalab_core.plugins.registry import registry

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
    """A causal model's contract (``causalab_core.plugins.contracts.CausalModel``): variables in causal order, sampling
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
        from causalab_core.document.causal import solve

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
        from causalab_core.document.causal import value_columns
        from causalab_core.errors import PluginError

        try:
            value_columns(causal_model)
        except PluginError as exc:
            pytest.fail(str(exc), pytrace=False)

    def test_a_domain_lists_every_value_sampling_gives(self, causal_model):
        """Where a model lists an input's values (``domain``, for ``rows: "all"``), they are distinct, in one
        fixed order, and hold every value ``sample`` draws: a population would otherwise miss rows."""
        for variable in causal_model.inputs:
            domain = causal_model.domain(variable)
            if domain is None:
                continue
            values = list(domain)
            assert values == list(causal_model.domain(variable)), f"{variable!r}: the domain's order changes"
            assert len({json.dumps(v, sort_keys=True, default=repr) for v in values}) == len(values), (
                f"causal model {causal_model.name!r}: the domain of {variable!r} repeats a value")
            drawn = {json.dumps(s[variable], sort_keys=True, default=repr) for s in self._settings(causal_model)}
            listed = {json.dumps(v, sort_keys=True, default=repr) for v in values}
            assert drawn <= listed, (f"causal model {causal_model.name!r}: sample draws {variable!r} values its "
                                     f"domain does not list: {sorted(drawn - listed)[:3]}")

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
        from causalab_core.document.causal import solve, variables

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
        from causalab_core.document.causal import generate
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

NOISE_SEED_MIX = 0x9E3779B1
"""A noise write's generator for row ``r`` is seeded ``(seed * 0x9E3779B1 + r) mod 2**32`` (documents/README.md)."""


def independent_forward(plan, featurizers=None, registry=None) -> dict[str, dict[str, torch.Tensor]]:
    """Every scored step of ``plan`` computed without any engine: each row alone (no padding, no batches),
    a plain ``transformers`` forward with the step's reads and writes made by torch hooks written here.

    Writes compute their value here too, from the documented meaning of each need and combination
    (``contracts.NEEDS``, ``contracts.COMBINES``), not from ``causalab_core.runtime``: the source read on the
    row or on the resampled row ``rows[i]``; the mean over every position of the rows a read resolved on (less
    ``minus``'s); the vector file's one tensor; noise from ``torch.Generator().manual_seed((seed * 0x9E3779B1 + row) % 2**32)``,
    scaled by ``alpha`` times the float64 standard deviation of the ``std_of`` read's values; nothing; then
    replace, add, scale, interpolate, or the kind's own ``apply`` (``custom``); through a featurizer, in feature
    space with the site's error term kept. A read records the value arriving at its site in its own run, writes
    at lower sites included and a write at the same site not; a later step's write may take it.

    Returns ``{step path: {"answer_logits", "logsumexp"[, "answer_ranks"][, "logprobs"]}}`` for the scored steps;
    ``featurizers`` maps a kind to its class and ``intervention/<kind>`` to a custom intervention's class, as
    ``api.featurizer_classes`` gives an engine (by default from ``registry``, else the installed one). A plan that
    trains (a ``Fit`` step) is refused: this reference does not train.
    """
    from transformers import AutoModelForCausalLM

    if any(step.kind == "fit" for step in plan.steps()):
        raise NotImplementedError("the independent forward does not train: give it a plan without `train`")
    custom = any(iv.combine == "custom" for iv in plan.interventions())
    if featurizers is None and (plan.featurizers() or custom):
        from causalab_core.api import featurizer_classes
        from causalab_core.plugins.registry import registry as installed

        featurizers = featurizer_classes(plan, registry or installed())
    model = AutoModelForCausalLM.from_pretrained(plan.model.source, dtype=DTYPES[plan.model.dtype],
                                                 local_files_only=True).eval().requires_grad_(False)

    def view(hidden, site):  # [positions, width] of row 0 (of one head, for a head site)
        hidden = hidden[0]
        return hidden if site.head is None else hidden.unflatten(-1, (site.heads, site.width))[:, site.head, :]

    out: dict[str, dict[str, torch.Tensor]] = {}
    for point in plan.points:
        store: dict[str, list] = {}  # read -> per row: its window's values, or None where it did not resolve
        for step in point.steps:
            writes = {w.name: _IndependentWrite(w, store, featurizers) for w in step.writes}
            prompts = plan.prompts[step.input]
            for read in step.reads:
                store[read.name] = [None] * len(prompts)
            scored = []
            for row, ids in enumerate(prompts):
                def patch(hidden, site_key, row=row):
                    for read in step.reads:  # the value arriving: before any write at this site
                        if (read.site.module, read.site.tensor) == site_key and read.windows[row]:
                            store[read.name][row] = view(hidden, read.site)[list(read.windows[row])].clone()
                    mine = [w for w in step.writes if (w.site.module, w.site.tensor) == site_key and w.windows[row]]
                    if not mine:
                        return hidden
                    hidden = hidden.clone()
                    for write in mine:
                        where = list(write.windows[row])
                        target = view(hidden, write.site)
                        target[where] = writes[write.name].value(target[where], row)
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


class _IndependentWrite:
    """One write of one step, as the independent forward computes it: its featurizer, its custom kind's instance,
    and the statistics over rows it needs (the reads they come from ran in earlier steps, on every row)."""

    def __init__(self, write, store, classes):
        from safetensors.torch import load

        self.write, self.store, self.iv = write, store, write.intervention
        self.featurizer = None
        if write.featurizer is not None:
            cls = classes[write.featurizer.kind]
            self.featurizer = cls(cls.Params.model_validate(write.featurizer.params), write.site.width)
            if write.featurizer.state is not None:
                self.featurizer.load_state(load(write.featurizer.state))
        iv = self.iv
        self.custom = self.vector = None
        self.alpha = 1.0 if iv is None else iv.alpha
        if iv is None:
            return
        if iv.combine == "custom":
            self.custom = classes[f"intervention/{iv.kind}"]()
            self.params = type(self.custom).Params.model_validate(iv.params)
        if iv.needs == "mean":
            self.vector = self.values_of(write.source).double().mean(0)
            if iv.minus is not None:
                self.vector = self.vector - self.values_of(iv.minus).double().mean(0)
            self.vector = self.vector.float()
        elif iv.needs == "tensor":
            (self.vector,) = load(iv.tensor).values()
            self.vector = self.vector.float()
        if iv.std_of is not None:
            self.alpha = iv.alpha * self.values_of(iv.std_of).double().std().item()

    def values_of(self, read: str) -> torch.Tensor:
        """``[positions, width]``: every position of every row the read resolved on."""
        return torch.cat([v.float() for v in self.store[read] if v is not None and len(v)])

    def value(self, base: torch.Tensor, row: int) -> torch.Tensor:
        """What the write puts at its window ``base`` (``[window, width]``) on ``row``."""
        write, iv, featurizer = self.write, self.iv, self.featurizer
        if iv is None:  # a swap
            source = self.store[write.source][row]
            if featurizer is None:
                return source.to(base.dtype)
            features, _ = featurizer.featurize(source.float())
            _, error = featurizer.featurize(base.float())
            return featurizer.inverse(features, error).to(base.dtype)
        x = base.float().unsqueeze(0)  # [1 row, window, width], as an engine hands a kind its rows
        x, error = featurizer.featurize(x) if featurizer is not None else (x, None)
        if iv.needs == "source":
            v = self.store[write.source][row]
        elif iv.needs == "resample":
            v = self.store[write.source][iv.rows[row]]
        elif iv.needs in ("mean", "tensor"):
            v = self.vector.expand(len(base), -1)
        else:
            v = None
        if v is not None:
            v = v.float().unsqueeze(0)
            v = featurizer.featurize(v)[0] if featurizer is not None else v
        if iv.needs == "noise":
            generator = torch.Generator().manual_seed(((iv.seed or 0) * NOISE_SEED_MIX + row) % 2**32)
            v = torch.randn(tuple(x.shape[1:]), generator=generator, dtype=torch.float32).unsqueeze(0)
        if iv.combine == "custom":
            written = self.custom.apply(x, v, self.params).float()
        elif iv.combine == "replace":
            written = v
        elif iv.combine == "add":
            written = x + self.alpha * v
        elif iv.combine == "scale":
            written = self.alpha * x
        elif iv.combine == "interpolate":
            written = (1 - self.alpha) * x + self.alpha * v
        else:
            raise NotImplementedError(f"write {write.name!r}: the independent forward knows no combination "
                                      f"{iv.combine!r}")
        if featurizer is not None:
            written = featurizer.inverse(written, error)
        return written[0].to(base.dtype)

# -- the kit's own intervention kinds (registered as an extra plugin, never installed) --------------------


class _ProbeParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    tag: str
    at: int


class Probe(Intervention):
    """The kit's instrument: records the site's value where it is written, ``seen[(tag, at)]`` (one tensor per
    call, ``[rows, window, width]``), and writes it back unchanged. What it records is the value after every
    write at a lower site of the run: a probe at block ``L + 1``'s input sees block ``L``'s written output."""

    name = "kit_conformance_probe"
    Params = _ProbeParams
    seen: ClassVar[dict[tuple[str, int], list[torch.Tensor]]] = {}

    def recipe(self, params):
        return Recipe("nothing", "custom")

    def apply(self, x, v, params):
        Probe.seen.setdefault((params.tag, params.at), []).append(x.detach().clone())
        return x


class NormMatchedSwap(Intervention):
    """A custom kind for the engine suite: the source's value rescaled to the site's norm, position by position."""

    name = "kit_norm_matched_swap"

    def recipe(self, params):
        return Recipe("source", "custom")

    def apply(self, x, v, params):
        return v * (x.norm(dim=-1, keepdim=True) / v.norm(dim=-1, keepdim=True))


def plugin_module(name: str, *kinds: type) -> types.ModuleType:
    """A plugin object offering intervention ``kinds``, for ``build_registry(extra=...)``."""
    module = types.ModuleType(name)
    module.DISTRIBUTION = name
    module.causalab_interventions = hookimpl(lambda: list(kinds))
    return module


def kit_registry(*extra):
    """The installed plugins, the kit's kinds (``Probe``, ``NormMatchedSwap``) and ``extra`` plugin objects."""
    from causalab_core.plugins.registry import build_registry

    return build_registry(extra=(plugin_module("causalab_testing_kinds", Probe, NormMatchedSwap), *extra))


def _model_width(model_dir) -> int:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model_dir, local_files_only=True).hidden_size


def intervention_document(model_key: str) -> dict:
    """One point with a few kinds on ragged weekday rows (``ragged_rows``; a vector file ``steer.safetensors``
    beside it, one tensor of the model's width): a ``noised`` input (the base prompt run again) gets noise at the
    day's tokens in units of the spread of the counterfactual's embeddings there; the base run gets a zero
    ablation, a mean ablation, a difference of means and a vector added, the noised run's MLP output swapped in
    (a read of a written run), the noised run's value at the noise's own site swapped in (read before the noise
    is written there: the base's own value, a swap that changes nothing) and the kit's custom
    ``kit_norm_matched_swap``. Scores both written runs."""
    cf = {"input": "counterfactual"}
    return {
        "version": "2",
        "model": {"key": model_key, "dtype": "float32"},
        "data": {"path": "rows.jsonl"},
        "inputs": ["base", "counterfactual", "noised"],
        "columns": {"noised": "base"},
        "variables": {"counterfactual": {"day": "cf_day"}},
        "reads": {
            "emb": {**cf, "layer": 0, "site": "block_input", "position": {"variable": "day"}},
            "cf_last": {**cf, "layer": 1, "site": "block_output", "position": -1},
            "cf_early": {**cf, "layer": 1, "site": "block_output", "position": -4},
            "cf_attn": {**cf, "layer": 3, "site": "attn_output", "position": -1},
            "noised_mlp": {"input": "noised", "layer": 2, "site": "mlp_output", "position": -1},
            "noised_day": {"input": "noised", "layer": 0, "site": "block_input", "position": {"variable": "day"}},
        },
        "writes": {
            "corrupt": {"input": "noised", "layer": 0, "site": "block_input", "position": {"variable": "day"},
                        "intervention": {"kind": "noise", "scale": 3, "seed": 1, "std_of": "emb"}},
            "ablate": {"input": "base", "layer": 0, "site": "mlp_output", "position": -2,
                       "intervention": {"kind": "zero"}},
            "mean": {"input": "base", "source": "cf_last", "layer": 1, "site": "block_output", "position": -1,
                     "intervention": {"kind": "mean"}},
            "diff": {"input": "base", "source": "cf_last", "layer": 2, "site": "attn_output", "position": -1,
                     "intervention": {"kind": "add", "alpha": 2, "minus": "cf_early"}},
            "steer": {"input": "base", "layer": 1, "site": "mlp_output", "position": -3,
                      "intervention": {"kind": "add", "alpha": 0.5, "vector": "steer.safetensors"}},
            "restore": {"input": "base", "source": "noised_mlp", "layer": 2, "site": "mlp_output", "position": -1},
            "unnoised": {"input": "base", "source": "noised_day", "layer": 0, "site": "block_input",
                         "position": {"variable": "day"}},
            "custom": {"input": "base", "source": "cf_attn", "layer": 3, "site": "attn_output", "position": -1,
                       "intervention": {"kind": "kit_norm_matched_swap"}},
        },
        "metrics": {
            "logit_diff": {"kind": "logit_diff", "target": "cf_answer", "other": "base_answer", "input": "base"},
            "p_noised": {"kind": "p_answer", "answer": "base_answer", "input": "noised"},
        },
    }


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
        from causalab_core.plugins.registry import registry

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

    def assert_independent(self, engine, got, expected) -> None:
        """``got`` (an engine's results) holds ``expected`` (the independent forward's) to ``independent_tolerance``."""
        for path, named in expected.items():
            assert path in got, f"engine {engine.name!r} returned nothing for scored step {path!r}"
            for name, tensor in named.items():
                assert name in got[path], f"engine {engine.name!r} returned no {name!r} for step {path!r}"
                atol = 0 if not tensor.is_floating_point() else self.independent_tolerance
                torch.testing.assert_close(got[path][name].to(tensor.dtype), tensor, rtol=0, atol=atol,
                                           msg=lambda m, path=path, name=name: f"{path} {name}: {m}")

    def test_scores_match_an_independent_forward(self, engine, ragged_plan):
        """Padded batches give each row's numbers from a plain forward of that row alone, patched by hand."""
        self.assert_independent(engine, engine.execute(ragged_plan, batch_size=4), independent_forward(ragged_plan))

    @pytest.fixture(params=["tiny_llama", "tiny_gpt2"])
    def intervention_plan(self, request, write_doc):
        return self.interventions_of(request.getfixturevalue(request.param), write_doc)

    @staticmethod
    def interventions_of(model, write_doc):
        """:func:`intervention_document` on 8 ragged rows of ``model``, planned with the kit's kinds:
        ``(plan, classes)``, the classes an engine is handed (``api.featurizer_classes``)."""
        from causalab_core import api

        path = write_doc(intervention_document(str(model)), ragged_rows(8))
        width = _model_width(model)
        save_file({"vector": torch.randn(width, generator=torch.Generator().manual_seed(5))},
                  str(path.parent / "steer.safetensors"))
        plugins = kit_registry()
        plan = api.plan(path, registry=plugins)
        return plan, api.featurizer_classes(plan, plugins)

    def test_interventions_match_an_independent_forward(self, engine, intervention_plan):
        """Zero, mean, noise in units of another input's spread, a difference of means and a vector added, a
        swap from a noised run's read, and a custom ``apply``, on padded batches: each row's numbers are those
        of the kit's own per-row forward, which computes every need and combination from their definitions."""
        plan, classes = intervention_plan
        self.assert_independent(engine, engine.execute(plan, featurizers=classes, batch_size=4),
                                independent_forward(plan, featurizers=classes))

    def test_interventions_match_the_reference_engine(self, engine, reference, intervention_plan):
        if reference is None:
            pytest.skip("the engine is the reference engine (it is checked against the independent forward)")
        plan, classes = intervention_plan
        self.assert_same(engine.execute(plan, featurizers=classes, batch_size=4),
                         reference.execute(plan, featurizers=classes, batch_size=4))

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


# -- interventions ------------------------------------------------------------------

_FIELDS = ("needs", "combine", "alpha", "minus", "tensor", "seed", "std_of")


def _recipe_text(recipe) -> str:
    return ", ".join(f"{f}={getattr(recipe, f)!r}" for f in _FIELDS if hasattr(recipe, f))


class InterventionConformance:
    """An intervention kind has a name and parameters that refuse unknown keys; its recipe is a
    ``contracts.Recipe`` that follows from the parameters alone; a ``custom`` kind's ``apply`` keeps the site's
    shape, computes each row from its own values alone (and each position from its own, unless
    ``positionwise`` is False), and gives the same bytes for the same inputs whatever the global random state.
    End to end on the tiny Llama (``hooks``), a write of the kind changes the site's value at its window only,
    to what the kit's own per-row forward (:func:`independent_forward`) computes; rows that are not eligible are
    reported so (null values) and leave the eligible rows' values as they are without them.

    Override ``intervention`` (an instance, made as ``cls()``) and ``params`` (a list of parameter dicts, as a
    document writes them under ``intervention`` without ``kind``). The end-to-end runs give a kind what its
    recipe needs: a ``source`` read of the counterfactual prompt, a read for each name its recipe gives as
    ``minus`` or ``std_of``, and a vector file at its recipe's ``tensor`` path (relative to the document's
    folder), holding the ``vector`` fixture (default: a seeded random unit vector of the site's width).
    Needs the fixtures of :mod:`causalab_testing.fixtures`.
    """

    #: rows, window and width of the values ``apply`` is handed in the checks of ``apply`` alone.
    rows, window, width = 5, 3, 32
    #: False for a kind that mixes the positions of its window on purpose (one that writes the window's mean).
    positionwise = True
    #: the end-to-end write's layer (at ``block_output``); the site's value after it is read at the next block's input.
    layer = 1
    #: of the end-to-end rows, the last ones are made not eligible (a read resolved only where ``keep`` is yes).
    kept, excluded = 4, 2
    #: the engine the end-to-end runs use, and plugin objects registered beside the installed ones (an engine's).
    engine = "hooks"
    plugins: tuple = ()

    @pytest.fixture
    def intervention(self):
        _override("intervention")

    @pytest.fixture
    def params(self):
        _override("params")

    @pytest.fixture
    def vector(self):
        """The tensor a ``tensor`` need's file holds (one dimension, the site's width); None: a seeded random
        unit vector."""
        return None

    # helpers ------------------------------------------------------------------

    def validated(self, intervention, params) -> list:
        """``(dict, Params instance)`` for each entry of ``params``."""
        import pydantic

        assert isinstance(params, (list, tuple)) and params, (
            "the `params` fixture is a non-empty list of parameter dicts (one per setting to check)")
        out = []
        for p in params:
            try:
                out.append((p, type(intervention).Params.model_validate(p)))
            except pydantic.ValidationError as exc:
                pytest.fail(f"intervention {intervention.name!r}: the `params` fixture's {p!r} is not valid "
                            f"parameters: {exc.errors()[0]['msg']}", pytrace=False)
        return out

    def custom_settings(self, intervention, params) -> list:
        """``(dict, Params, recipe)`` for each entry whose recipe combines by the kind's own ``apply``."""
        found = [(p, valid, intervention.recipe(valid)) for p, valid in self.validated(intervention, params)]
        found = [f for f in found if f[2].combine == "custom"]
        if not found:
            pytest.skip(f"intervention {intervention.name!r} combines by core's math (no `custom` recipe): no apply")
        return found

    def unit_vector(self, vector, width: int) -> torch.Tensor:
        if vector is not None:
            return torch.as_tensor(vector).float().reshape(-1)
        drawn = torch.randn(width, generator=torch.Generator().manual_seed(17))
        return drawn / drawn.norm()

    def apply_inputs(self, recipe, vector, rows: int | None = None, window: int | None = None, seed: int = 0):
        """``x`` ``[rows, window, width]`` and the ``v`` an engine would hand the kind for its recipe's need:
        None for ``nothing``; one vector at every row and position for ``tensor`` (the ``vector`` fixture) and
        ``mean``; a value per row and position otherwise."""
        rows, window = rows or self.rows, window or self.window
        width = len(vector) if vector is not None else self.width
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(rows, window, width, generator=gen)
        if recipe.needs == "nothing":
            return x, None
        if recipe.needs == "tensor":
            return x, self.unit_vector(vector, width).expand(rows, window, width).clone()
        if recipe.needs == "mean":
            return x, torch.randn(width, generator=gen).expand(rows, window, width).clone()
        return x, torch.randn(rows, window, width, generator=gen)

    @staticmethod
    def applied(intervention, x, v, valid):
        """``apply`` on copies of its inputs (a kind that changes them in place cannot spoil the next call)."""
        return intervention.apply(x.clone(), None if v is None else v.clone(), valid)

    @staticmethod
    def row_varies(recipe) -> bool:
        """Whether an engine hands the kind a ``v`` that differs between rows."""
        return recipe.needs in ("source", "resample", "noise")

    # the kind and its recipe ----------------------------------------------------------

    def test_has_a_name_and_a_params_model(self, intervention, params):
        import pydantic

        assert isinstance(intervention.name, str) and intervention.name, "an intervention kind has a non-empty name"
        Params = type(intervention).Params
        assert isinstance(Params, type) and issubclass(Params, pydantic.BaseModel), (
            f"intervention {intervention.name!r}: Params must be a pydantic model")
        self.validated(intervention, params)

    def test_is_constructed_without_arguments(self, intervention, params):
        """The compiler and every engine make a kind as ``cls()``."""
        fresh = type(intervention)()
        for _, valid in self.validated(intervention, params):
            assert fresh.recipe(valid) == intervention.recipe(valid)

    def test_params_forbid_unknown_keys(self, intervention, params):
        for p, valid in self.validated(intervention, params):
            assert_params_forbid_unknown_keys(f"intervention {intervention.name!r}", type(intervention).Params,
                                              valid.model_dump(mode="json"))

    def test_recipe_is_a_contract_recipe(self, intervention, params):
        """A ``contracts.Recipe`` with a need in ``NEEDS`` and a combination in ``COMBINES``; its fields plain
        data that mean something for that need; ``custom`` only with an ``apply`` of the kind's own."""
        who = f"intervention {intervention.name!r}"
        for p, valid in self.validated(intervention, params):
            recipe = intervention.recipe(valid)
            at = f"{who}, params {p!r}"
            if not isinstance(recipe, Recipe):
                pytest.fail(f"{at}: recipe returned {type(recipe).__name__}, not a contracts.Recipe", pytrace=False)
            problems = []
            if recipe.needs not in NEEDS:
                problems.append(f"needs {recipe.needs!r} is not one of {NEEDS}")
            if recipe.combine not in COMBINES:
                problems.append(f"combine {recipe.combine!r} is not one of {COMBINES}")
            if isinstance(recipe.alpha, bool) or not isinstance(recipe.alpha, (int, float)) \
                    or not math.isfinite(recipe.alpha):
                problems.append(f"alpha {recipe.alpha!r} is not a finite number")
            if (recipe.needs == "tensor") != isinstance(recipe.tensor, str):
                problems.append(f"tensor {recipe.tensor!r}: a file name exactly where the need is `tensor`")
            if recipe.minus is not None and (recipe.needs != "mean" or not isinstance(recipe.minus, str)):
                problems.append(f"minus {recipe.minus!r}: a read's name, only with the need `mean`")
            if recipe.std_of is not None and not isinstance(recipe.std_of, str):
                problems.append(f"std_of {recipe.std_of!r} is not a read's name")
            if recipe.seed is not None and (isinstance(recipe.seed, bool) or not isinstance(recipe.seed, int)
                                            or not 0 <= recipe.seed < 2**31):
                problems.append(f"seed {recipe.seed!r} is not an integer in [0, 2**31)")
            if recipe.combine == "custom" and type(intervention).apply is Intervention.apply:
                problems.append("combine `custom` needs an `apply` method of the kind's own")
            if problems:
                pytest.fail(f"{at}: recipe {_recipe_text(recipe)}: " + "; ".join(problems), pytrace=False)

    def test_recipe_follows_its_params_alone(self, intervention, params):
        """The same recipe twice, under two global random states (torch's and ``random``'s): the compiler
        lowers it once, on the client, and what it says must not depend on anything but the parameters."""
        for p, valid in self.validated(intervention, params):
            recipes = []
            for seed in (1, 2):
                with torch.random.fork_rng(devices=[]):
                    state = random.getstate()
                    try:
                        torch.manual_seed(seed)
                        random.seed(seed)
                        recipes.append(type(intervention)().recipe(type(intervention).Params.model_validate(p)))
                    finally:
                        random.setstate(state)
            if recipes[0] != recipes[1]:
                pytest.fail(f"intervention {intervention.name!r}, params {p!r}: two recipes for the same parameters "
                            f"under different global random states ({_recipe_text(recipes[0])} and "
                            f"{_recipe_text(recipes[1])}): draw anything random from a seed among the parameters",
                            pytrace=False)

    # a custom kind's apply --------------------------------------------------------------

    def test_a_custom_apply_keeps_its_contract(self, intervention, params, vector):
        """A kind with a ``custom`` recipe: ``apply`` keeps the site's shape, is row by row and position by
        position, and deterministic (the ``check_apply_*`` methods, each shown failing by the kit's tests). A kind
        that combines by core's math has no ``apply`` to check: skipped, once."""
        self.custom_settings(intervention, params)
        self.check_apply_keeps_the_site_shape(intervention, params, vector)
        self.check_apply_is_row_by_row(intervention, params, vector)
        if self.positionwise:
            self.check_apply_is_position_by_position(intervention, params, vector)
        self.check_apply_is_deterministic(intervention, params, vector)

    def check_apply_keeps_the_site_shape(self, intervention, params, vector):
        """A tensor of ``x``'s shape ``[rows, window, width]``, a batch as well as a single row of one position
        (an engine hands a kind a row at a time where windows differ in width)."""
        for p, valid, recipe in self.custom_settings(intervention, params):
            for rows, window in ((self.rows, self.window), (1, 1), (1, self.window), (self.rows, 1)):
                x, v = self.apply_inputs(recipe, vector, rows, window)
                out = self.applied(intervention, x, v, valid)
                if not isinstance(out, torch.Tensor) or out.shape != x.shape or not out.is_floating_point():
                    got = f"{list(out.shape)} {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
                    pytest.fail(f"intervention {intervention.name!r}, params {p!r}: apply returned {got} for x of "
                                f"shape {list(x.shape)}: it must return a float tensor of x's shape "
                                "[rows, window, width]", pytrace=False)

    def check_apply_is_row_by_row(self, intervention, params, vector):
        """A row's value is the same computed alone, in the batch, and in a batch whose other rows hold other
        values: no row (one that is not eligible, or any other) changes another's."""
        for p, valid, recipe in self.custom_settings(intervention, params):
            x, v = self.apply_inputs(recipe, vector)
            whole = self.applied(intervention, x, v, valid)
            # other rows with other values (v too, where an engine hands each row its own)
            others_x = 10 * torch.randn(x.shape, generator=torch.Generator().manual_seed(3))
            others_v = v if v is None or not self.row_varies(recipe) else \
                10 * torch.randn(v.shape, generator=torch.Generator().manual_seed(4))
            for row in range(len(x)):
                alone = self.applied(intervention, x[row:row + 1], None if v is None else v[row:row + 1], valid)
                mixed_x, mixed_v = others_x.clone(), None if v is None else others_v.clone()
                mixed_x[row] = x[row]
                if v is not None:
                    mixed_v[row] = v[row]
                among = self.applied(intervention, mixed_x, mixed_v, valid)[row:row + 1]
                for what, got in (("computed alone", alone), ("batched with rows holding other values", among)):
                    if got.shape != whole[row:row + 1].shape or not torch.allclose(got, whole[row:row + 1],
                                                                                     rtol=1e-5, atol=1e-6):
                        pytest.fail(f"intervention {intervention.name!r}, params {p!r}: row {row}'s value "
                                    f"{what} differs from its value in the batch: apply must compute each row from "
                                    "its own x and v alone (rows that are not eligible, or any other row, must not "
                                    "change it: no statistic over the batch's rows)", pytrace=False)

    def check_apply_is_position_by_position(self, intervention, params, vector):
        """Each position's value is the one ``apply`` gives that position alone: a kind writes at each position
        of its window what belongs there (set ``positionwise = False`` for a kind that mixes them on purpose)."""
        for p, valid, recipe in self.custom_settings(intervention, params):
            x, v = self.apply_inputs(recipe, vector)
            whole = self.applied(intervention, x, v, valid)
            for at in range(x.shape[1]):
                alone = self.applied(intervention, x[:, at:at + 1], None if v is None else v[:, at:at + 1], valid)
                if alone.shape != whole[:, at:at + 1].shape or not torch.allclose(alone, whole[:, at:at + 1],
                                                                                  rtol=1e-5, atol=1e-6):
                    pytest.fail(f"intervention {intervention.name!r}, params {p!r}: position {at} of a "
                                f"{x.shape[1]}-position window gets another value than that position alone: it "
                                "writes there a value computed for another position (set positionwise = False "
                                "only for a kind that mixes its window's positions on purpose)", pytrace=False)

    def check_apply_is_deterministic(self, intervention, params, vector):
        """The same bytes for the same inputs: twice, from a fresh instance, and under two global random states."""
        for p, valid, recipe in self.custom_settings(intervention, params):
            x, v = self.apply_inputs(recipe, vector)
            outs = [self.applied(intervention, x, v, valid), self.applied(type(intervention)(), x, v, valid)]
            for seed in (1, 2):
                with torch.random.fork_rng(devices=[]):
                    state = random.getstate()
                    try:
                        torch.manual_seed(seed)
                        random.seed(seed)
                        outs.append(self.applied(intervention, x, v, valid))
                    finally:
                        random.setstate(state)
            if not all(o.shape == outs[0].shape and torch.equal(o, outs[0]) for o in outs[1:]):
                pytest.fail(f"intervention {intervention.name!r}, params {p!r}: apply gave different values for the "
                            "same inputs (called again, on a fresh instance, or under another global random state): "
                            "every engine and run must write the same bytes; draw anything random from a seed among "
                            "the parameters, or use the need `noise`", pytrace=False)

    # end to end ------------------------------------------------------------------------

    def e2e_rows(self) -> list[dict]:
        """Weekday rows, ``kept`` with ``keep`` yes then ``excluded`` with no; ``mark`` (``cf_mark``): the day and
        its question mark, a window of two tokens."""
        from causalab_testing.data import weekday_rows

        rows = weekday_rows(self.kept + self.excluded, seed=5)
        for i, row in enumerate(rows):
            row["keep"] = "yes" if i < self.kept else "no"
            row["mark"], row["cf_mark"] = row["day"] + "?", row["cf_day"] + "?"
        return rows

    def e2e_document(self, model_key: str, intervention, p: dict, recipe) -> dict:
        """A write of the kind at block ``layer``'s output, at the day and question mark of the base prompt; a
        read ``kit_gate`` resolved only on the rows kept (the others: not eligible, ``row_excluded``); the reads
        the recipe takes, on the counterfactual prompt; ``logit_diff`` of the base run."""
        kept = {"keep": "yes"}
        at = {"layer": self.layer, "site": "block_output"}
        reads = {"kit_gate": {"input": "counterfactual", "layer": 0, "site": "block_output", "position": 0,
                              "where": kept}}
        write = {"input": "base", **at, "position": {"variable": "mark"},
                 "intervention": {"kind": intervention.name, **p}}
        if recipe.needs in ("source", "resample", "mean"):
            write["source"] = "kit_source"
            reads["kit_source"] = {"input": "counterfactual", **at, "position": {"variable": "mark"}}
            if recipe.needs != "source":  # a statistic or another row's value: taken over the kept rows only
                reads["kit_source"]["where"] = kept
        for name in (recipe.minus, recipe.std_of):
            if name is not None and name not in reads:
                reads[name] = {"input": "counterfactual", **at, "position": 3, "where": kept}
        return {
            "version": "2",
            "model": {"key": model_key, "dtype": "float32"},
            "data": {"path": "rows.jsonl"},
            "inputs": ["base", "counterfactual", "clean"],
            "columns": {"clean": "base"},
            "variables": {"counterfactual": {"mark": "cf_mark"}},
            "reads": reads,
            "writes": {"kit_write": write},
            "metrics": {"kit_score": {"kind": "logit_diff", "target": "cf_answer", "other": "base_answer",
                                      "input": "base"}},
        }

    def e2e_folder(self, folder, doc: dict, rows: list[dict], recipe, vector, width: int):
        """Writes the document, its rows and the recipe's vector file into ``folder``; the document's path."""
        from pathlib import Path

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if recipe.needs == "tensor" and not Path(recipe.tensor).is_absolute():
            (folder / recipe.tensor).parent.mkdir(parents=True, exist_ok=True)
            save_file({"vector": self.unit_vector(vector, width).contiguous()}, str(folder / recipe.tensor))
        path = folder / "doc.json"
        path.write_text(json.dumps(doc, indent=1))
        return path

    def registry_for(self, intervention):
        """The installed plugins with the kit's kinds, and the kind itself where it is not installed."""
        from causalab_core.plugins.registry import registry

        cls, installed = type(intervention), registry()
        if cls.name not in installed.names("intervention"):
            return kit_registry(plugin_module(f"conformance_{cls.name}", cls), *self.plugins)
        if installed.get("intervention", cls.name) is not cls:
            pytest.fail(f"intervention {cls.name!r}: the installed kind of that name is another class "
                        f"({installed.get('intervention', cls.name).__qualname__}); give the one checked its own name",
                        pytrace=False)
        return kit_registry(*self.plugins)

    def test_a_run_changes_the_site_only_at_the_written_window(self, intervention, params, vector, tiny_llama,
                                                               tmp_path):
        """The write's run and a clean run of the same prompt, each probed at block ``layer + 1``'s input (the
        site's value after the write) at every position: outside the window the two agree (a kind that writes
        at the wrong position changes them); inside it the value is the one the kit's per-row forward writes."""
        from causalab_core import api

        plugins = self.registry_for(intervention)
        width = _model_width(tiny_llama)
        for i, (p, valid) in enumerate(self.validated(intervention, params)):
            recipe = intervention.recipe(valid)
            doc = self.e2e_document(str(tiny_llama), intervention, p, recipe)
            path = self.e2e_folder(tmp_path / f"window{i}", doc, self.e2e_rows(), recipe, vector, width)
            plan = api.plan(path, registry=plugins)
            length = min(len(ids) for ids in plan.prompts["base"])
            (write,) = [w for s in plan.steps() for w in s.writes if w.name == "kit_write"]
            for tag in ("base", "clean"):
                for at in range(length):
                    doc["writes"][f"kit_probe_{tag}_{at}"] = {
                        "input": tag, "layer": self.layer + 1, "site": "block_input", "position": at,
                        "intervention": {"kind": Probe.name, "tag": tag, "at": at}}
            path.write_text(json.dumps(doc, indent=1))
            Probe.seen.clear()
            result = api.run(path, registry=plugins, engine=self.engine)
            ran = {key: torch.cat(values) for key, values in Probe.seen.items()}
            Probe.seen.clear()
            independent_forward(result.plan, featurizers=api.featurizer_classes(result.plan, plugins))
            expected = {key: torch.cat(values) for key, values in Probe.seen.items()}
            Probe.seen.clear()
            for row, window in enumerate(write.windows):
                for at in range(length):
                    written, clean = ran[("base", at)][row, 0], ran[("clean", at)][row, 0]
                    if at not in window and not torch.allclose(written, clean, rtol=0, atol=1e-5):
                        pytest.fail(f"intervention {intervention.name!r}, params {p!r}: row {row}'s value at position "
                                    f"{at}, outside the written window {list(window)}, changed by "
                                    f"{(written - clean).abs().max().item():.3g}: a write changes its window only",
                                    pytrace=False)
                    if at in window and not torch.allclose(written, expected[("base", at)][row, 0], rtol=0,
                                                           atol=1e-5):
                        pytest.fail(f"intervention {intervention.name!r}, params {p!r}: row {row}'s value written at "
                                    f"position {at} differs from the kit's per-row forward by "
                                    f"{(written - expected[('base', at)][row, 0]).abs().max().item():.3g} "
                                    f"(recipe {_recipe_text(recipe)})", pytrace=False)

    def test_rows_not_eligible_are_left_out_and_move_no_other_row(self, intervention, params, vector, tiny_llama,
                                                                 tmp_path):
        """The rows a read does not resolve on are not eligible (values null, reason ``row_excluded``); the
        eligible rows' values are the same with those rows dropped from the data (they come last, so no row's
        index, which noise and a resample draw from, moves)."""
        from causalab_core import api

        plugins = self.registry_for(intervention)
        width = _model_width(tiny_llama)
        rows = self.e2e_rows()
        for i, (p, valid) in enumerate(self.validated(intervention, params)):
            recipe = intervention.recipe(valid)
            doc = self.e2e_document(str(tiny_llama), intervention, p, recipe)
            scored = []
            for name, data in (("all", rows), ("kept", rows[:self.kept])):
                path = self.e2e_folder(tmp_path / f"rows{i}_{name}", doc, data, recipe, vector, width)
                (metric,) = api.run(path, registry=plugins, engine=self.engine).metrics
                scored.append(metric.content)
            every, kept = scored
            who = f"intervention {intervention.name!r}, params {p!r}"
            for row, value in enumerate(every["values"]):
                if row >= self.kept and (value is not None or every["reasons"][row] != "row_excluded"):
                    pytest.fail(f"{who}: row {row}, on which a read does not resolve, has value {value!r} and reason "
                                f"{every['reasons'][row]!r}, not null and 'row_excluded'", pytrace=False)
                if row < self.kept and not isinstance(value, float):
                    pytest.fail(f"{who}: eligible row {row} has value {value!r} (reason {every['reasons'][row]!r}), "
                                "not a number", pytrace=False)
            moved = [row for row in range(self.kept)
                     if not isinstance(kept["values"][row], float)
                     or abs(kept["values"][row] - every["values"][row]) > 1e-5]
            if moved:
                pytest.fail(f"{who}: eligible rows {moved} changed when the {self.excluded} rows that are not "
                            f"eligible were dropped from the data ({[every['values'][r] for r in moved]} with them, "
                            f"{[kept['values'][r] for r in moved]} without): a row's value must come from its own "
                            "values (a statistic over rows only from the rows the read resolved on)", pytrace=False)
