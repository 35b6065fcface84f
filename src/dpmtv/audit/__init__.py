"""Empirical privacy audit: a confident lower bound ε_lower on the release's privacy loss.

Run the release many times on neighbouring datasets ``D`` and ``D'`` that differ in one canary
record, score each output with a distinguishing statistic, and turn the scores into a
Clopper–Pearson lower bound on ε (:mod:`dpmtv.audit.stats`). A correct mechanism gives
``ε_lower <= ε_claimed`` with probability at least the confidence; a broken one (too little noise,
no clipping) shows ``ε_lower > ε_claimed``. :mod:`dpmtv.audit.mechanism` holds the trials and the
canary design (synthetic, no model); :mod:`dpmtv.audit.model` the chunk vectors of a real model
(imported lazily: it needs torch); :mod:`dpmtv.audit.report` the table, JSON and plot.
"""

from dpmtv.audit.mechanism import MECHANISMS, AuditPoint, Mechanism, audit_chunk_vectors, audit_synthetic
from dpmtv.audit.report import DEFAULT_EPSILONS, AuditReport
from dpmtv.audit.stats import (
    EpsilonLowerBound,
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_lower_bound,
)

__all__ = [
    "DEFAULT_EPSILONS",
    "MECHANISMS",
    "AuditPoint",
    "AuditReport",
    "EpsilonLowerBound",
    "Mechanism",
    "audit_chunk_vectors",
    "audit_synthetic",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
]
