"""The math every engine shares, in this process or inside a remote block: batches, windows, swaps, scores, training.

Imported inside traced blocks, so it must be installed wherever an engine runs
(it is part of causalab-core). Nothing here reaches the plugin registry: the
featurizer classes a plan needs are handed in by the caller.
"""

from causalab_core.runtime.batches import Batch, batches
from causalab_core.runtime.featurizers import applier, featurizer_for, featurizers_for
from causalab_core.runtime.interventions import put
from causalab_core.runtime.scores import answer_scores, joined
from causalab_core.runtime.training import fit_featurizer, minibatch
from causalab_core.runtime.windows import SITE_ORDER, as_heads, gather, scatter, swap, window_index

__all__ = [
    "SITE_ORDER", "Batch", "answer_scores", "applier", "as_heads", "batches", "featurizer_for", "featurizers_for",
    "fit_featurizer", "gather", "joined", "minibatch", "put", "scatter", "swap", "window_index",
]
