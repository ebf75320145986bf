"""causalab-example: a plugin skeleton with one metric, the Brier score of an answer column."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from causalab_core import hookimpl
from causalab_core.contracts import Metric, MetricInputs, MetricValues, mean_over_eligible


class BrierParams(BaseModel):
    # frozen: parameters are plain data in the plan; extra="forbid": a misspelt key in a document is refused.
    model_config = ConfigDict(frozen=True, extra="forbid")
    answer: str = Field(description="The answer column whose probability is scored (e.g. cf_answer).")


class Brier(Metric):
    """(1 - p(answer))^2 per row, p the softmax probability of the answer column's token; mean over eligible rows."""

    name = "example_brier"
    Params = BrierParams

    def columns(self, params: BrierParams) -> tuple[str, ...]:
        return (params.answer,)

    def compute(self, params: BrierParams, inputs: MetricInputs) -> MetricValues:
        # inputs.column(name), never inputs.logits[:, i]: a step scores every answer column of the document.
        p = (inputs.column(params.answer) - inputs.logsumexp).exp()
        return mean_over_eligible(((1 - p) ** 2).tolist(), inputs.eligible)


@hookimpl
def causalab_metrics():
    return [Brier]
