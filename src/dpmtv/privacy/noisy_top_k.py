r"""Private head selection: the vote histogram, one-shot Gumbel noisy top-k, its dp-accounting
event, and the budget split with the Gaussian release (docs/design.md §3).

Pure privacy maths: numpy, dp-accounting and OpenDP (the exact sampler) only; the model-side vote
function lives in :mod:`dpmtv.selection.private`.

Mechanism
=========

Every chunk ``j`` casts a vote set ``V_j ⊆ {0, …, n−1}`` (``n`` candidate heads) of at most ``k'``
DISTINCT heads, computed from chunk ``j``'s records only. The histogram ``c_h = #{j : h ∈ V_j}`` is
released through one-shot Gumbel noisy top-k: add i.i.d. ``Gumbel(0, b)`` noise to every count and
return the ``k`` largest, in order.

Sensitivity (:func:`head_vote_counts`). Under replace-one, couple the neighbours through the same
data-independent partition: the changed record lies in one chunk ``j*`` (or the unused tail), so
only ``V_{j*}`` changes, to some ``V'_{j*}``. Then ``c' − c = 1[V'] − 1[V]``: every coordinate moves
by at most 1 (``L∞ = 1``, because a chunk votes at most once per head) and
``‖c' − c‖₁ = |V Δ V'| <= 2k'``. Under add-remove-one (record-addressed chunks, public ``m``) the
content of one chunk changes, possibly from or to empty (no votes): the same bounds hold. Some
counts go up while others go down, so the histogram is NOT monotone in the data.

Noise scale (:func:`noisy_top_k_scale`). The exponential mechanism ``P[h] ∝ exp(ε₀ u_h / (2Δ∞))``
with a score of ``L∞`` sensitivity ``Δ∞`` is ``ε₀``-DP (McSherry & Talwar 2007; the factor 2 is for
non-monotone scores). Adding ``Gumbel(0, b)`` to every score and taking the arg max samples
exactly ``P[h] ∝ exp(u_h / b)`` (the Gumbel-max trick), i.e. the exponential mechanism with
``ε₀ = 2Δ∞/b``. Taking the top ``k`` of ONE noisy draw has the same distribution over ordered
outcomes as ``k`` rounds of "peeling" — run the exponential mechanism, remove the winner, repeat —
each round with the same ``b`` (Durfee & Rogers, NeurIPS 2019, Lemma 4.2). Each round is
``ε₀``-DP for every fixed set of earlier winners, so by adaptive composition the whole selection is
``k·ε₀``-DP (pure). For a selection budget ``ε_sel`` we therefore use ``ε₀ = ε_sel / k`` and
``b = 2kΔ∞/ε_sel``. OpenDP's own privacy maps agree: ``make_noisy_top_k`` over ``LInfDistance``
(non-monotone) certifies ``ρ = k·ε₀²/8`` zCDP for this Gumbel scale (Cesar & Rogers 2021) and
``ε = 2k·Δ∞/b`` for its exponential-noise variant (tests check both).

Monotone scores (:func:`monotone_scores`): the factor 1. The choice on the release
(:mod:`dpmtv.selection.released`) scores candidate ``S`` by ``U(S) = Σ_r u_r(S)``, one term
``u_r(S) ∈ [0, 1]`` per record, computed from record ``r`` alone (given the released vector). Under
add-remove-one, the neighbour ``D' = D ∪ {r'}`` has ``U'(S) = U(S) + u_{r'}(S)`` for EVERY ``S``:
all scores move the same way, by ``0 <= U' − U <= Δ∞ = 1``. Then ``P[S] ∝ exp(ε₀·U(S)/Δ∞)`` (Gumbel
scale ``b = Δ∞/ε₀``, half the general one) is ``ε₀``-DP (McSherry & Talwar 2007, the monotone case
of their Theorem 6): with ``Z = Σ_S exp(ε₀U(S))``,
``P'[S]/P[S] = exp(ε₀(U'(S) − U(S))) · Z/Z'``, where the first factor is in ``[1, e^ε₀]`` and
``Z/Z' ∈ [e^−ε₀, 1]`` (each term of ``Z'`` is between 1 and ``e^ε₀`` times its term in ``Z``); so the
ratio is in ``[e^−ε₀, e^ε₀]``, in both directions (removing a record is the same pair read the other
way). Under replace-one one term changes either way (``u_r`` out, ``u_{r'}`` in): scores move in
different directions and the factor 2 stays. The chunk votes and chunk utilities are never
monotone (a chunk's content changes, its vote can go either way). The event is the same
``ε₀``-DP ``RR`` pair either way: only the noise is halved, never the accounting.

Accounting (:func:`noisy_top_k_event`). We do not hand-compose. Any ``ε₀``-DP mechanism is, on
every pair of neighbouring inputs, a post-processing of randomized response
``RR_ε₀ = (Bern(e^ε₀/(1+e^ε₀)), Bern(1/(1+e^ε₀)))`` (Kairouz, Oh & Viswanath 2015; Murtagh &
Vadhan 2016), so that symmetric pair is a *dominating pair* of each round, and dominating pairs
compose under adaptive composition (Zhu, Dong & Wang, AISTATS 2022, Thm 10) — exactly what the PLD
accountant computes. dp-accounting's ``PLDAccountant(ADD_OR_REMOVE_ONE)`` does not accept
``RandomizedResponseDpEvent`` (replace-one only, and that relation doubles our Gaussian
sensitivities, see :mod:`dpmtv.privacy.events`) nor ``ZCDpEvent`` (RDP accountant only). But it
accepts ``DiscreteLaplaceDpEvent(noise_parameter=a, sensitivity=1)``, whose PLD IS the ``RR_a``
pair: for ``P = DLap(a)`` and ``Q = 1 + DLap(a)``, the privacy loss ``a(|x−1| − |x|)`` equals
``+a`` for ``x <= 0`` and ``−a`` for ``x >= 1``, and ``P[x <= 0] = e^a/(1+e^a)``,
``Q[x <= 0] = 1/(1+e^a)``. So each round is recorded as ``DiscreteLaplaceDpEvent(ε₀, 1)`` and the
selection as ``SelfComposedDpEvent(…, k)``: a sound, and for pure ε-DP rounds the tightest,
representation (tests check ``δ(ε')`` against the ``RR`` closed form and against
``PrivacyLossDistribution.from_privacy_parameters((ε₀, 0))``). The accountant then composes it with
the Gaussian release (tighter than adding epsilons; ``k·ε₀`` at ``δ = 0``).

Budget split (:func:`plan_private_selection`). ``ε_sel = selection_fraction · ε``; the release's
Gaussian multiplier is then calibrated by :func:`dpmtv.privacy.release.plan_gaussian_release`
with ``fixed_events = plan.fixed_events`` so that the composition meets ``(ε, δ)`` (never above).
With ``composition="parallel"`` selection and release use disjoint halves of the chunks: a record
changes only one half, so the pair is ``(ε, δ)``-DP if the selection alone is ``ε``-DP and the
release alone is ``(ε, δ)``-DP for every selected head set; no fixed events are passed then.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import dp_accounting
import numpy as np
from dp_accounting.dp_event import DiscreteLaplaceDpEvent

from dpmtv.errors import DangerousModeError, ParameterError
from dpmtv.privacy._checks import check_int, check_positive
from dpmtv.privacy.calibrate import validate_epsilon_delta

__all__ = [
    "COMPOSITIONS",
    "DEFAULT_CANDIDATE_SELECTION_FRACTION",
    "DEFAULT_RELEASED_SELECTION_FRACTION",
    "DEFAULT_SELECTION_FRACTION",
    "RECORD_SUM_UTILITIES",
    "PrivateSelectionPlan",
    "SelectionBudget",
    "noisy_top_k",
    "noisy_top_k_event",
    "noisy_top_k_scale",
    "parallel_half",
    "parallel_half_sizes",
    "parallel_halves",
    "plan_private_selection",
    "split_budget",
    "head_vote_counts",
    "monotone_scores",
]

# Measured on synthetic vote histograms (k = k' = 10 of 784 heads, δ = 1e-5; the 10 true heads
# each voted by 30 % of m = 400 chunks): fraction 0.25 / 0.5 / 0.75 inflates the release's noise
# multiplier by 1.05 / 1.2-1.3 / 1.7-2.1 (the PLD composition is far tighter than ε − ε_sel) and
# recovers 13 % / 72 % / 90 % of the true heads at ε = 2 (66 % / 99 % / 100 % at ε = 4). Half the
# budget buys a usable selection for a modest noise increase; provisional until the embedded
# selection benchmark measures accuracy.
DEFAULT_SELECTION_FRACTION = 0.5
# The choice among public candidate head sets (dpmtv.selection.candidates): one round instead of k,
# chosen on the dev set of benchmarks/private_only.py --split dev (0.3 against 0.5 there).
DEFAULT_CANDIDATE_SELECTION_FRACTION = 0.3
# The candidate choice on the release (dpmtv.selection.released): N utilities instead of m, so a
# smaller share separates the candidates; picked after one dev pair at 0.05 / 0.1 / 0.2 and kept
# by the dev run (benchmarks/results/private_only_dev_released.json); no share sweep yet.
DEFAULT_RELEASED_SELECTION_FRACTION = 0.1
COMPOSITIONS = ("sequential", "parallel")


def head_vote_counts(
    votes: Sequence[Sequence[int]], *, num_candidates: int, max_votes_per_chunk: int
) -> np.ndarray:
    """Counts ``c_h = #{chunks voting for h}``, (n,) int64, from one vote list per chunk.

    Enforces what the sensitivity bound (module docstring: ``L∞ = 1``, ``L1 <= 2k'``) needs: each
    chunk names at most ``k'`` heads, all distinct and in ``[0, n)``.

    Raises:
        ParameterError: a chunk with more than ``k'`` votes, a repeated vote, or one out of range.
    """
    n = check_int("num_candidates", num_candidates, minimum=1)
    k_prime = check_int("max_votes_per_chunk", max_votes_per_chunk, minimum=1)
    counts = np.zeros(n, dtype=np.int64)  # (n,)
    for index, chunk_votes in enumerate(votes):
        chosen = [int(v) for v in chunk_votes]
        if len(chosen) > k_prime or len(set(chosen)) != len(chosen):
            raise ParameterError(
                f"chunk {index} votes {chosen}: at most {k_prime} distinct heads per chunk are allowed"
            )
        if any(not 0 <= v < n for v in chosen):
            raise ParameterError(f"chunk {index} votes {chosen}: heads must be in [0, {n})")
        counts[chosen] += 1
    return counts


# The utilities that are a sum over records of one term in [0, 1] each, computed from that record
# alone: the choice on the release's (dpmtv.selection.released). Monotone under add-remove-one.
RECORD_SUM_UTILITIES = ("released-probability",)


def monotone_scores(*, utility: str | None, neighbouring_relation: str) -> bool:
    """Whether the scores can only grow when a record is added and only shrink when one is removed:
    a record-sum utility under add-remove-one (module docstring, "Monotone scores")."""
    return utility in RECORD_SUM_UTILITIES and str(neighbouring_relation) == "add-remove-one"


def noisy_top_k_scale(
    *, epsilon: float, k: int, linf_sensitivity: float = 1.0, monotone: bool = False
) -> float:
    """Gumbel scale ``b = 2·k·Δ∞/ε`` making one-shot top-k ``ε``-DP; ``b = k·Δ∞/ε`` for
    ``monotone`` scores (module docstring). The one place the exponential mechanism's factor is set."""
    epsilon = check_positive("epsilon", epsilon)
    k = check_int("k", k, minimum=1)
    factor = 1.0 if monotone else 2.0
    return factor * k * check_positive("linf_sensitivity", linf_sensitivity) / epsilon


def noisy_top_k(
    scores: np.ndarray,
    *,
    k: int,
    epsilon: float,
    rng: np.random.Generator | None = None,
    allow_non_private: bool = False,
    monotone: bool = False,
) -> tuple[int, ...]:
    """Indices of the top ``k`` of ``scores + Gumbel(0, b)``, best first, ``b`` from
    :func:`noisy_top_k_scale` (sensitivity 1; ``monotone``: scores that move together, see
    :func:`monotone_scores`).

    Without ``rng`` the noise comes from OpenDP's exact, floating-point-safe sampler over the OS
    CSPRNG (integer scores); an ``rng`` (numpy) is for tests and seeded experiments only.
    ``epsilon = inf`` returns the exact top-k (ties: lower index first) and needs
    ``allow_non_private=True``.
    """
    scores = np.asarray(scores)  # (n,)
    k = check_int("k", k, minimum=1)
    if scores.ndim != 1 or not 1 <= k <= scores.shape[0]:
        raise ParameterError(f"k must be in [1, {scores.shape[0]}] for scores of shape {scores.shape}")
    if math.isinf(float(epsilon)) and float(epsilon) > 0:
        return _exact_top_k(scores, k, allow_non_private)
    scale = noisy_top_k_scale(epsilon=epsilon, k=k, monotone=monotone)
    if rng is not None:
        return _exact_top_k(scores + rng.gumbel(0.0, scale, size=scores.shape), k, True)
    return _opendp_top_k(scores, k, scale, monotone=monotone)


def _exact_top_k(scores: np.ndarray, k: int, allow: bool) -> tuple[int, ...]:
    if not allow:
        raise DangerousModeError(
            "epsilon = inf selects heads without noise (no privacy guarantee); pass "
            "allow_non_private=True for this baseline"
        )
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")  # (n,)
    return tuple(int(i) for i in order[:k])


def _opendp_top_k(scores: np.ndarray, k: int, scale: float, *, monotone: bool) -> tuple[int, ...]:
    """OpenDP ``make_noisy_top_k`` with zCDP output measure: Gumbel noise (its MaxDivergence
    variant uses exponential noise, i.e. permute-and-flip, a different distribution); its metric
    says whether the scores are monotone, so that its own privacy map matches the scale."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    integral = np.issubdtype(scores.dtype, np.integer)
    atom = dp.atom_domain(T=int) if integral else dp.atom_domain(T=float, nan=False)
    metric = dp.linf_distance(T=int if integral else float, monotonic=monotone)
    measurement = dp.m.make_noisy_top_k(
        dp.vector_domain(atom), metric, dp.zero_concentrated_divergence(), k=k, scale=float(scale)
    )
    values = [int(v) for v in scores] if integral else [float(v) for v in scores]
    return tuple(int(i) for i in measurement(values))


def noisy_top_k_event(*, epsilon: float, k: int) -> dp_accounting.DpEvent:
    """``SelfComposedDpEvent(DiscreteLaplaceDpEvent(ε/k, 1), k)``: ``k`` peeling rounds of the
    ``ε/k``-DP exponential mechanism, each as its exact ``RR`` dominating pair (module docstring)."""
    epsilon = check_positive("epsilon", epsilon)
    k = check_int("k", k, minimum=1)
    per_round = DiscreteLaplaceDpEvent(noise_parameter=epsilon / k, sensitivity=1)
    return dp_accounting.SelfComposedDpEvent(per_round, k) if k > 1 else per_round


@dataclass(frozen=True)
class SelectionBudget:
    """``epsilon_selection = fraction·epsilon`` (pure, δ = 0) and the total ``(epsilon, delta)``."""

    epsilon: float
    delta: float
    epsilon_selection: float
    selection_fraction: float


def split_budget(
    *, total_epsilon: float, total_delta: float, selection_fraction: float = DEFAULT_SELECTION_FRACTION
) -> SelectionBudget:
    """Split the total budget: ``ε_sel = fraction · ε``; the release gets the rest through
    calibration (the accountant's composition is tighter than ``ε − ε_sel``).

    Raises:
        ParameterError: an invalid ``(ε, δ)`` or a fraction outside ``(0, 1)``.
    """
    validate_epsilon_delta(epsilon=total_epsilon, delta=total_delta)
    fraction = float(selection_fraction)
    if not 0.0 < fraction < 1.0:
        raise ParameterError(f"selection_fraction must be in (0, 1), got {selection_fraction!r}")
    return SelectionBudget(float(total_epsilon), float(total_delta), fraction * total_epsilon, fraction)


@dataclass(frozen=True)
class PrivateSelectionPlan:
    """Every number of a private selection, fixed before any vote is counted.

    ``fixed_events`` is what the release's calibration must compose with (empty for parallel
    composition); ``event`` is the selection's own event, recorded in the artifact either way.
    """

    k: int
    max_votes_per_chunk: int
    epsilon_selection: float
    noise_scale: float
    composition: str
    budget: SelectionBudget
    event: dp_accounting.DpEvent
    monotone: bool = False  # scores that move together (the noise scale's factor 1, not 2)

    @property
    def fixed_events(self) -> tuple[dp_accounting.DpEvent, ...]:
        return (self.event,) if self.composition == "sequential" else ()


def plan_private_selection(
    *,
    total_epsilon: float,
    total_delta: float,
    k: int,
    max_votes_per_chunk: int | None = None,
    selection_fraction: float = DEFAULT_SELECTION_FRACTION,
    composition: str = "sequential",
    monotone: bool = False,
) -> PrivateSelectionPlan:
    """Plan a private selection of ``k`` heads within a total ``(ε, δ)`` (module docstring).
    ``monotone`` (:func:`monotone_scores`) halves the Gumbel scale; the event is the same.

    Sequential: ``ε_sel = fraction·ε`` and ``plan.fixed_events`` go to ``plan_gaussian_release``.
    Parallel (disjoint chunk halves): the selection gets the whole ``ε`` and the release is
    calibrated alone to ``(ε, δ)``.
    """
    if composition not in COMPOSITIONS:
        raise ParameterError(f"composition must be one of {COMPOSITIONS}, got {composition!r}")
    k = check_int("k", k, minimum=1)
    k_prime = check_int(
        "max_votes_per_chunk", k if max_votes_per_chunk is None else max_votes_per_chunk, minimum=1
    )
    if composition == "parallel":
        validate_epsilon_delta(epsilon=total_epsilon, delta=total_delta)
        budget = SelectionBudget(float(total_epsilon), float(total_delta), float(total_epsilon), 1.0)
    else:
        budget = split_budget(
            total_epsilon=total_epsilon, total_delta=total_delta, selection_fraction=selection_fraction
        )
    eps_sel = budget.epsilon_selection
    return PrivateSelectionPlan(
        k=k,
        max_votes_per_chunk=k_prime,
        epsilon_selection=eps_sel,
        noise_scale=noisy_top_k_scale(epsilon=eps_sel, k=k, monotone=monotone),
        composition=composition,
        budget=budget,
        event=noisy_top_k_event(epsilon=eps_sel, k=k),
        monotone=monotone,
    )


def parallel_halves(num_chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """Chunk indices for parallel composition: even → selection, odd → release
    (:func:`parallel_half` of every chunk).

    Data-independent (chunk order is a data-independent permutation or hash), so a record falls in
    exactly one half whatever the data. Each half has about ``m/2`` chunks: the release's ``Δ``
    (``∝ 1/m``) doubles and the selection has half the votes, but neither pays for the other.
    """
    m = check_int("num_chunks", num_chunks, minimum=2)
    indices = np.arange(m)
    return indices[0::2], indices[1::2]


def parallel_half(chunk_index: int) -> tuple[int, int]:
    """Where chunk ``j`` goes under parallel composition: (0 selection / 1 release, its index in
    that half) — ``(j mod 2, j div 2)``, as in :func:`parallel_halves`, for partitions that store
    only their non-empty chunks."""
    return chunk_index % 2, chunk_index // 2


def parallel_half_sizes(num_chunks: int) -> tuple[int, int]:
    """The public sizes of the two halves of :func:`parallel_halves`: ``(ceil(m/2), floor(m/2))``."""
    m = check_int("num_chunks", num_chunks, minimum=2)
    return (m + 1) // 2, m // 2
