"""A learned mask over a site's units (DBM, a differentiable binary mask), or over another featurizer's.

``featurize(x) = (m ⊙ x, (1 - m) ⊙ x)`` and ``inverse(f, e) = f + e``, so a swap writes
``m ⊙ x_source + (1 - m) ⊙ x_base``: pyvene's ``SigmoidMaskIntervention``. In training ``m`` is
``sigmoid(logits / T)``, the temperature ``T`` falling linearly from ``temperature`` to ``final_temperature``
over the steps, and the loss adds ``sparsity`` times the mask's mean (the share of the units kept), as DAS's
loop does the rest (the same Adam, rows and cross-entropy). Scored, the mask is binary: the units whose logit
is above zero, which the trained file lists (``units``; ``size`` in its header). Over another featurizer
(the document's ``over``, an SAE say), the units are that one's features.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from causalab_core.plugins.contracts import Featurizer


class MaskParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    sparsity: float = Field(1.0, ge=0, description="Weight of the share of units kept in the training loss.")
    temperature: float = Field(1.0, gt=0, description="The sigmoid's temperature at the first training step.")
    final_temperature: float = Field(0.01, gt=0, description="The temperature at the last step (linear between).")
    load: str | None = Field(None, description="A trained mask (safetensors written by a causalab run) to use as is.")


class Mask(torch.nn.Module, Featurizer):
    """A mask over the units; trained soft, scored binary."""

    name = "mask"
    Params = MaskParams
    trainable = True
    needs_fit = True  # untrained, every logit is 0: it keeps no unit and swaps nothing

    def __init__(self, params: MaskParams, width: int):
        torch.nn.Module.__init__(self)
        Featurizer.__init__(self, params, width)
        self.logits = torch.nn.Parameter(torch.zeros(width))  # pyvene's start: every unit at one half
        self.temperature = params.temperature

    def anneal(self, step: int, steps: int) -> None:
        start, end = self.params.temperature, self.params.final_temperature
        self.temperature = start + (end - start) * step / max(steps - 1, 1)

    def mask(self) -> torch.Tensor:
        if self.training and torch.is_grad_enabled():
            return torch.sigmoid(self.logits / torch.tensor(self.temperature))
        return (self.logits > 0).float()

    def penalty(self) -> torch.Tensor:
        return self.params.sparsity * torch.sigmoid(self.logits / torch.tensor(self.temperature)).mean()

    def featurize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = self.mask().to(x.device)
        return m * x.float(), (1.0 - m) * x.float()

    def inverse(self, f: torch.Tensor, err: torch.Tensor) -> torch.Tensor:
        return f + err

    def state(self) -> dict[str, torch.Tensor]:
        logits = self.logits.detach().cpu().contiguous()
        return {"logits": logits, "units": (logits > 0).nonzero()[:, 0]}

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        logits = tensors.get("logits")
        if logits is None or logits.shape != (self.width,):
            raise ValueError(f"a mask file holds `logits` of the width it masks ({self.width})")
        with torch.no_grad():
            self.logits.copy_(logits.float())
