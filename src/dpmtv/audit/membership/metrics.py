"""Attack metrics on two score sets (pure numpy / scipy): ROC, AUC with a bootstrap interval,
TPR at a low FPR and a one-sided Mann–Whitney p-value (see the package docstring)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from dpmtv.errors import ParameterError


def _scores(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).ravel()
    if array.size == 0:
        raise ParameterError(f"{name}: no scores")
    if not np.isfinite(array).all():
        raise ParameterError(f"{name} contains NaN or inf")
    return array


def roc_curve(member_scores, non_member_scores) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(FPR, TPR, thresholds) of the tests "member iff score >= t", one per distinct score, from
    (0, 0) at t = +inf to (1, 1) at the smallest score; FPR and TPR non-decreasing."""
    members, others = _scores(member_scores, "member scores"), _scores(non_member_scores, "non-member scores")
    thresholds = np.concatenate([[np.inf], np.unique(np.concatenate([members, others]))[::-1]])
    tpr = _fraction_at_least(members, thresholds)
    fpr = _fraction_at_least(others, thresholds)
    return fpr, tpr, thresholds


def _fraction_at_least(values: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    ordered = np.sort(values)
    return (ordered.size - np.searchsorted(ordered, thresholds, side="left")) / ordered.size


def roc_auc(member_scores, non_member_scores) -> float:
    """P(member score > non-member score) + ½·P(tie): the Mann–Whitney U over n₁·n₀, which is
    the area under :func:`roc_curve` (ties are its diagonal segments)."""
    members, others = _scores(member_scores, "member scores"), _scores(non_member_scores, "non-member scores")
    return _auc(members, others)


def _auc(members: np.ndarray, others: np.ndarray) -> float:
    ranks = stats.rankdata(np.concatenate([members, others]))  # average ranks for ties
    u = ranks[: members.size].sum() - members.size * (members.size + 1) / 2.0
    return float(u / (members.size * others.size))


def tpr_at_fpr(member_scores, non_member_scores, max_fpr: float = 0.01) -> tuple[float, float, float]:
    """(TPR, achieved FPR, threshold) of the threshold test with the largest TPR whose FPR is at
    most ``max_fpr``. Always defined: t = +inf gives (0, 0)."""
    if not 0.0 <= max_fpr <= 1.0:
        raise ParameterError(f"max_fpr must be in [0, 1], got {max_fpr!r}")
    fpr, tpr, thresholds = roc_curve(member_scores, non_member_scores)
    allowed = np.flatnonzero(fpr <= max_fpr + 1e-12)
    best = allowed[np.argmax(tpr[allowed])]  # the first maximum: the highest such threshold
    return float(tpr[best]), float(fpr[best]), float(thresholds[best])


def bootstrap_auc_interval(
    member_scores,
    non_member_scores,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    rng: np.random.Generator | None = None,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the AUC, resampling members and non-members separately
    (stratified: each resample keeps both sample sizes)."""
    if not 0.0 < confidence < 1.0:
        raise ParameterError(f"confidence must be in (0, 1), got {confidence!r}")
    if resamples < 10:
        raise ParameterError(f"bootstrap resamples must be >= 10, got {resamples}")
    members, others = _scores(member_scores, "member scores"), _scores(non_member_scores, "non-member scores")
    rng = rng if rng is not None else np.random.default_rng()
    values = np.empty(resamples)
    for index in range(resamples):
        picked_members = members[rng.integers(0, members.size, members.size)]
        picked_others = others[rng.integers(0, others.size, others.size)]
        values[index] = _auc(picked_members, picked_others)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class AttackMetrics:
    """One attack (a target and a statistic) summarised."""

    target: str
    statistic: str
    auc: float
    auc_low: float
    auc_high: float
    confidence: float
    bootstrap_resamples: int
    tpr_at_fpr: float
    target_fpr: float
    achieved_fpr: float
    threshold: float
    p_value: float  # one-sided Mann–Whitney, H0: members score no higher than non-members
    num_members: int
    num_non_members: int

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["threshold"] = self.threshold if math.isfinite(self.threshold) else None  # +inf: flag none
        return data


def attack_metrics(
    member_scores,
    non_member_scores,
    *,
    target: str = "",
    statistic: str = "logprob",
    target_fpr: float = 0.01,
    confidence: float = 0.95,
    resamples: int = 2000,
    rng: np.random.Generator | None = None,
) -> AttackMetrics:
    members, others = _scores(member_scores, "member scores"), _scores(non_member_scores, "non-member scores")
    low, high = bootstrap_auc_interval(members, others, confidence=confidence, resamples=resamples, rng=rng)
    tpr, fpr, threshold = tpr_at_fpr(members, others, target_fpr)
    p_value = float(stats.mannwhitneyu(members, others, alternative="greater").pvalue)
    return AttackMetrics(
        target=target,
        statistic=statistic,
        auc=_auc(members, others),
        auc_low=low,
        auc_high=high,
        confidence=confidence,
        bootstrap_resamples=resamples,
        tpr_at_fpr=tpr,
        target_fpr=target_fpr,
        achieved_fpr=fpr,
        threshold=threshold,
        p_value=p_value,
        num_members=int(members.size),
        num_non_members=int(others.size),
    )
