"""The six shipped kinds pass `InterventionConformance` (none combines `custom`, so the checks of `apply` skip;
the recipe checks and the runs end to end on the tiny Llama hold for each)."""

from __future__ import annotations

import pytest

from causalab_interventions import Add, Mean, Noise, Resample, Swap, Zero
from causalab_testing.conformance import InterventionConformance


class TestSwap(InterventionConformance):
    @pytest.fixture
    def intervention(self):
        return Swap()

    @pytest.fixture
    def params(self):
        return [{}]


class TestZero(InterventionConformance):
    @pytest.fixture
    def intervention(self):
        return Zero()

    @pytest.fixture
    def params(self):
        return [{}]


class TestMean(InterventionConformance):
    @pytest.fixture
    def intervention(self):
        return Mean()

    @pytest.fixture
    def params(self):
        return [{}]


class TestResample(InterventionConformance):
    @pytest.fixture
    def intervention(self):
        return Resample()

    @pytest.fixture
    def params(self):
        return [{"seed": 3}]


class TestNoise(InterventionConformance):
    @pytest.fixture
    def intervention(self):
        return Noise()

    @pytest.fixture
    def params(self):
        return [{"scale": 2.0, "seed": 1}, {"scale": 3, "std_of": "spread"}]


class TestAdd(InterventionConformance):
    @pytest.fixture
    def intervention(self):
        return Add()

    @pytest.fixture
    def params(self):
        return [{"alpha": 1.5, "vector": "steer.safetensors"}, {"alpha": -2, "minus": "baseline"}]
