"""How far a summary's mean could move with other rows: a seeded percentile bootstrap over the scored rows.

Every metric file carries one for its ``mean`` (``mean_low``, ``mean_high`` in the summary, the method in
``interval``), so a table, a plot or a comparison shows a finding's spread over rows beside the figure. Drawn
with a CPU ``torch.Generator`` from a fixed seed: the same interval on every machine and thread count.
"""

from __future__ import annotations

import functools
import math

LEVEL = 0.95
RESAMPLES = 2000
SEED = 0
CHUNK = 4_000_000
"""Resampled indices drawn at a time, so a run of many rows holds a bounded slice of them."""

METHOD = {"of": "mean", "method": "percentile bootstrap over the scored rows", "level": LEVEL,
          "resamples": RESAMPLES, "seed": SEED}
"""What a metric file's ``interval`` says about how ``mean_low`` and ``mean_high`` were computed."""


def scored(values: list) -> list[float]:
    """The rows a mean is taken over: scored (not None) and defined (not NaN)."""
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v]


@functools.lru_cache(maxsize=4)
def resamples(n: int) -> tuple:
    """The resampled row indices for ``n`` rows, in chunks of at most ``CHUNK``: drawn from ``SEED`` alone, so
    every summary of ``n`` rows (each metric at each point of a sweep) takes the same ones, drawn once."""
    import torch

    generator = torch.Generator().manual_seed(SEED)
    per_chunk = max(1, CHUNK // n)
    return tuple(torch.randint(n, (min(per_chunk, RESAMPLES - start), n), generator=generator)
                 for start in range(0, RESAMPLES, per_chunk))


def bootstrap(values: list) -> tuple[float, float]:
    """The ``LEVEL`` percentile bootstrap interval of the mean of ``values``' scored rows; NaN bounds where
    none is scored, the value itself where one is."""
    import torch  # here: readers import this module's neighbours without torch

    x = torch.tensor(scored(values), dtype=torch.float64)
    n = len(x)
    if n == 0:
        return math.nan, math.nan
    if n == 1 or bool((x == x[0]).all()):
        return float(x[0]), float(x[0])
    means = [x[chunk].mean(1) for chunk in resamples(n)]
    tail = (1 - LEVEL) / 2
    low, high = torch.quantile(torch.cat(means), torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
    return low, high


def with_interval(summary: dict, values: list) -> dict:
    """``summary`` with ``mean_low`` and ``mean_high`` after its ``mean``, where that mean is the mean of the
    scored rows' values (a metric whose summary is another statistic gets none)."""
    rows = scored(values)
    mean = summary.get("mean")
    if not rows or not isinstance(mean, (int, float)) or not math.isclose(mean, math.fsum(rows) / len(rows),
                                                                        rel_tol=1e-6, abs_tol=1e-9):
        return summary
    low, high = bootstrap(values)
    out = {}
    for key, value in summary.items():
        out[key] = value
        if key == "mean":
            out["mean_low"], out["mean_high"] = low, high
    return out
