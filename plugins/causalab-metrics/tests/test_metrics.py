"""The shipped metrics against hand computations, plus the conformance suite."""

from __future__ import annotations

import math

import pytest
import torch

from causalab_core.plugins.contracts import MetricInputs
from causalab_testing.conformance import MetricConformance
from causalab_metrics.answers import IIA, LogitDiff, LogProb, PAnswer
from causalab_metrics.distributions import NormalizedLogitDiff


def inputs(logits, columns, token_ids, eligible=None, lse=None):
    logits = torch.tensor(logits, dtype=torch.float32)
    return MetricInputs(
        logits=logits,
        logsumexp=torch.tensor(lse, dtype=torch.float32) if lse else torch.zeros(len(logits)),
        columns=columns,
        token_ids=token_ids,
        eligible=eligible or [True] * len(logits),
    )


def test_iia_is_one_where_the_label_wins():
    got = IIA().compute(
        IIA.Params(choices=["base", "cf"], label="cf"),
        inputs([[2.0, 1.0], [0.5, 3.0], [1.0, 4.0]], ("base", "cf"), {"base": [7, 7, 7], "cf": [8, 9, 7]}),
    )
    # Row 2: base and cf are the same token, so predicting either is correct.
    assert got.rows == [0.0, 1.0, 1.0]
    assert got.summary == {"mean": 2 / 3, "eligible": 3, "rows": 3}


def test_iia_ignores_rows_that_are_not_eligible():
    got = IIA().compute(
        IIA.Params(choices=["base", "cf"], label="cf"),
        inputs([[2.0, 1.0], [0.5, 3.0]], ("base", "cf"), {"base": [1, 1], "cf": [2, 2]}, eligible=[False, True]),
    )
    assert got.rows == [None, 1.0] and got.summary["mean"] == 1.0 and got.summary["eligible"] == 1


def test_logit_diff_is_target_minus_other():
    got = LogitDiff().compute(
        LogitDiff.Params(target="cf", other="base"),
        inputs([[2.0, 1.0], [0.5, 3.0]], ("base", "cf"), {"base": [1, 1], "cf": [2, 2]}),
    )
    assert got.rows == [-1.0, 2.5] and got.summary["mean"] == 0.75


def test_p_answer_is_the_softmax_probability():
    vocab = torch.tensor([[1.0, 2.0, 0.5], [0.0, 0.0, 0.0]])
    lse = vocab.logsumexp(-1).tolist()
    got = PAnswer().compute(
        PAnswer.Params(answer="cf"),
        inputs([[2.0], [0.0]], ("cf",), {"cf": [1, 1]}, lse=lse),
    )
    expected = torch.softmax(vocab, -1)[:, 1].tolist()
    assert got.rows == pytest.approx(expected, rel=1e-6)
    assert math.isclose(got.summary["mean"], sum(expected) / 2, rel_tol=1e-6)


def test_iia_label_must_be_a_choice():
    with pytest.raises(ValueError, match="label 'gold' must be one of the choices"):
        IIA.Params(choices=["a", "b"], label="gold")


class TestIIAConformance(MetricConformance):
    @pytest.fixture
    def metric(self):
        return IIA()

    @pytest.fixture
    def params(self):
        return IIA.Params(choices=["a", "b"], label="b")


class TestLogitDiffConformance(MetricConformance):
    @pytest.fixture
    def metric(self):
        return LogitDiff()

    @pytest.fixture
    def params(self):
        return LogitDiff.Params(target="a", other="b")


class TestLogProbConformance(MetricConformance):
    @pytest.fixture
    def metric(self):
        return LogProb()

    @pytest.fixture
    def params(self):
        return LogProb.Params(answer="a")


class TestNormalizedLogitDiffConformance(MetricConformance):
    @pytest.fixture
    def metric(self):
        return NormalizedLogitDiff()

    @pytest.fixture
    def params(self):
        return NormalizedLogitDiff.Params(target="a", other="b")


def test_logprob_is_the_log_softmax_of_the_answer():
    logits = torch.tensor([[2.0, 0.5, -1.0], [0.0, 3.0, 1.0]])
    inputs = MetricInputs(logits=logits[:, :1], logsumexp=logits.logsumexp(-1), columns=("a",),
                          token_ids={"a": [0, 0]}, eligible=[True, False])
    got = LogProb().compute(LogProb.Params(answer="a"), inputs)
    assert got.rows[0] == pytest.approx(torch.log_softmax(logits[0], -1)[0].item()) and got.rows[1] is None


class TestPAnswerConformance(MetricConformance):
    @pytest.fixture
    def metric(self):
        return PAnswer()

    @pytest.fixture
    def params(self):
        return PAnswer.Params(answer="a")


def test_iia_over_the_vocabulary_is_the_top_token_being_the_label():
    """`over: vocabulary`: 1 only where the label's token is the argmax of the whole distribution; the rows whose
    top token is none of the choices score 0 and are counted (`no_choice`), against a plain argmax."""
    from causalab_testing.conformance import metric_inputs

    generator = torch.Generator().manual_seed(0)
    vocab = torch.randn(200, 12, generator=generator)
    ids = {"a": [3] * 200, "b": [5] * 200, "c": [7] * 200}
    eligible = [i % 9 != 0 for i in range(200)]
    params = IIA.Params(choices=["a", "b", "c"], label="b", over="vocabulary")
    got = IIA().compute(params, metric_inputs(vocab, ("a", "b", "c"), ids, eligible, views=("answers", "ranks")))
    top = vocab.argmax(-1).tolist()
    assert got.rows == [(1.0 if t == 5 else 0.0) if ok else None for t, ok in zip(top, eligible)]
    assert got.summary["no_choice"] == sum(ok and t not in (3, 5, 7) for t, ok in zip(top, eligible)) > 0
    among = IIA().compute(IIA.Params(choices=["a", "b", "c"], label="b"),
                          metric_inputs(vocab, ("a", "b", "c"), ids, eligible))
    assert got.summary["mean"] < among.summary["mean"] and "no_choice" not in among.summary
    assert IIA().needs(params) == {"intervened": ("ranks",)}
