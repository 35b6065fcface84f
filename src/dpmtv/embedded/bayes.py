"""What the demonstrations could teach: Bayes-optimal answers to the same demonstrations, no model.

The recognition ceiling (:mod:`dpmtv.embedded.recognition`) is one trained table fixed in
advance. A learner that *uses* the demonstrations does better: it keeps the rules they allow and
answers a query like most of those. Each learner here has a uniform prior over distinct truth
tables (a table and its complement both in) and sees noiseless yes/no demonstrations, so its
posterior is uniform over the tables that agree with every demonstration; it answers ``yes`` where
more than half of them say yes, and an exact tie scores 0.5. When no table agrees with every
demonstration (possible when the task is outside the learner's set), it keeps the tables with the
fewest disagreements (the limit of a likelihood with a vanishing error rate); a majority over
several such nearest tables can then answer cells none of them gets right alone, so on held-out
tasks the trained-tables learner is a generous reference for recognition, not a strict one.

- :data:`RECOGNISER`: the **trained** tables only (:func:`dpmtv.embedded.rulespace.trained`):
  roughly what a model that fits its training distribution exactly would answer (training weighs
  its tables by episode group and rule name, not uniformly); a model above it on a held-out
  task's deciding cells has learned more than which trained rule is meant.
- :data:`SHAPES`: every table of the **trained shapes**, the tables the hold-out keeps from them
  included: a learner that generalised perfectly within the rule shapes training drew from, but
  knows nothing of the shapes it never drew (3-way parity, ``(a and b) or c``).
- :data:`GRAMMAR`: every table the rule space produces, the never-trained shapes too: a learner
  that knows the whole grammar tasks come from.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from dpmtv.embedded import rules as R
from dpmtv.embedded.rulespace import HELD_OUT_SHAPES, rule_entries, trained

RECOGNISER, SHAPES, GRAMMAR = "bayes: trained tables", "bayes: trained shapes", "bayes: rule grammar"
LEARNERS = (RECOGNISER, SHAPES, GRAMMAR)


@cache
def hypotheses(learner: str) -> np.ndarray:
    """The learner's distinct non-constant truth tables ``(n, 64)`` bool, complements included."""
    if learner not in LEARNERS:
        raise ValueError(f"unknown learner {learner!r}; one of {LEARNERS}")
    tables: dict[bytes, np.ndarray] = {}
    for entry in rule_entries():
        truth = R.truth(entry.rule)
        if truth.all() or not truth.any() or (learner != GRAMMAR and entry.shape in HELD_OUT_SHAPES):
            continue
        for table in (truth, ~truth):
            tables.setdefault(table.tobytes(), table)
    stacked = np.stack(list(tables.values()))
    if learner == RECOGNISER:
        return stacked[[trained(t) for t in stacked]]
    return stacked


def yes_share(
    learner: str, demo_rows: np.ndarray, demo_truth: np.ndarray, query_rows: np.ndarray
) -> np.ndarray:
    """Posterior probability of ``yes`` per query: ``demo_rows`` ``(queries, shots)`` are rows of
    ``ALL_CODES`` with answers ``demo_truth`` (bool, same shape), ``query_rows`` ``(queries,)``."""
    tables = hypotheses(learner)
    demo_rows, demo_truth = np.asarray(demo_rows), np.asarray(demo_truth, dtype=bool)
    out = np.empty(len(query_rows))
    for i, (rows, answers, query) in enumerate(zip(demo_rows, demo_truth, query_rows, strict=True)):
        disagreements = (tables[:, rows] != answers).sum(1)
        out[i] = tables[disagreements == disagreements.min(), query].mean()
    return out


def correct(learner: str, demo_rows, demo_truth, query_rows, query_truth) -> np.ndarray:
    """Per query 1, 0, or 0.5 for a tie: the learner's answer scored against ``query_truth``."""
    share = yes_share(learner, demo_rows, demo_truth, np.asarray(query_rows))
    right = np.where(share > 0.5, 1.0, 0.0) == np.asarray(query_truth, dtype=bool)
    return np.where(share == 0.5, 0.5, right.astype(float))
