"""Scores for benchmarks with a closed answer set: each query's probability of every answer
under the method's vector (:func:`dpmtv.inference.choice_probabilities`), read three ways:

* ``score_accuracy`` — the most probable answer equals the gold one;
* two-way tasks only: ``auroc`` — the probability of the first answer (``yes`` when it is one of
  the two) ranks the queries whose gold answer it is above the others (ties count one half);
  ``ece`` — expected calibration error of the top answer's probability, 10 equal-width bins
  (the bin's |accuracy − mean confidence| weighted by its share of queries).

Scoring the released vector is post-processing: no privacy cost. The answer set is public: the
benchmark's candidates for its test queries, the same for every query.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpmtv.eval.benchmarks import Benchmark
from dpmtv.eval.scorers import normalise_answer

MAX_CHOICES = 10  # more candidates than this is an open answer set, not scored
ECE_BINS = 10


def closed_choices(benchmark: Benchmark) -> tuple[str, ...] | None:
    """The one public answer set every test query shares, or None."""
    sets = {tuple(benchmark.scorer.candidates(record)) for record in benchmark.test}
    if len(sets) != 1:
        return None
    (choices,) = sets
    return choices if 2 <= len(choices) <= MAX_CHOICES else None


def choice_metrics(probabilities: Sequence[dict[str, float]], golds: Sequence[str]) -> dict[str, float]:
    choices = list(probabilities[0])
    table = np.array([[p[c] for c in choices] for p in probabilities])  # (queries, choices)
    gold = np.array([choices.index(g) if g in choices else -1 for g in map(normalise_answer, golds)])
    top = table.argmax(axis=1)
    metrics = {"score_accuracy": float(np.mean(top == gold))}
    if len(choices) == 2:
        positive = choices.index("yes") if "yes" in choices else 0
        metrics["auroc"] = auroc(table[:, positive], gold == positive)
        metrics["ece"] = expected_calibration_error(table.max(axis=1), top == gold)
    return metrics


def auroc(scores: np.ndarray, positive: np.ndarray) -> float:
    """The probability that a random positive scores above a random negative (ties: one half);
    NaN without both kinds."""
    pos, neg = scores[positive], scores[~positive]
    if not len(pos) or not len(neg):
        return float("nan")
    above = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(above / (len(pos) * len(neg)))


def expected_calibration_error(confidence: np.ndarray, correct: np.ndarray, bins: int = ECE_BINS) -> float:
    index = np.minimum((confidence * bins).astype(int), bins - 1)
    error = 0.0
    for b in range(bins):
        members = index == b
        if members.any():
            error += members.mean() * abs(correct[members].mean() - confidence[members].mean())
    return float(error)


def scores_details(loaded, benchmark: Benchmark, queries, vector, *, batch_size: int) -> dict:
    """``{"choice_scores": metrics}`` of a method answering with ``vector`` (None: zero-shot), or
    nothing for a benchmark without a closed answer set."""
    from dpmtv.inference import choice_probabilities

    choices = closed_choices(benchmark)
    if choices is None:
        return {}
    probabilities = choice_probabilities(loaded, queries, choices, vector=vector, batch_size=batch_size)
    return {"choice_scores": choice_metrics(probabilities, [record.answer for record in benchmark.test])}
