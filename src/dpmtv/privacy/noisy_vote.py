"""DP-ICL aggregation: a Gaussian noisy-argmax vote over disjoint chunk prompts (docs/eval.md).

The token-space DP-ICL baseline answers each query with ``m`` prompts, one per disjoint chunk of
the private records. Each chunk prompt "votes" for its normalised answer; the votes over a PUBLIC
candidate list ``V`` (fixed before any private data is seen; votes outside ``V`` are dropped)
form a histogram ``h ∈ ℕ^|V|``. The mechanism releases ``argmax_c (h_c + N(0, σ²))``.

Privacy of one query
--------------------
See :func:`vote_l2_sensitivity` for ``Δ = √2``. Adding ``N(0, σ² I)`` to the whole histogram is
the Gaussian mechanism; the argmax is post-processing, so one query is accounted as
``GaussianDpEvent(noise_multiplier = σ / Δ)`` (unit sensitivity, evaluated with dp-accounting's
``ADD_OR_REMOVE_ONE``, the convention of :mod:`dpmtv.privacy.events`). Releasing only the argmax
can be cheaper than releasing the histogram; we do not claim that saving.

Privacy of Q queries
--------------------
Every query reads the same private records, so ``Q`` queries compose (adaptively) as
``SelfComposedDpEvent(GaussianDpEvent(σ/Δ), Q)``, evaluated by the PLD accountant — no
composition theorem is written here. The total epsilon grows with ``Q``; at a fixed total budget,
:func:`calibrate_per_query_noise` finds the (larger) per-query ``σ``.

Poisson-subsampled ensembles (DP-ICL, Wu et al., ICLR 2024)
-----------------------------------------------------------
DP-ICL itself draws, for EACH query, a fresh Poisson subsample of the private records (each
record independently with probability ``q``) and spreads the sampled records over the query's
``M`` prompts, each record to one prompt drawn uniformly and independently of the others. Under
add/remove-one, in the coupling that shares every other record's inclusion and prompt draw, the
added record is absent with probability ``1 − q``; present, it changes the one prompt it lands in
— one vote moves, ``Δ = √2`` as above. A query is therefore the Poisson-subsampled Gaussian
mechanism, ``PoissonSampledDpEvent(q, GaussianDpEvent(σ/√2))``, and ``Q`` queries compose as
``SelfComposedDpEvent(·, Q)`` — both evaluated by dp-accounting's PLD accountant under
``ADD_OR_REMOVE_ONE`` (the amplification holds for add/remove; this variant is not offered under
replace-one). :func:`calibrate_subsampled_query_noise` finds ``σ`` at a total budget.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence

import dp_accounting
import numpy as np
from dp_accounting import mechanism_calibration

from dpmtv.errors import NumericalError, ParameterError
from dpmtv.privacy._checks import check_int, check_positive
from dpmtv.privacy.calibrate import (
    analytic_gaussian_noise_multiplier,
    round_up_noise_multiplier,
    search_noise_multiplier,
    validate_epsilon_delta,
)
from dpmtv.privacy.events import epsilon_of, gaussian_release_event
from dpmtv.privacy.noise import NoiseSampler, perturb_with_gaussian
from dpmtv.privacy.relation import AdjacencyRelation, parse_relation

__all__ = [
    "calibrate_per_query_noise",
    "calibrate_subsampled_query_noise",
    "dp_icl_epsilon",
    "dp_icl_event",
    "subsampled_dp_icl_epsilon",
    "subsampled_dp_icl_event",
    "subsampled_vote_event",
    "noisy_argmax",
    "noisy_vote_event",
    "answer_vote_counts",
    "vote_l2_sensitivity",
    "votes_by_candidate",
]

_RELATIVE_TOL = 1e-7


def vote_l2_sensitivity(relation: AdjacencyRelation | str = AdjacencyRelation.REPLACE_ONE) -> float:
    """L2 sensitivity ``Δ`` of the vote histogram over a public candidate list: ``√2``.

    Derivation. Chunks are disjoint and their assignment does not depend on record contents
    (a random permutation of the public ``N`` for replace-one; a keyed hash of the record id for
    add-remove-one), so in the coupling of two neighbouring datasets that shares the assignment,
    the changed record lies in at most ONE chunk and every other chunk's prompt, and hence its
    vote, is identical. That chunk casts one vote before and one after (or none, when the answer
    falls outside the candidate list or, under add-remove-one, the chunk becomes empty). So the
    histograms differ by ``h' = h − e_a + e_b`` (``‖h − h'‖₂ = √2`` when ``a ≠ b``), by
    ``±e_a`` (``1``), or not at all. Hence ``Δ = √2`` under both relations; the relation stays a
    parameter so that callers state which one they assume.
    """
    parse_relation(relation)
    return math.sqrt(2.0)


def answer_vote_counts(votes: Iterable[Hashable], candidates: Sequence[Hashable]) -> np.ndarray:
    """Counts of ``votes`` per entry of the public ``candidates`` list: float64 ``(|V|,)``.

    Votes not in ``candidates`` are dropped (see :func:`vote_l2_sensitivity`: still ``Δ ≤ √2``).

    Raises:
        ParameterError: an empty or duplicated candidate list.
    """
    index = {candidate: i for i, candidate in enumerate(candidates)}
    if not candidates or len(index) != len(candidates):
        raise ParameterError(
            f"candidates must be a non-empty list without duplicates, got {len(candidates)} "
            f"entries of which {len(index)} distinct"
        )
    counts = np.zeros(len(candidates), dtype=np.float64)
    for vote in votes:
        if vote in index:
            counts[index[vote]] += 1.0
    return counts


def noisy_argmax(counts: np.ndarray, *, noise_std: float, sampler: NoiseSampler) -> int:
    """Index of the largest ``counts + N(0, noise_std² I)`` (report-noisy-max, Gaussian).

    Ties have probability zero under continuous noise; ``np.argmax`` takes the first.
    """
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 1 or counts.size == 0:
        raise NumericalError(f"counts must be a non-empty 1-D vector, got shape {counts.shape}")
    return int(np.argmax(perturb_with_gaussian(counts, noise_std=noise_std, sampler=sampler)))


def noisy_vote_event(
    *, noise_std: float, relation: AdjacencyRelation | str = AdjacencyRelation.REPLACE_ONE
) -> dp_accounting.DpEvent:
    """The event of ONE noisy vote: ``GaussianDpEvent(noise_std / √2)`` (unit sensitivity)."""
    noise_std = check_positive("noise_std", noise_std)
    return gaussian_release_event(noise_multiplier=noise_std / vote_l2_sensitivity(relation))


def dp_icl_event(
    *,
    noise_std: float,
    num_queries: int,
    relation: AdjacencyRelation | str = AdjacencyRelation.REPLACE_ONE,
) -> dp_accounting.DpEvent:
    """``num_queries`` noisy votes on the same records: ``SelfComposedDpEvent(vote, Q)``."""
    num_queries = check_int("num_queries", num_queries, minimum=1)
    vote = noisy_vote_event(noise_std=noise_std, relation=relation)
    return dp_accounting.SelfComposedDpEvent(vote, num_queries)


def dp_icl_epsilon(
    *,
    noise_std: float,
    delta: float,
    num_queries: int,
    relation: AdjacencyRelation | str = AdjacencyRelation.REPLACE_ONE,
) -> float:
    """Total epsilon at ``delta`` of ``num_queries`` votes with ``noise_std`` (PLD accountant)."""
    event = dp_icl_event(noise_std=noise_std, num_queries=num_queries, relation=relation)
    return epsilon_of(event, delta=delta)


def calibrate_per_query_noise(
    *,
    total_epsilon: float,
    delta: float,
    num_queries: int,
    relation: AdjacencyRelation | str = AdjacencyRelation.REPLACE_ONE,
) -> float:
    """Smallest per-query vote noise std ``σ`` (within a 1e-7 relative tolerance, rounded up)
    such that ``num_queries`` votes are ``(total_epsilon, delta)``-DP under the PLD accountant.

    Searches the noise MULTIPLIER ``z = σ/√2`` with ``dp_accounting.calibrate_dp_mechanism``
    (bracketed around the one-release analytic multiplier times ``√Q``, a starting guess only),
    then grows it until the accountant confirms ``ε ≤ total_epsilon`` — never overshooting.

    Raises:
        ParameterError: an invalid budget or ``num_queries < 1``.
    """
    validate_epsilon_delta(epsilon=total_epsilon, delta=delta)
    num_queries = check_int("num_queries", num_queries, minimum=1)
    epsilon, delta = float(total_epsilon), float(delta)
    guess = math.sqrt(num_queries) * analytic_gaussian_noise_multiplier(epsilon=epsilon, delta=delta)
    tol = _RELATIVE_TOL * guess

    def make_event(z: float) -> dp_accounting.DpEvent:
        return dp_accounting.SelfComposedDpEvent(gaussian_release_event(noise_multiplier=z), num_queries)

    bracket = mechanism_calibration.LowerEndpointAndGuess(0.25 * guess, guess)
    z = search_noise_multiplier(make_event, epsilon=epsilon, delta=delta, bracket=bracket, tol=tol)
    return z * vote_l2_sensitivity(relation)


def votes_by_candidate(counts: Mapping[Hashable, int], candidates: Sequence[Hashable]) -> np.ndarray:
    """Dense counts over ``candidates`` from a sparse ``{answer: count}`` mapping (helper for
    recorded votes); answers outside the candidate list are dropped."""
    dense = answer_vote_counts((), candidates)
    index = {candidate: i for i, candidate in enumerate(candidates)}
    for answer, count in counts.items():
        if answer in index:
            dense[index[answer]] = float(count)
    return dense


# ---- Poisson-subsampled ensembles (module docstring) -----------------------------------------
_SUBSAMPLED_RELATIVE_TOL = 1e-3
_SMALLEST_MULTIPLIER = 0.25


def subsampled_vote_event(*, noise_std: float, sampling_probability: float) -> dp_accounting.DpEvent:
    """ONE query of the subsampled ensemble: ``PoissonSampledDpEvent(q, GaussianDpEvent(σ/√2))``
    (add/remove-one only; see the module docstring)."""
    q = _check_probability(sampling_probability)
    vote = noisy_vote_event(noise_std=noise_std, relation=AdjacencyRelation.ADD_REMOVE_ONE)
    return dp_accounting.PoissonSampledDpEvent(q, vote)


def subsampled_dp_icl_event(
    *, noise_std: float, sampling_probability: float, num_queries: int
) -> dp_accounting.DpEvent:
    """``num_queries`` subsampled queries: ``SelfComposedDpEvent(subsampled vote, Q)``."""
    num_queries = check_int("num_queries", num_queries, minimum=1)
    event = subsampled_vote_event(noise_std=noise_std, sampling_probability=sampling_probability)
    return dp_accounting.SelfComposedDpEvent(event, num_queries)


def subsampled_dp_icl_epsilon(
    *, noise_std: float, sampling_probability: float, delta: float, num_queries: int
) -> float:
    """Total epsilon at ``delta`` of ``num_queries`` subsampled queries (PLD, add/remove-one)."""
    event = subsampled_dp_icl_event(
        noise_std=noise_std, sampling_probability=sampling_probability, num_queries=num_queries
    )
    return epsilon_of(event, delta=delta)


def calibrate_subsampled_query_noise(
    *, total_epsilon: float, delta: float, num_queries: int, sampling_probability: float
) -> float:
    """Smallest per-query vote noise std ``σ`` (within a 1e-3 relative tolerance, rounded up)
    such that ``num_queries`` subsampled queries are ``(total_epsilon, delta)``-DP under the PLD
    accountant, add/remove-one.

    Brackets ``z = σ/√2`` by halving the un-subsampled multiplier (an upper bound: subsampling
    only lowers epsilon) until epsilon exceeds the budget, bisects with
    ``dp_accounting.calibrate_dp_mechanism``, then grows ``z`` until the accountant
    (:func:`~dpmtv.privacy.events.epsilon_of`) confirms ``ε ≤ total_epsilon``. Below a floor of
    ``z = 0.25`` the search stops and returns the floor (valid, possibly more noise than needed).

    Raises:
        ParameterError: an invalid budget, ``num_queries < 1`` or ``q`` outside ``(0, 1]``.
    """
    validate_epsilon_delta(epsilon=total_epsilon, delta=delta)
    num_queries = check_int("num_queries", num_queries, minimum=1)
    q = _check_probability(sampling_probability)
    epsilon, delta = float(total_epsilon), float(delta)
    sqrt2 = vote_l2_sensitivity(AdjacencyRelation.ADD_REMOVE_ONE)

    def make_event(z: float) -> dp_accounting.DpEvent:
        return subsampled_dp_icl_event(noise_std=z * sqrt2, sampling_probability=q, num_queries=num_queries)

    upper = calibrate_per_query_noise(total_epsilon=epsilon, delta=delta, num_queries=num_queries) / sqrt2
    lower = upper
    while epsilon_of(make_event(lower), delta=delta) <= epsilon:
        if lower <= _SMALLEST_MULTIPLIER:
            floor = round_up_noise_multiplier(
                make_event, _SMALLEST_MULTIPLIER, epsilon=epsilon, delta=delta, step=0.01
            )
            return floor * sqrt2
        upper, lower = lower, max(lower / 2, _SMALLEST_MULTIPLIER)
    tol = _SUBSAMPLED_RELATIVE_TOL * lower
    bracket = mechanism_calibration.ExplicitBracketInterval(lower, upper)
    return search_noise_multiplier(make_event, epsilon=epsilon, delta=delta, bracket=bracket, tol=tol) * sqrt2


def _check_probability(value: float) -> float:
    q = float(value)
    if not (math.isfinite(q) and 0.0 < q <= 1.0):
        raise ParameterError(f"sampling_probability must be in (0, 1], got {value!r}")
    return q
