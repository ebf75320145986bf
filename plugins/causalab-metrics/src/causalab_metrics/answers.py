"""Metrics over answer columns: each column names, per row, the answer text of one token."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from causalab_core.contracts import Metric, MetricInputs, MetricValues, mean_over_eligible
from causalab_core.errors import echo


class _Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class IIAParams(_Params):
    """Choices and the column holding the expected answer."""

    choices: list[str] = Field(min_length=2, description="Answer columns to choose between (argmax of their logits).")
    label: str = Field(description="The column whose answer counts as correct (usually the counterfactual's).")

    @model_validator(mode="after")
    def _label_is_a_choice(self) -> IIAParams:
        if self.label not in self.choices:
            raise ValueError(f"label {echo(self.label)} must be one of the choices {echo(self.choices)}")
        return self


class IIA(Metric):
    """Interchange intervention accuracy: 1 where the argmax over the choices is the label's token.

    A row whose choices tie exactly for the top has no argmax: its value is NaN (written ``"NaN"``), left
    out of the mean and counted in the summary's ``undefined``."""

    name = "iia"
    Params = IIAParams

    def columns(self, params: IIAParams) -> tuple[str, ...]:
        return tuple(params.choices)

    def compute(self, params: IIAParams, inputs: MetricInputs) -> MetricValues:
        choice_logits = inputs.logits[:, [inputs.columns.index(c) for c in params.choices]]
        best = choice_logits.argmax(dim=1).tolist()
        # An exact tie for the top has no argmax: which choice won would be the choices' order, not the model.
        tied = (choice_logits == choice_logits.max(dim=1, keepdim=True).values).sum(dim=1).gt(1).tolist()
        values = []
        for row, (b, tie) in enumerate(zip(best, tied)):
            predicted = inputs.token_ids[params.choices[b]][row]
            values.append(float("nan") if tie else 1.0 if predicted == inputs.token_ids[params.label][row] else 0.0)
        return mean_over_eligible(values, inputs.eligible)


class LogitDiffParams(_Params):
    """The logit of ``target`` minus the logit of ``other``."""

    target: str
    other: str


class LogitDiff(Metric):
    """Logit difference between two answer columns, per row and mean."""

    name = "logit_diff"
    Params = LogitDiffParams

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

    def columns(self, params: PAnswerParams) -> tuple[str, ...]:
        return (params.answer,)

    def compute(self, params: PAnswerParams, inputs: MetricInputs) -> MetricValues:
        p = (inputs.column(params.answer) - inputs.logsumexp).exp()
        return mean_over_eligible(p.tolist(), inputs.eligible)
