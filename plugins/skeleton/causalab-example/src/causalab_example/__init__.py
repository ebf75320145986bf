"""causalab-example: a plugin skeleton with one metric (the Brier score of an answer column), one
intervention kind (directional ablation, a custom `apply`) and one featurizer (a learned direction)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from causalab_core import hookimpl
from causalab_core.plugins.contracts import (
    Featurizer, Intervention, Metric, MetricInputs, MetricValues, Recipe, mean_over_eligible,
)


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


class DirectionParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    seed: int = Field(0, description="Draws the initial direction (never torch's global state: every engine "
                      "makes its own instance and must compute the same values).")
    load: str | None = Field(None, description="A trained direction (a causalab run's file) to use as is.")


class Direction(torch.nn.Module, Featurizer):
    """One learned direction ``u`` (kept at unit length): the feature is ``x . u``, the rest ``x - (x . u) u``,
    so a swap exchanges the component along ``u`` and keeps the base's other ones (a rank-1 DAS)."""

    name = "example_direction"
    Params = DirectionParams
    trainable = True  # a document's `train` fits it by interchange, as DAS: Adam on parameters(), the label's loss

    @classmethod
    def check_site(cls, params: DirectionParams, width: int) -> None:
        # Compile time, before weights load: raise ValueError for what cannot work; core adds the JSON path.
        if width < 2:
            raise ValueError(f"a direction of a {width}-wide site is the whole site")

    @classmethod
    def has_units(cls, params: DirectionParams) -> bool:
        return True  # one feature, whatever the input: a mask could be trained over it (`over`)

    def __init__(self, params: DirectionParams, width: int):
        torch.nn.Module.__init__(self)
        Featurizer.__init__(self, params, width)
        self.raw = torch.nn.Parameter(torch.randn(width, generator=torch.Generator().manual_seed(params.seed)))

    def unit(self) -> torch.Tensor:
        return torch.nn.functional.normalize(self.raw, dim=0)

    def featurize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # x: [..., width] float32. Return the features and what they leave out; inverse must give x back.
        u = self.unit().to(x.device)
        along = x.float() @ u
        return along.unsqueeze(-1), x.float() - along.unsqueeze(-1) * u

    def inverse(self, f: torch.Tensor, err: torch.Tensor) -> torch.Tensor:
        return err + f * self.unit().to(f.device)

    def state(self) -> dict[str, torch.Tensor]:
        # What a run saves as `<name>.safetensors` and a document's `load` gives back to load_state.
        return {"direction": self.unit().detach().cpu().contiguous()}

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        if tensors["direction"].shape != (self.width,):
            raise ValueError(f"a direction file holds one vector of the site's width ({self.width})")
        with torch.no_grad():
            self.raw.copy_(tensors["direction"])


@hookimpl
def causalab_metrics():
    return [Brier]


@hookimpl
def causalab_interventions():
    return [ProjectOut]


@hookimpl
def causalab_featurizers():
    return [Direction]
