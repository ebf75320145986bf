"""``MetricConformance``: what a metric kind must do, checked on made-up logits."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from causalab_core.plugins.contracts import MetricInputs

from causalab_testing.conformance.common import must_override, assert_params_forbid_unknown_keys



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
        must_override("metric")

    @pytest.fixture
    def params(self):
        must_override("params")

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
