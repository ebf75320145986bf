"""Metrics that read more than the intervened run's answer columns: KL, an answer's rank, normalized logit difference."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from causalab_core.plugins.contracts import Metric, MetricInputs, MetricValues, mean_over_eligible
from causalab_metrics.answers import LogitDiffParams, PAnswerParams, _Params


class KLParams(_Params):
    """Which run's next-token distribution the intervened run's is compared with."""

    reference: Literal["counterfactual", "base"] = Field(
        "counterfactual", description="counterfactual: the source input's own run; base: the scored input, unpatched.")


class KL(Metric):
    """KL(intervened || reference) of the next-token distributions over the whole vocabulary, in nats.

    Needs the full log-softmax of both runs (``logprobs``): ``rows x vocab`` float32 per run travels.
    """

    name = "kl"
    Params = KLParams

    def columns(self, params: KLParams) -> tuple[str, ...]:
        return ()

    def needs(self, params: KLParams):
        return {"intervened": ("logprobs",), params.reference: ("logprobs",)}

    def compute(self, params: KLParams, inputs: MetricInputs) -> MetricValues:
        p, q = inputs.logprobs, inputs.runs[params.reference].logprobs
        kl = (p.exp() * (p - q)).sum(-1)
        return mean_over_eligible(kl.tolist(), inputs.eligible)


class AnswerRank(Metric):
    """The rank of an answer column's token among the whole vocabulary in the intervened run (0: the top token).

    Reduced where the logits are (view ``ranks``): one integer per row and column travels.
    """

    name = "answer_rank"
    Params = PAnswerParams

    def columns(self, params: PAnswerParams) -> tuple[str, ...]:
        return (params.answer,)

    def needs(self, params: PAnswerParams):
        return {"intervened": ("ranks",)}

    def compute(self, params: PAnswerParams, inputs: MetricInputs) -> MetricValues:
        ranks = inputs.rank(params.answer).tolist()
        values = mean_over_eligible(ranks, inputs.eligible)
        top = [r == 0 for r, ok in zip(ranks, inputs.eligible) if ok]
        values.summary["top1"] = sum(top) / len(top) if top else None
        return values


class NormalizedLogitDiff(Metric):
    """The patching effect on the logit difference, normalized: ``(patched - base) / (counterfactual - base)``.

    ``patched``: the intervened run's ``target - other``; ``base``: the scored input's clean run's;
    ``counterfactual``: the source input's own run's. 0 is no effect, 1 moves all the way to the
    counterfactual run's difference. A row whose clean runs have the same difference has no such
    ratio: its value is NaN (written ``"NaN"``) and the summary's ``undefined`` counts it.
    """

    name = "normalized_logit_diff"
    Params = LogitDiffParams
    differentiable = True

    def linear(self, params: LogitDiffParams):  # of the intervened run; the clean and counterfactual runs are run
        return {params.target: 1.0, params.other: -1.0}

    def columns(self, params: LogitDiffParams) -> tuple[str, ...]:
        return (params.target, params.other)

    def needs(self, params: LogitDiffParams):
        return {"intervened": ("answers",), "base": ("answers",), "counterfactual": ("answers",)}

    def compute(self, params: LogitDiffParams, inputs: MetricInputs) -> MetricValues:
        def diff(run: MetricInputs):
            return run.column(params.target) - run.column(params.other)

        patched, base, counterfactual = diff(inputs), diff(inputs.runs["base"]), diff(inputs.runs["counterfactual"])
        span = counterfactual - base
        values = [float("nan") if s == 0 else float(v) for v, s in zip(((patched - base) / span).tolist(), span.tolist())]
        rows = [v if ok else None for v, ok in zip(values, inputs.eligible)]
        defined = [v for v in rows if v is not None and v == v]
        return MetricValues(rows=rows, summary={
            "mean": sum(defined) / len(defined) if defined else None, "eligible": sum(map(bool, inputs.eligible)),
            "rows": len(rows), "undefined": sum(1 for v in rows if v is not None and v != v)})
