"""Distributed alignment search: swap a rank-k subspace of an orthogonal rotation of the site.

``featurize(x) = (x Q)[..., :k], (x Q)[..., k:]`` and ``inverse(f, e) = [f, e] Qᵀ``,
so a swap exchanges the first ``rank`` rotated coordinates and keeps the
base's other ``width - rank``. Q is kept orthogonal by torch's orthogonal
parametrization (Cayley map) and computed in float32.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch.nn.utils import parametrizations

from causalab_core.contracts import Featurizer


class DASParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    rank: int = Field(ge=1, description="Dimensions of the swapped subspace.")
    load: str | None = Field(None, description="A trained rotation (safetensors written by a causalab run) to use as is.")
    seed: int | None = Field(None, description="Draw the initial rotation from this seed (untrained, it is a random "
                             "rotation: the control of a trained one); by default training's seed decides it.")


class DAS(torch.nn.Module, Featurizer):
    """A learned orthogonal rotation; the first ``rank`` rotated coordinates are the features."""

    name = "das"
    Params = DASParams
    trainable = True

    @classmethod
    def check_site(cls, params: DASParams, width: int) -> None:
        if params.rank > width:
            raise ValueError(f"`rank` {params.rank} exceeds the site width {width}")

    def __init__(self, params: DASParams, width: int):
        torch.nn.Module.__init__(self)
        Featurizer.__init__(self, params, width)
        self.check_site(params, width)
        linear = torch.nn.Linear(width, width, bias=False, dtype=torch.float32)
        if params.seed is not None:
            with torch.no_grad():
                linear.weight.copy_(torch.randn(width, width, generator=torch.Generator().manual_seed(params.seed)))
        self.rotate = parametrizations.orthogonal(linear, orthogonal_map="cayley")
        if params.load:
            from safetensors.torch import load_file

            self.load_state(load_file(params.load))

    @property
    def rotation(self) -> torch.Tensor:
        return self.rotate.weight

    def featurize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rotated = x.float() @ self.rotation.to(x.device)
        k = self.params.rank
        return rotated[..., :k], rotated[..., k:]

    def inverse(self, f: torch.Tensor, err: torch.Tensor) -> torch.Tensor:
        return torch.cat([f, err], dim=-1) @ self.rotation.to(f.device).T

    def state(self) -> dict[str, torch.Tensor]:
        return {"rotation": self.rotation.detach().cpu().contiguous()}

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        rotation = tensors["rotation"].float()
        if rotation.shape != (self.width, self.width):
            raise ValueError(f"rotation of shape {tuple(rotation.shape)} does not fit width {self.width}")
        with torch.no_grad():
            self.rotate.weight = rotation
