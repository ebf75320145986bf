"""causalab-metrics: iia, logit_diff, p_answer, logprob, kl, answer_rank and normalized_logit_diff."""

from __future__ import annotations

from causalab_core import hookimpl
from causalab_metrics.answers import IIA, LogitDiff, LogProb, PAnswer
from causalab_metrics.distributions import KL, AnswerRank, NormalizedLogitDiff


@hookimpl
def causalab_metrics():
    return [IIA, LogitDiff, PAnswer, LogProb, KL, AnswerRank, NormalizedLogitDiff]
