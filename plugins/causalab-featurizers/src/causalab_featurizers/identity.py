"""The identity featurizer: features are coordinates of the activation itself."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from causalab_core.plugins.contracts import Featurizer


class IdentityParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    features: list[int] | None = Field(None, description="Coordinates to swap; all of them when omitted.")


class Identity(Featurizer):
    """Swap chosen coordinates of the activation (all of them by default)."""

    name = "identity"
    Params = IdentityParams

    @classmethod
    def has_units(cls, params):
        return True

    def featurize(self, x):
        if self.params.features is None:
            return x, None
        return x[..., self.params.features], x

    def inverse(self, f, err):
        if err is None:
            return f
        out = err.clone()
        out[..., self.params.features] = f
        return out
