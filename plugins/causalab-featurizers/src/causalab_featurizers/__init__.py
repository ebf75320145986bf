"""causalab-featurizers: the bases a write swaps in (identity, DAS, PCA, mask, boundless DAS, SAE).

Identity (the units), DAS (a trained rotation), PCA, a learned mask (DBM), boundless DAS, and sparse
autoencoders read from SAELens files."""

from __future__ import annotations

from causalab_core import hookimpl
from causalab_featurizers.boundless import BoundlessDAS
from causalab_featurizers.das import DAS
from causalab_featurizers.identity import Identity
from causalab_featurizers.mask import Mask
from causalab_featurizers.pca import PCA
from causalab_featurizers.sae import SAE


@hookimpl
def causalab_featurizers():
    return [Identity, DAS, PCA, Mask, BoundlessDAS, SAE]
