"""The identity featurizer: whole-vector and chosen-coordinate swaps."""

from __future__ import annotations

import pytest
import torch

from causalab_core.runtime import swap
from causalab_testing.conformance import FeaturizerConformance
from causalab_featurizers.identity import Identity


def test_a_swap_of_chosen_features_keeps_the_other_coordinates():
    feat = Identity(Identity.Params(features=[0, 2]), width=4)
    base = torch.zeros(2, 4)
    source = torch.ones(2, 4)
    assert swap(feat, base, source).tolist() == [[1.0, 0.0, 1.0, 0.0]] * 2


def test_a_swap_of_all_features_is_the_source():
    feat = Identity(Identity.Params(), width=3)
    source = torch.randn(5, 3)
    assert torch.equal(swap(feat, torch.zeros(5, 3), source), source)


class TestAllFeatures(FeaturizerConformance):
    @pytest.fixture
    def featurizer(self):
        return Identity(Identity.Params(), width=8)


class TestSomeFeatures(FeaturizerConformance):
    @pytest.fixture
    def featurizer(self):
        return Identity(Identity.Params(features=[1, 5]), width=8)
