"""The chi-square goodness-of-fit test the sampling tests share."""

from __future__ import annotations

import numpy as np
from scipy import stats


def chisquare_pvalue(counts: np.ndarray, expected: np.ndarray) -> float:
    """p-value of ``counts`` (draws per cell) against the probabilities ``expected``, the cells
    expected fewer than 5 times pooled into one so that the chi-square approximation holds."""
    draws = counts.sum()
    keep = expected * draws >= 5
    observed = np.append(counts[keep], counts[~keep].sum())
    wanted = np.append(expected[keep], expected[~keep].sum()) * draws
    if wanted[-1] == 0:
        observed, wanted = observed[:-1], wanted[:-1]
    return float(stats.chisquare(observed, wanted).pvalue)
