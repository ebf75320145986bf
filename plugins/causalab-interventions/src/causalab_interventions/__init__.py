"""The interventions a write can make: swap (the default), zero, mean, resample, noise, add."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, field_validator

from causalab_core import hookimpl
from causalab_core.plugins.contracts import Intervention, NoParams, Recipe


class Swap(Intervention):
    """The source read's value on the same row (interchange): what a write without an intervention does."""

    name = "swap"
    Params = NoParams

    def recipe(self, params):
        return Recipe("source", "replace")


class Zero(Intervention):
    """Zero ablation: the site's value times 0 (through a featurizer, the features only)."""

    name = "zero"
    Params = NoParams

    def recipe(self, params):
        return Recipe("nothing", "scale", alpha=0.0)


class Mean(Intervention):
    """Mean ablation: the source read's mean over the rows it resolved on, at every written position."""

    name = "mean"
    Params = NoParams

    def recipe(self, params):
        return Recipe("mean", "replace")


class Seeded(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    seed: int = Field(0, ge=0, lt=2**31, description="Seeds the draw; the same seed draws the same numbers on every engine.")


class Resample(Intervention):
    """Resample ablation: the source read's value on another row, drawn from ``seed`` for each row on its own
    (uniformly among the other rows whose windows are as wide: two rows may draw the same one, and a row may be
    drawn by none)."""

    name = "resample"
    Params = Seeded

    def recipe(self, params):
        return Recipe("resample", "replace", seed=params.seed)


class NoiseParams(Seeded):
    scale: float = Field(gt=0, description="Standard deviation of the Gaussian noise added to the site's value "
                                           "(in units of `std_of`'s standard deviation, where given).")
    std_of: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_\-]*$",
                               description="A read (on another input): the noise's standard deviation is `scale` "
                                           "times the standard deviation of its values over the rows it resolved "
                                           "on (3 and the subject's embeddings: Meng et al. 2022).")

    @field_validator("scale")
    @classmethod
    def finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("scale must be a finite number")
        return value


class Noise(Intervention):
    """Noising: ``scale`` times standard normal noise added at the site (times ``std_of``'s spread, where
    given), drawn on the CPU from ``seed`` and the row's index, so every engine and device adds the same numbers."""

    name = "noise"
    Params = NoiseParams

    def recipe(self, params):
        return Recipe("noise", "add", alpha=params.scale, seed=params.seed, std_of=params.std_of)


class AddParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    alpha: float = Field(1.0, description="How many times the vector is added.")
    vector: str | None = Field(None, description="A safetensors file holding one tensor, the site's width wide "
                                                 "(relative to the document's data folder).")
    minus: str | None = Field(None, description="A read: the vector is the write's source's mean less this "
                                                "read's mean (over the rows each resolved on).")

    @field_validator("alpha")
    @classmethod
    def finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("alpha must be a finite number")
        return value


class Add(Intervention):
    """Steering: ``alpha`` times a vector added at the site, the vector from a file or a difference of means."""

    name = "add"
    Params = AddParams

    def recipe(self, params):
        if (params.vector is None) == (params.minus is None):
            raise ValueError("give exactly one of `vector` (a file) or `minus` (a read: source mean - its mean)")
        if params.vector is not None:
            return Recipe("tensor", "add", alpha=params.alpha, tensor=params.vector)
        return Recipe("mean", "add", alpha=params.alpha, minus=params.minus)

    @classmethod
    def check_write(cls, params, width, vector):
        if vector is not None and not vector.any():
            raise ValueError(f"the vector in {params.vector} is zero: adding it changes nothing")


@hookimpl
def causalab_interventions():
    return [Swap, Zero, Mean, Resample, Noise, Add]
