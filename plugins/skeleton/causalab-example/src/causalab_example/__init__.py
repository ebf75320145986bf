"""causalab-example: a plugin skeleton with one metric (the Brier score of an answer column) and one
intervention kind (directional ablation, a custom `apply`)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from causalab_core import hookimpl
from causalab_core.plugins.contracts import Intervention, Metric, MetricInputs, MetricValues, Recipe, mean_over_eligible


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


class ProjectOutParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    vector: str = Field(description="A safetensors file holding one tensor of the site's width, the direction "
                                    "to remove (any length: it is scaled to unit length), relative to the "
                                    "document's folder.")


class ProjectOut(Intervention):
    """Directional ablation: the site's value with its component along a direction removed, ``x - (x . u) u``,
    ``u`` the file's vector scaled to unit length (a zero vector removes nothing)."""

    name = "example_project_out"
    Params = ProjectOutParams

    def recipe(self, params: ProjectOutParams) -> Recipe:
        # The need `tensor`: the compiler reads the file once, checks it is one vector of the site's width, and
        # its bytes travel in the plan. The combination `custom`: engines call `apply` below.
        return Recipe("tensor", "custom", tensor=params.vector)

    def apply(self, x: torch.Tensor, v: torch.Tensor, params: ProjectOutParams) -> torch.Tensor:
        # x: the site's value at the window, [rows, window, width] float32; v: the file's vector at every row and
        # position, as wide. Each row and position from its own x and v alone, the same bytes for the same inputs,
        # torch and the standard library only: the method may run on an NDIF server, its module shipped by value.
        u = torch.nn.functional.normalize(v, dim=-1)
        return x - (x * u).sum(-1, keepdim=True) * u


@hookimpl
def causalab_metrics():
    return [Brier]


@hookimpl
def causalab_interventions():
    return [ProjectOut]
