"""Summary statistics of repeated runs (seeds): the mean with its Student-t interval."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95


def t_interval(values: Sequence[float | None], confidence: float = CONFIDENCE) -> tuple[float, float | None]:
    """``(mean, half-width)`` of the t-interval; half-width None for fewer than two values.

    Missing values (None, NaN) are left out; no values at all give ``(nan, None)``."""
    data = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    if data.size == 0:
        return math.nan, None
    if data.size < 2:
        return float(data.mean()), None
    sem = data.std(ddof=1) / math.sqrt(data.size)
    return float(data.mean()), float(stats.t.ppf(0.5 + confidence / 2, data.size - 1) * sem)
