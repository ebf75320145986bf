"""Boundless DAS (Wu et al. 2023, "Interpretability at Scale"): DAS whose subspace size is learned.

An orthogonal rotation R (torch's orthogonal parametrization, matrix exponential, initialized by
``torch.nn.init.orthogonal_``, as pyvene's ``RotateLayer``) and a boundary ``b`` (a share of the width,
starting at 0.5). In training the rotated coordinates ``i`` are weighted by
``m_i = sigmoid(i / T) sigmoid((b d - i) / T)`` (pyvene's ``sigmoid_boundary``, ``b`` clamped to [1e-3, 1]),
``featurize(x) = (m ⊙ xR, (1 - m) ⊙ xR)`` and ``inverse(f, e) = (f + e) Rᵀ``: pyvene's
``BoundlessRotatedSpaceIntervention``. The temperature falls linearly from ``temperature`` to
``final_temperature`` (pyvene keeps it a parameter that its tutorial sets by the same schedule and does not
train), and the loss adds ``sparsity`` times ``b``. Scored, the boundary is hard: the first ``ceil(b d)``
rotated coordinates, which the trained file lists (``units``, ``size``).
"""

from __future__ import annotations

import math

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch.nn.utils import parametrizations

from causalab_core.plugins.contracts import Featurizer


class BoundlessParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    sparsity: float = Field(1.0, ge=0, description="Weight of the boundary (the share of the width swapped) in "
                            "the training loss.")
    temperature: float = Field(50.0, gt=0, description="The boundary's temperature at the first training step.")
    final_temperature: float = Field(0.1, gt=0, description="The temperature at the last step (linear between).")
    seed: int | None = Field(None, description="Draw the initial rotation from this seed; by default training's "
                             "seed decides it.")
    load: str | None = Field(None, description="A trained boundless DAS (safetensors written by a causalab run).")


class BoundlessDAS(torch.nn.Module, Featurizer):
    """A learned rotation and a learned boundary: the subspace's size is trained too."""

    name = "boundless_das"
    Params = BoundlessParams
    trainable = True

    def __init__(self, params: BoundlessParams, width: int):
        torch.nn.Module.__init__(self)
        Featurizer.__init__(self, params, width)
        weight = torch.empty(width, width)
        generator = torch.Generator().manual_seed(params.seed) if params.seed is not None else None
        torch.nn.init.orthogonal_(weight, generator=generator)
        linear = torch.nn.Linear(width, width, bias=False)
        with torch.no_grad():
            linear.weight.copy_(weight)
        self.rotate = parametrizations.orthogonal(linear, orthogonal_map="matrix_exp")
        self.boundary = torch.nn.Parameter(torch.tensor([0.5]))
        self.temperature = params.temperature
        self.register_buffer("population", torch.arange(width), persistent=False)

    @property
    def rotation(self) -> torch.Tensor:
        return self.rotate.weight

    def anneal(self, step: int, steps: int) -> None:
        start, end = self.params.temperature, self.params.final_temperature
        self.temperature = start + (end - start) * step / max(steps - 1, 1)

    def size(self) -> int:
        """How many rotated coordinates the hard boundary keeps."""
        return min(max(math.ceil(float(self.boundary.detach().clamp(1e-3, 1)) * self.width), 1), self.width)

    def mask(self) -> torch.Tensor:
        if self.training and torch.is_grad_enabled():
            end = self.boundary.clamp(1e-3, 1)[0] * self.width
            t = torch.tensor(self.temperature)
            return torch.sigmoid(self.population / t) * torch.sigmoid((end - self.population) / t)
        return (self.population < self.size()).float()

    def penalty(self) -> torch.Tensor:
        return self.params.sparsity * self.boundary.sum()

    def featurize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rotated = x.float() @ self.rotation.to(x.device)
        m = self.mask().to(x.device)
        return m * rotated, (1.0 - m) * rotated

    def inverse(self, f: torch.Tensor, err: torch.Tensor) -> torch.Tensor:
        return (f + err) @ self.rotation.to(f.device).T

    def state(self) -> dict[str, torch.Tensor]:
        return {"rotation": self.rotation.detach().cpu().contiguous(), "boundary": self.boundary.detach().cpu(),
                "units": torch.arange(self.size())}

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        rotation, boundary = tensors.get("rotation"), tensors.get("boundary")
        if rotation is None or rotation.shape != (self.width, self.width) or boundary is None:
            raise ValueError(f"a boundless DAS file holds `rotation` ({self.width} x {self.width}) and `boundary`")
        with torch.no_grad():
            self.rotate.weight = rotation.float()
            self.boundary.copy_(boundary.float().reshape(1))
