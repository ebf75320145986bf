"""Metrics over answer columns: each column names, per row, the answer text of one token."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from causalab_core.plugins.contracts import Metric, MetricInputs, MetricValues, mean_over_eligible
from causalab_core.errors import echo


class _Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class IIAParams(_Params):
    """Choices and the column holding the expected answer."""

    choices: list[str] = Field(min_length=2, description="Answer columns to choose between (argmax of their logits).")
    label: str = Field(description="The column whose answer counts as correct (usually the counterfactual's).")
    over: Literal["choices", "vocabulary"] = Field(
        "choices", description="Where the model's answer is its top token: among the choices, or over the whole "
        "vocabulary (a row whose top token is none of the choices scores 0, and the summary counts those rows "
        "as `no_choice`).")

    @model_validator(mode="after")
    def _label_is_a_choice(self) -> IIAParams:
        if self.label not in self.choices:
            raise ValueError(f"label {echo(self.label)} must be one of the choices {echo(self.choices)}")
        return self


class IIA(Metric):
    """Interchange intervention accuracy: 1 where the argmax over the choices is the label's token (with
    ``over: vocabulary``, where the label's token is also the top token of the whole vocabulary).

    A row whose choices tie exactly for the top has no argmax: its value is NaN (written ``"NaN"``), left
    out of the mean and counted in the summary's ``undefined``."""

    name = "iia"
    Params = IIAParams

    def columns(self, params: IIAParams) -> tuple[str, ...]:
        return tuple(params.choices)

    def needs(self, params: IIAParams):
        return {"intervened": ("ranks",) if params.over == "vocabulary" else ("answers",)}

    def compute(self, params: IIAParams, inputs: MetricInputs) -> MetricValues:
        choice_logits = inputs.logits[:, [inputs.columns.index(c) for c in params.choices]]
        best = choice_logits.argmax(dim=1).tolist()
        # An exact tie for the top has no argmax: which choice won would be the choices' order, not the model.
        tied = (choice_logits == choice_logits.max(dim=1, keepdim=True).values).sum(dim=1).gt(1).tolist()
        # Over the vocabulary, the best choice is the model's answer only where no other token scores above it.
        on_top = ([int(inputs.rank(params.choices[b])[row]) == 0 for row, b in enumerate(best)]
                  if params.over == "vocabulary" else [True] * len(best))
        values = []
        for row, (b, tie, top) in enumerate(zip(best, tied, on_top)):
            predicted = inputs.token_ids[params.choices[b]][row]
            correct = top and predicted == inputs.token_ids[params.label][row]
            values.append(float("nan") if tie and top else 1.0 if correct else 0.0)
        summary = mean_over_eligible(values, inputs.eligible)
        if params.over == "vocabulary":
            summary.summary["no_choice"] = sum(1 for top, ok in zip(on_top, inputs.eligible) if ok and not top)
        return summary


class LogitDiffParams(_Params):
    """The logit of ``target`` minus the logit of ``other``."""

    target: str
    other: str


class LogitDiff(Metric):
    """Logit difference between two answer columns, per row and mean."""

    name = "logit_diff"
    Params = LogitDiffParams
    differentiable = True

    def linear(self, params: LogitDiffParams):
        return {params.target: 1.0, params.other: -1.0}

    def columns(self, params: LogitDiffParams) -> tuple[str, ...]:
        return (params.target, params.other)

    def compute(self, params: LogitDiffParams, inputs: MetricInputs) -> MetricValues:
        diff = inputs.column(params.target) - inputs.column(params.other)
        return mean_over_eligible(diff.tolist(), inputs.eligible)


class PAnswerParams(_Params):
    """The column whose answer's probability is reported."""

    answer: str


class PAnswer(Metric):
    """Softmax probability (over the whole vocabulary) of one answer column's token."""

    name = "p_answer"
    Params = PAnswerParams
    differentiable = True

    def linear(self, params: PAnswerParams):  # the exponential of the log-probability
        return {params.answer: 1.0, "logsumexp": -1.0}

    def columns(self, params: PAnswerParams) -> tuple[str, ...]:
        return (params.answer,)

    def compute(self, params: PAnswerParams, inputs: MetricInputs) -> MetricValues:
        p = (inputs.column(params.answer) - inputs.logsumexp).exp()
        return mean_over_eligible(p.tolist(), inputs.eligible)


class LogProb(Metric):
    """Log-probability (log-softmax over the whole vocabulary) of one answer column's token, in nats."""

    name = "logprob"
    Params = PAnswerParams
    differentiable = True

    def linear(self, params: PAnswerParams):
        return {params.answer: 1.0, "logsumexp": -1.0}

    def columns(self, params: PAnswerParams) -> tuple[str, ...]:
        return (params.answer,)

    def compute(self, params: PAnswerParams, inputs: MetricInputs) -> MetricValues:
        return mean_over_eligible((inputs.column(params.answer) - inputs.logsumexp).tolist(), inputs.eligible)
