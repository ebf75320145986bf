"""causalab-featurizers: the identity featurizer (DAS follows)."""

from __future__ import annotations

from causalab_core import hookimpl
from causalab_featurizers.identity import Identity


@hookimpl
def causalab_featurizers():
    return [Identity]
