"""PCA: the site's principal components, fitted on its activations over the training rows; swap the first k.

``featurize(x) = ((x - mean) V)[..., :k], ((x - mean) V)[..., k:]`` and ``inverse(f, e) = [f, e] Vᵀ + mean``,
V every principal direction (width x width, by falling variance), so a swap exchanges the top-k components'
coordinates and keeps the base's others, and an ablation through it sets them to the training mean. The fit
is one pass (``fits = "activations"``): every activation the training swap featurizes (the windows of both
inputs, as a read over the training rows sees them), summed in float64; the covariance's eigenvectors are
the components, each signed so that its largest coordinate is positive (scikit-learn's convention).
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from causalab_core.plugins.contracts import Featurizer


class PCAParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    k: int = Field(ge=1, description="How many principal components are the features (the swapped subspace).")
    load: str | None = Field(None, description="A fitted PCA (safetensors written by a causalab run) to use as is.")


class PCA(torch.nn.Module, Featurizer):
    """The top ``k`` principal components of the site's activations on the training rows."""

    name = "pca"
    Params = PCAParams
    trainable = True
    fits = "activations"

    @classmethod
    def check_site(cls, params: PCAParams, width: int) -> None:
        if params.k >= width:
            raise ValueError(f"`k` {params.k} is not below the site width {width}: the first {width} components "
                             "are the whole site, which a plain swap exchanges; use a `k` below the width")

    @classmethod
    def has_units(cls, params: PCAParams) -> bool:
        return True

    @classmethod
    def check_training(cls, params: PCAParams, width: int, rows: int, activations: int) -> None:
        if activations <= params.k:
            raise ValueError(f"{rows} training rows give {activations} activations, too few for {params.k} "
                             f"components (at least {params.k + 1})")

    def __init__(self, params: PCAParams, width: int):
        torch.nn.Module.__init__(self)
        Featurizer.__init__(self, params, width)
        self.check_site(params, width)
        self.seen = (0, torch.zeros(width, dtype=torch.float64), torch.zeros(width, width, dtype=torch.float64))
        self.basis: torch.Tensor | None = None
        self.mean: torch.Tensor | None = None
        self.variance: torch.Tensor | None = None

    def featurize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.basis is None:  # being fitted: watch the activation, pass it through whole
            flat = x.detach().reshape(-1, self.width).double().cpu()
            n, total, outer = self.seen
            self.seen = (n + flat.shape[0], total + flat.sum(0), outer + flat.T @ flat)
            return x.float(), None
        coords = (x.float() - self.mean.to(x.device)) @ self.basis.to(x.device)
        return coords[..., :self.params.k], coords[..., self.params.k:]

    def inverse(self, f: torch.Tensor, err: torch.Tensor | None) -> torch.Tensor:
        if err is None:
            return f
        return torch.cat([f, err], dim=-1) @ self.basis.to(f.device).T + self.mean.to(f.device)

    def settle(self) -> None:
        n, total, outer = self.seen
        if n <= self.params.k:
            raise ValueError(f"pca: {n} activations seen, too few for {self.params.k} components")
        mean = total / n
        values, vectors = torch.linalg.eigh(outer / n - torch.outer(mean, mean))
        values, vectors = values.flip(0).clamp(min=0), vectors.flip(1)
        signs = vectors.gather(0, vectors.abs().argmax(0, keepdim=True))[0].sign()
        vectors = vectors * torch.where(signs == 0, 1.0, signs)
        self.basis, self.mean = vectors.float().contiguous(), mean.float()
        self.variance = (values * n / (n - 1)).float()  # per component, with the unbiased estimator as scikit-learn

    def state(self) -> dict[str, torch.Tensor]:
        return {"basis": self.basis, "mean": self.mean, "variance": self.variance,
                "units": torch.arange(self.params.k)}

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        basis = tensors.get("basis")
        if basis is None or basis.shape != (self.width, self.width) or tensors["mean"].shape != (self.width,):
            raise ValueError(f"a PCA file holds `basis` ({self.width} x {self.width}) and `mean` ({self.width}) "
                             "for this site's width")
        self.basis, self.mean = basis.float().contiguous(), tensors["mean"].float()
        self.variance = tensors.get("variance")
