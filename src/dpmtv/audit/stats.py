r"""From a distinguishing test's scores to a confident empirical lower bound on ε (pure statistics).

The bound
=========
If a mechanism ``M`` is (ε, δ)-DP, then for neighbouring ``D, D'`` and EVERY measurable set ``R``
of outputs (a "reject" region of a test that guesses ``D'``)::

    P[M(D') ∈ R] <= e^ε · P[M(D) ∈ R] + δ                                              (1)

and, the relation being symmetric, the same with ``D`` and ``D'`` swapped. Write TPR =
``P[M(D') ∈ R]`` and FPR = ``P[M(D) ∈ R]``; (1) rearranges to

    ε >= ln((TPR − δ) / FPR)          whenever TPR > δ.                                  (2)

For a score ``S`` of the output (here a projection of the released vector) we use regions
``R = {S > t}`` ("upper") and ``R = {S < t}`` ("lower"), each with either dataset in the role of
``D'`` (the relation is symmetric, so (1) also holds with ``D`` and ``D'`` swapped).

Finite samples, conservatively
==============================
TPR and FPR are unknown; we see ``k₁`` of ``n₁`` trials on ``D'`` and ``k₀`` of ``n₀`` on ``D``
inside ``R``. Clopper–Pearson one-sided bounds at level ``α/2`` each,

    TPR_lo = Beta⁻¹(α/2; k₁, n₁ − k₁ + 1)     (0 if k₁ = 0)
    FPR_hi = Beta⁻¹(1 − α/2; k₀ + 1, n₀ − k₀)  (1 if k₀ = n₀)

satisfy ``P[TPR >= TPR_lo] >= 1 − α/2`` and ``P[FPR <= FPR_hi] >= 1 − α/2`` (the exact binomial
intervals are conservative: coverage at least nominal for every true rate), so by a union bound
both hold with probability ``>= 1 − α``. On that event, the right side of (2) is decreasing in FPR
and increasing in TPR, hence

    ε_lower = max(0, ln((TPR_lo − δ) / FPR_hi))          (0 if TPR_lo <= δ)

satisfies ``ε_lower <= ε`` with probability ``>= 1 − α`` for ANY (ε, δ) the mechanism truly
satisfies — δ is accounted by subtracting it, never ignored.

The threshold must not be picked on the data it is evaluated on: maximising (2) over thresholds
of one sample would make ``max_t`` of many bounds, each of which fails with probability α, and
the maximum fails far more often. We therefore split every sample: the first
``selection_fraction`` of the trials picks ``(t, side)`` (maximising the same bound computed on
them), and the held-out rest — independent of the choice — evaluates the one chosen test. The
reported ``ε_lower`` is at confidence ``1 − α``; the test never claims a violation unless
``ε_lower > ε_claimed``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

from dpmtv.errors import ParameterError

__all__ = [
    "EpsilonLowerBound",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
]

_NUM_CANDIDATES = 1024


def clopper_pearson_lower(successes: int | np.ndarray, trials: int, *, alpha: float) -> np.ndarray | float:
    """One-sided ``1 − alpha`` Clopper–Pearson lower bound on a binomial rate (0 when k = 0)."""
    k = np.asarray(successes, dtype=float)
    bound = np.where(k > 0, stats.beta.ppf(alpha, np.maximum(k, 1), trials - k + 1), 0.0)
    return float(bound) if bound.ndim == 0 else bound


def clopper_pearson_upper(successes: int | np.ndarray, trials: int, *, alpha: float) -> np.ndarray | float:
    """One-sided ``1 − alpha`` Clopper–Pearson upper bound on a binomial rate (1 when k = n)."""
    k = np.asarray(successes, dtype=float)
    bound = np.where(k < trials, stats.beta.ppf(1 - alpha, k + 1, np.maximum(trials - k, 1)), 1.0)
    return float(bound) if bound.ndim == 0 else bound


@dataclass(frozen=True)
class EpsilonLowerBound:
    """One chosen test evaluated on held-out trials.

    The test's region is ``{S > t}`` (``side="upper"``) or ``{S < t}`` (``"lower"``);
    ``positive`` names the dataset in the role of ``D'`` in (1) (``"with"`` the canary or
    ``"without"``); ``tpr`` and ``fpr`` are the held-out rates of the positive and the other
    dataset in the region;
    ``epsilon_point`` the plug-in value of (2) without confidence (inf when FPR is 0);
    ``epsilon_max_detectable`` the largest ε_lower these sample sizes can ever certify (a perfect
    test: all positives in, no negatives in), ``ln((CP_lo(n, n) − δ) / CP_hi(0, n))`` ≈
    ``ln(n / 3.7)`` at 95% — a claim above it cannot be refuted with this many trials.
    """

    epsilon_lower: float
    confidence: float
    delta: float
    threshold: float
    side: str
    positive: str
    tpr: float
    fpr: float
    tpr_lower: float
    fpr_upper: float
    num_positive: int
    num_negative: int
    epsilon_point: float
    epsilon_max_detectable: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def epsilon_lower_bound(
    scores_without: np.ndarray,
    scores_with: np.ndarray,
    *,
    delta: float,
    confidence: float = 0.95,
    selection_fraction: float = 0.5,
) -> EpsilonLowerBound:
    """ε_lower at ``confidence`` from i.i.d. scores of releases on ``D`` (without the canary) and
    ``D'`` (with it); see the module docstring for the derivation.

    Raises:
        ParameterError: too few scores (each split needs >= 10), a non-finite score, or
            ``delta``/``confidence``/``selection_fraction`` outside (0, 1).
    """
    alpha = _check_unit("1 - confidence", 1.0 - float(confidence))
    delta = _check_unit("delta", delta)
    fraction = _check_unit("selection_fraction", selection_fraction)
    neg, pos = _check_scores(scores_without, "scores_without"), _check_scores(scores_with, "scores_with")
    neg_sel, neg_eval = _split(neg, fraction)
    pos_sel, pos_eval = _split(pos, fraction)
    test = _select(neg_sel, pos_sel, delta=delta, alpha=alpha)
    return _evaluate(neg_eval, pos_eval, test, delta=delta, alpha=alpha, confidence=confidence)


def _bound(tpr_lo: np.ndarray, fpr_hi: np.ndarray, delta: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.log(np.maximum(tpr_lo - delta, 0.0) / fpr_hi)
    return np.maximum(np.nan_to_num(value, nan=0.0, neginf=0.0), 0.0)


_TESTS = (("upper", "with"), ("upper", "without"), ("lower", "with"), ("lower", "without"))


def _oriented(
    neg: np.ndarray, pos: np.ndarray, side: str, positive: str
) -> tuple[np.ndarray, np.ndarray, float]:
    """(positive scores, negative scores, sign) such that the region is {sign·S > sign·t}."""
    first, second = (pos, neg) if positive == "with" else (neg, pos)
    return first, second, (1.0 if side == "upper" else -1.0)


def _counts_above(sorted_scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    return sorted_scores.size - np.searchsorted(sorted_scores, thresholds, side="right")


def _select(neg: np.ndarray, pos: np.ndarray, *, delta: float, alpha: float) -> tuple[float, str, str]:
    pooled = np.concatenate([neg, pos])
    grid = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, _NUM_CANDIDATES)))
    best = (-1.0, float(grid[0]), "upper", "with")
    for side, positive in _TESTS:
        hits, misses, sign = _oriented(neg, pos, side, positive)
        oriented = sign * grid
        k_pos = _counts_above(np.sort(sign * hits), oriented)
        k_neg = _counts_above(np.sort(sign * misses), oriented)
        tpr_lo = clopper_pearson_lower(k_pos, hits.size, alpha=alpha / 2)
        fpr_hi = clopper_pearson_upper(k_neg, misses.size, alpha=alpha / 2)
        values = _bound(tpr_lo, fpr_hi, delta)
        index = int(np.argmax(values))
        if values[index] > best[0]:
            best = (float(values[index]), float(grid[index]), side, positive)
    return best[1], best[2], best[3]


def _evaluate(
    neg: np.ndarray,
    pos: np.ndarray,
    test: tuple[float, str, str],
    *,
    delta: float,
    alpha: float,
    confidence: float,
) -> EpsilonLowerBound:
    threshold, side, positive = test
    hits, misses, sign = _oriented(neg, pos, side, positive)
    k_pos = int(np.sum(sign * hits > sign * threshold))
    k_neg = int(np.sum(sign * misses > sign * threshold))
    tpr_lo = float(clopper_pearson_lower(k_pos, hits.size, alpha=alpha / 2))
    fpr_hi = float(clopper_pearson_upper(k_neg, misses.size, alpha=alpha / 2))
    tpr, fpr = k_pos / hits.size, k_neg / misses.size
    point = math.inf if fpr == 0 and tpr > delta else float(_bound(np.array(tpr), np.array(fpr), delta))
    best_tpr = clopper_pearson_lower(hits.size, hits.size, alpha=alpha / 2)
    best_fpr = clopper_pearson_upper(0, misses.size, alpha=alpha / 2)
    return EpsilonLowerBound(
        epsilon_lower=float(_bound(np.array(tpr_lo), np.array(fpr_hi), delta)),
        confidence=float(confidence),
        delta=delta,
        threshold=threshold,
        side=side,
        positive=positive,
        tpr=tpr,
        fpr=fpr,
        tpr_lower=tpr_lo,
        fpr_upper=fpr_hi,
        num_positive=int(hits.size),
        num_negative=int(misses.size),
        epsilon_point=point,
        epsilon_max_detectable=float(_bound(np.array(best_tpr), np.array(best_fpr), delta)),
    )


def _split(scores: np.ndarray, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    cut = int(round(fraction * scores.size))
    if cut < 10 or scores.size - cut < 10:
        raise ParameterError(
            f"{scores.size} trials cannot be split {fraction:g}/{1 - fraction:g} into selection and "
            "evaluation halves of at least 10 each; use more trials"
        )
    return scores[:cut], scores[cut:]


def _check_scores(scores: np.ndarray, name: str) -> np.ndarray:
    values = np.asarray(scores, dtype=np.float64).ravel()
    if not np.isfinite(values).all():
        raise ParameterError(f"{name} contains NaN or inf")
    return values


def _check_unit(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 < value < 1.0:
        raise ParameterError(f"{name} must be in (0, 1), got {value!r}")
    return value
