"""causalab-featurizers: identity, and DAS (a trained orthogonal rotation)."""

from __future__ import annotations

from causalab_core import hookimpl
from causalab_featurizers.das import DAS
from causalab_featurizers.identity import Identity


@hookimpl
def causalab_featurizers():
    return [Identity, DAS]
