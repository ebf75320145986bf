"""Distributed alignment search: swap a rank-k subspace of an orthogonal rotation of the site.

``featurize(x) = (x Q)[..., :k], (x Q)[..., k:]`` and ``inverse(f, e) = [f, e] Qᵀ``,
so a swap exchanges the first ``rank`` rotated coordinates and keeps the
base's other ``width - rank``. Q is kept orthogonal by torch's orthogonal
parametrization (Cayley map) and computed in float32.

``part`` is the dormant-pathway check of Makelov et al. (2023, "Is this the subspace you are looking
for?"), in the form that fits a site with no readout matrix of its own (the residual stream): the trained
subspace's patch ``Δ = P_S (x_source - x_base)`` is split into its part in the span the site's activations
take on the training prompts (``varying``: the principal directions holding ``share`` of their variance)
and the part outside it (``still``), and only that part is written: ``x_base + Δ P``. A dormant pathway is
a direction the model reads but its activations do not move along; a subspace that works through one moves
answers with its ``still`` part and not with its ``varying`` part. Training is the plain DAS's (the same
rotation from the same seed and rows); the span is measured from the activations training featurizes and
saved beside the rotation (``variation``), and the split applies whenever it is not being trained.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch.nn.utils import parametrizations

from causalab_core.plugins.contracts import Featurizer


class DASParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    rank: int = Field(ge=1, description="Dimensions of the swapped subspace.")
    load: str | None = Field(None, description="A trained rotation (safetensors written by a causalab run) to use as is.")
    seed: int | None = Field(None, description="Draw the initial rotation from this seed (untrained, it is a random "
                             "rotation: the control of a trained one); by default training's seed decides it.")
    part: Literal["varying", "still"] | None = Field(
        None, description="Write only this part of the trained subspace's patch: inside the span of the site's "
        "activations on the training prompts (`varying`) or outside it (`still`); the dormant-pathway check.")
    share: float | None = Field(None, gt=0, lt=1, description="With `part`: the share of the activations' "
                                "variance the `varying` span holds (default 0.99).")


class DAS(torch.nn.Module, Featurizer):
    """A learned orthogonal rotation; the first ``rank`` rotated coordinates are the features."""

    name = "das"
    Params = DASParams
    trainable = True

    @classmethod
    def check_site(cls, params: DASParams, width: int) -> None:
        if params.rank > width:
            raise ValueError(f"`rank` {params.rank} exceeds the site width {width}")
        if params.rank == width:  # the whole site: a control (a seed, shuffled labels) could not differ either
            raise ValueError(f"`rank` {width} is the whole site (width {width}): every rotation swaps all of it, "
                             f"as a plain swap does, so nothing is learned; use a rank below {width}")

    @classmethod
    def has_units(cls, params: DASParams) -> bool:
        return params.part is None  # with `part`, the features are the whole base activation

    def __init__(self, params: DASParams, width: int):
        torch.nn.Module.__init__(self)
        Featurizer.__init__(self, params, width)
        self.check_site(params, width)
        linear = torch.nn.Linear(width, width, bias=False, dtype=torch.float32)
        if params.seed is not None:
            with torch.no_grad():
                linear.weight.copy_(torch.randn(width, width, generator=torch.Generator().manual_seed(params.seed)))
        self.rotate = parametrizations.orthogonal(linear, orthogonal_map="cayley")
        # The site's activations seen in training (float64 sums), for ``part``'s span.
        self.seen = (0, torch.zeros(width, dtype=torch.float64), torch.zeros(width, width, dtype=torch.float64))
        self.variation: torch.Tensor | None = None
        if params.load:
            from safetensors.torch import load_file

            self.load_state(load_file(params.load))

    @property
    def rotation(self) -> torch.Tensor:
        return self.rotate.weight

    def featurize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rotated = x.float() @ self.rotation.to(x.device)
        k = self.params.rank
        if self.params.part is None:
            return rotated[..., :k], rotated[..., k:]
        if self.learning():
            flat = x.detach().reshape(-1, self.width).double().cpu()
            n, total, outer = self.seen
            self.seen = (n + flat.shape[0], total + flat.sum(0), outer + flat.T @ flat)
            return rotated[..., :k], rotated[..., k:]
        # The split patch: the error is the whole base activation, so inverse can write part of the patch.
        return rotated[..., :k], x.float()

    def inverse(self, f: torch.Tensor, err: torch.Tensor) -> torch.Tensor:
        rotation = self.rotation.to(f.device)
        if self.params.part is None or self.learning():
            return torch.cat([f, err], dim=-1) @ rotation.T
        k = self.params.rank
        patch = (f - err @ rotation[:, :k]) @ rotation[:, :k].T
        inside = (patch @ self.span().to(f.device)) @ self.span().to(f.device).T
        return err + (inside if self.params.part == "varying" else patch - inside)

    def learning(self) -> bool:
        """Being trained: training mode with gradients on (engines score under no_grad or inference_mode, and
        a module fresh or loaded from a file is in training mode until something calls eval())."""
        return self.training and torch.is_grad_enabled()

    def span(self) -> torch.Tensor:
        """An orthonormal basis (width x m) of the principal directions of the activations training saw."""
        if self.variation is None:
            n, total, outer = self.seen
            if n < 2:
                raise ValueError("`part` needs a trained DAS (the span is measured from the training activations)")
            mean = total / n
            values, vectors = torch.linalg.eigh(outer / n - torch.outer(mean, mean))
            values, vectors = values.flip(0).clamp(min=0), vectors.flip(1)
            share = self.params.share if self.params.share is not None else 0.99
            kept = int(torch.searchsorted(values.cumsum(0) / values.sum(), torch.tensor(share, dtype=values.dtype))) + 1
            self.variation = vectors[:, :min(kept, self.width)].float().contiguous()
        return self.variation

    def state(self) -> dict[str, torch.Tensor]:
        out = {"rotation": self.rotation.detach().cpu().contiguous()}
        if self.params.part is not None:
            out["variation"] = self.span().detach().cpu().contiguous()
        return out

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        rotation = tensors["rotation"].float()
        if rotation.shape != (self.width, self.width):
            raise ValueError(f"rotation of shape {tuple(rotation.shape)} does not fit width {self.width}")
        if self.params.part is not None:
            if "variation" not in tensors or tensors["variation"].shape[0] != self.width:
                raise ValueError("a DAS file for `part` holds `variation`, the activations' span, of the site's width")
            self.variation = tensors["variation"].float().contiguous()
        with torch.no_grad():
            self.rotate.weight = rotation
