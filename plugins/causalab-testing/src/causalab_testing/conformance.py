"""Conformance suites a plugin package runs against its own components.

Subclass the suite in your plugin's tests and override its fixtures (each raises
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

import json

import pytest
import torch

from causalab_core.contracts import MetricInputs, RowText
from causalab_core.runtime import swap


def _override(name: str):
    raise NotImplementedError(f"override the `{name}` fixture in your conformance subclass")


class MetricConformance:
    """A metric names its columns, gives one value per row, None where not eligible, and is deterministic."""

    @pytest.fixture
    def metric(self):
        _override("metric")

    @pytest.fixture
    def params(self):
        _override("params")

    def inputs(self, metric, params, rows: int = 9, seed: int = 0) -> MetricInputs:
        columns = tuple(metric.columns(params))
        gen = torch.Generator().manual_seed(seed)
        return MetricInputs(
            logits=torch.randn(rows, len(columns), generator=gen),
            logsumexp=torch.full((rows,), 5.0),
            columns=columns,
            token_ids={c: [10 + i] * rows for i, c in enumerate(columns)},
            eligible=[i % 3 != 0 for i in range(rows)],
        )

    def test_has_a_name_and_a_params_model(self, metric, params):
        assert isinstance(metric.name, str) and metric.name
        assert type(params) is type(metric).Params
        assert metric.columns(params), "a metric reads at least one answer column"

    def test_one_value_per_row_and_none_where_not_eligible(self, metric, params):
        inputs = self.inputs(metric, params)
        values = metric.compute(params, inputs)
        assert len(values.rows) == len(inputs.eligible)
        for value, ok in zip(values.rows, inputs.eligible):
            assert (value is None) == (not ok)
        json.dumps(values.summary)  # plain data

    def test_is_deterministic(self, metric, params):
        first = metric.compute(params, self.inputs(metric, params))
        again = metric.compute(params, self.inputs(metric, params))
        assert first == again


class FeaturizerConformance:
    """``inverse(featurize(x)) == x``, and swapping a value with itself changes nothing."""

    @pytest.fixture
    def featurizer(self):
        _override("featurizer")

    def sample(self, featurizer, rows: int = 6) -> torch.Tensor:
        return torch.randn(rows, featurizer.width, generator=torch.Generator().manual_seed(0))

    def test_inverse_undoes_featurize(self, featurizer):
        x = self.sample(featurizer)
        torch.testing.assert_close(featurizer.inverse(*featurizer.featurize(x)), x)

    def test_swapping_a_value_with_itself_is_the_identity(self, featurizer):
        x = self.sample(featurizer)
        torch.testing.assert_close(swap(featurizer, x, x), x)

    def test_swap_keeps_the_base_dtype(self, featurizer):
        x = self.sample(featurizer).to(torch.bfloat16)
        assert swap(featurizer, x, x.flip(0)).dtype == torch.bfloat16


class PositionResolverConformance:
    """A resolver's windows are in range and deterministic; a failure has a reason and no positions."""

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

    def test_accepts_its_own_specs(self, resolver, specs):
        for spec in specs:
            assert resolver.accepts(spec)
            resolver.check(spec)

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


def ragged_rows(n: int = 10):
    """Weekday rows of several lengths (some prompts carry extra leading words), for padded batches."""
    from causalab_testing.data import weekday_rows

    rows = weekday_rows(n, seed=7)
    for i, r in enumerate(rows):
        prefix = "hello " * (i % 3)
        r["base"], r["counterfactual"] = prefix + r["base"], "hi " * (i % 2) + r["counterfactual"]
    return rows


class EngineConformance:
    """An engine runs every step, returns flat tensors, and agrees with the reference engine.

    Override ``engine``; ``reference`` defaults to the ``hooks`` engine (itself
    checked bit for bit against pyvene in causalab's own tests). Needs the
    fixtures of :mod:`causalab_testing.fixtures`.
    """

    #: how close scores must be to the reference's (0 means bit-identical).
    tolerance = 0.0

    @pytest.fixture
    def engine(self):
        _override("engine")

    @pytest.fixture
    def reference(self):
        from causalab_core.plugins import registry

        return registry().get("engine", "hooks")()

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

    def test_scores_match_the_reference_engine_on_padded_batches(self, engine, reference, ragged_plan):
        self.assert_same(engine.execute(ragged_plan, batch_size=4), reference.execute(ragged_plan, batch_size=4))

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
