r"""A private clip norm: the ``α``-quantile of the per-chunk norms of each layer, chosen by the
exponential mechanism over a public grid of candidates (docs/design.md §2 step 5).

Pure privacy maths: numpy, dp-accounting and OpenDP only. The model side (one forward pass per
chunk that reads each layer's norm) lives elsewhere; here the input is an ``(m, L)`` array of
norms, one row per chunk of the public ``m``, one column per released layer.

Mechanism
=========

For one layer with chunk norms ``n_1 … n_m`` and a PUBLIC sorted grid ``c_1 < … < c_K``, the
score of candidate ``c`` is OpenDP's quantile score (``make_quantile_score_candidates``, Smith
2011) ``u(c) = |(1−α)·#{j: n_j < c} − α·#{j: n_j > c}|`` scaled to integers by ``α``'s
denominator; the best candidate has the smallest score. The choice is the exponential mechanism
``P[c] ∝ exp(−ε₀·u(c) / (2Δ∞))``, sampled exactly as ``argmax(−u + Gumbel(0, b))`` with
``b = 2Δ∞/ε₀`` (the Gumbel-max trick) by OpenDP's ``make_noisy_max`` over its CSPRNG.

Sensitivity. Under every relation and unit dpmtv supports, a neighbouring dataset changes the
content of ONE chunk (replace-one: the changed record's chunk under the data-independent
permutation; add-remove-one and user level: the keyed-hash chunk of the record or user, possibly
from or to empty, whose norm is then 0), and the number of chunks ``m`` is public and fixed. So
each layer's norm vector changes in at most one coordinate: a removal and an insertion, distance
2 in OpenDP's ``SymmetricDistance``. ``Δ∞`` is what OpenDP's own map of the score transformation
gives for ``d_in = 2`` (``2·max(num, den − num)`` for ``α = num/den``; 2 for the median). The
scores are not monotone in the data, hence the factor 2 (McSherry & Talwar 2007).

Layers and accounting. Each of the ``L`` layers gets ``ε₀ = ε/L`` and runs on the same chunks, so
the whole choice is ``ε``-DP by sequential composition. As in :mod:`dpmtv.privacy.noisy_top_k`,
each pure ``ε₀``-DP round is recorded as ``DiscreteLaplaceDpEvent(ε₀, 1)``, whose privacy-loss
distribution is the randomized-response pair that dominates every ``ε₀``-DP mechanism, and the
choice as ``SelfComposedDpEvent(…, L)``: dp-accounting's PLD accountant composes it with the
selection and the Gaussian release; we write no composition theorem. The release then clips
with the chosen norms, and its sensitivity ``Δ = 2·sqrt(Σ C_l²)/m`` is computed from them: a
function of an ε-DP output, covered by adaptive composition.

What is public: the grid, ``α``, ``ε`` and ``m``. The chosen norms are private outputs of this
mechanism (released, like the vector). The norms themselves never leave the caller.

One round over public layer scales (what the build uses)
=========================================================

Splitting ``ε`` over ``L`` layers leaves each layer ``ε/L``; with ``m`` = 256 chunks and ``L`` = 4
the Gumbel noise (``b = 2Δ∞L/ε``) then swamps the scores' whole range at ``ε`` = 0.1 and the
choice is close to uniform over the grid. :func:`private_clip_multiplier` spends ``ε`` in ONE
round instead: given PUBLIC per-layer scales ``g_l`` (the build takes each layer's norm on a
public blank-image prompt), each chunk contributes the one number ``r_j = max_l n_{j,l} / g_l``,
the grid holds candidate multipliers ``c``, and the build clips layer ``l`` at ``C_l = c·g_l``.
``r_j`` is a function of chunk ``j`` alone, so a neighbouring dataset still changes one
coordinate of ``r``: the same ``Δ∞`` as one layer above, one ``DiscreteLaplaceDpEvent(ε, 1)``
(:func:`clip_multiplier_event`), and the ``α``-quantile of ``r`` leaves a share ``α`` of the
chunks unclipped in every layer (those with ``r_j <= c``).

A utility that degrades gracefully (``utility="log-loss"``)
============================================================

The quantile score counts chunks on either side of ``c``, so every candidate beyond all the
chunks' ratios scores the same (the whole range): a noisy choice that misses lands anywhere,
5-190× off on the embedded benchmark. :func:`log_loss_scores` instead scores ``c`` by the chunks'
pinball (quantile) loss in log space, each chunk's loss clipped to ``[0, 1]``::

    u(c) = Σ_j min(ρ_α(ln r_j − ln c) / ln w, 1),   ρ_α(x) = x·(α − 1[x < 0]),

``w > 1`` a public tolerance factor, in integer units of ``1/LOG_LOSS_RESOLUTION``. Unclipped,
its minimiser is the ``α``-quantile of the ratios; the score grows linearly in ``|ln c|`` away from
it, so a near miss costs little and a far miss is as unlikely as a full-range score allows. Each
chunk's term lies in ``[0, R]`` (``R`` the resolution) and a neighbouring dataset changes one chunk
(the same argument as above; an emptied chunk's ratio 0 scores ``R`` everywhere), so
``Δ∞ = R`` — half the quantile score's ``Δ∞`` relative to its range. The choice is the same
Gumbel-max exponential mechanism, one pure ``ε``-DP round, the same event.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import dp_accounting
import numpy as np
from dp_accounting.dp_event import DiscreteLaplaceDpEvent

from dpmtv.errors import DangerousModeError, ParameterError
from dpmtv.privacy._checks import check_int, check_positive

if TYPE_CHECKING:  # opendp loads lazily: a build without a private clip norm never imports it
    from opendp.mod import Transformation

__all__ = [
    "CLIP_UTILITIES",
    "DEFAULT_CLIP_QUANTILE",
    "LOG_LOSS_RESOLUTION",
    "clip_choice_score_tolerance",
    "clip_multiplier_event",
    "clip_norm_candidates",
    "clip_quantile_event",
    "clip_quantile_scale",
    "log_loss_scores",
    "multiplier_ratios",
    "multiplier_score_range",
    "multiplier_scores",
    "multiplier_score_sensitivity",
    "private_clip_multiplier",
    "private_clip_norms",
    "quantile_scores",
    "quantile_score_sensitivity",
]

# Andrew et al. (NeurIPS 2021) clip at the median of the per-example norms; so do we by default.
DEFAULT_CLIP_QUANTILE = 0.5
# A change of one chunk is one removal and one insertion in OpenDP's SymmetricDistance.
CHANGE_ONE_SYMMETRIC_DISTANCE = 2
# The scores of the multiplier round: OpenDP's quantile score, or the clipped log pinball loss.
CLIP_UTILITIES = ("quantile", "log-loss")
# Integer units per chunk of the log-loss score (each chunk's term is in [0, LOG_LOSS_RESOLUTION]).
LOG_LOSS_RESOLUTION = 1000


def clip_norm_candidates(*, low: float, high: float, count: int = 64) -> tuple[float, ...]:
    """A public geometric grid of ``count`` candidate norms from ``low`` to ``high``."""
    low, high = check_positive("low", low), check_positive("high", high)
    count = check_int("count", count, minimum=2)
    if not low < high:
        raise ParameterError(f"low must be < high, got low = {low!r}, high = {high!r}")
    return tuple(float(c) for c in np.geomspace(low, high, count))


def _check_candidates(candidates: Sequence[float]) -> list[float]:
    grid = [float(c) for c in candidates]
    if len(grid) < 2 or not all(math.isfinite(c) and c > 0 for c in grid):
        raise ParameterError(f"candidates must be >= 2 finite norms > 0, got {list(candidates)!r}")
    if any(b <= a for a, b in zip(grid, grid[1:])):
        raise ParameterError("candidates must be strictly increasing")
    return grid


def _check_alpha(alpha: float) -> float:
    alpha = float(alpha)
    if not 0.0 < alpha < 1.0:
        raise ParameterError(f"quantile must be in (0, 1), got {alpha!r}")
    return alpha


def _score_transformation(candidates: Sequence[float], alpha: float) -> Transformation:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    return dp.t.make_quantile_score_candidates(
        domain, dp.symmetric_distance(), _check_candidates(candidates), alpha=_check_alpha(alpha)
    )


def quantile_scores(
    norms: Sequence[float] | np.ndarray, *, candidates: Sequence[float], alpha: float
) -> np.ndarray:
    """OpenDP's integer quantile scores of one layer's chunk norms (smaller is better), ``(K,)``."""
    values = np.asarray(norms, dtype=np.float64)  # (m,)
    if values.ndim != 1 or not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ParameterError("norms must be a 1-D array of finite values >= 0")
    return np.asarray(_score_transformation(candidates, alpha)([float(v) for v in values]), dtype=np.int64)


def quantile_score_sensitivity(*, candidates: Sequence[float], alpha: float) -> int:
    """``Δ∞`` of the scores when one chunk's norm changes: OpenDP's map at ``d_in = 2``."""
    scores = _score_transformation(candidates, alpha)
    return int(scores.map(CHANGE_ONE_SYMMETRIC_DISTANCE))  # type: ignore[no-untyped-call]  # opendp's map is unannotated


def clip_quantile_scale(*, epsilon: float, linf_sensitivity: float) -> float:
    """Gumbel scale ``b = 2·Δ∞/ε`` making one layer's choice ``ε``-DP (non-monotone scores)."""
    return 2.0 * check_positive("linf_sensitivity", linf_sensitivity) / check_positive("epsilon", epsilon)


def clip_quantile_event(*, epsilon: float, num_layers: int) -> dp_accounting.DpEvent:
    """``SelfComposedDpEvent(DiscreteLaplaceDpEvent(ε/L, 1), L)``: one ``ε/L``-DP choice per layer."""
    epsilon = check_positive("epsilon", epsilon)
    num_layers = check_int("num_layers", num_layers, minimum=1)
    per_layer = DiscreteLaplaceDpEvent(noise_parameter=epsilon / num_layers, sensitivity=1)
    return dp_accounting.SelfComposedDpEvent(per_layer, num_layers) if num_layers > 1 else per_layer


def clip_choice_score_tolerance(
    *,
    epsilon: float,
    candidates: Sequence[float],
    alpha: float,
    failure_probability: float = 0.05,
    utility: str = "quantile",
) -> float:
    """How far above the best score the chosen candidate's may be: with probability at least
    ``1 − β`` the exponential mechanism's choice is within ``(2Δ∞/ε)·ln(K/β)`` of the best score
    (McSherry & Talwar 2007, Theorem 6; ``K`` candidates). A function of public numbers only; the
    build warns when it exceeds half the score range, i.e. when the choice may land anywhere."""
    grid = _check_candidates(candidates)
    sensitivity = multiplier_score_sensitivity(candidates=grid, alpha=alpha, utility=utility)
    beta = float(failure_probability)
    if not 0.0 < beta < 1.0:
        raise ParameterError(f"failure_probability must be in (0, 1), got {failure_probability!r}")
    return clip_quantile_scale(epsilon=epsilon, linf_sensitivity=sensitivity) * math.log(len(grid) / beta)


def _check_utility(utility: str) -> str:
    if utility not in CLIP_UTILITIES:
        raise ParameterError(f"the clip round's utility must be one of {CLIP_UTILITIES}, got {utility!r}")
    return utility


def _check_tolerance(tolerance: float) -> float:
    tolerance = float(tolerance)
    if not (math.isfinite(tolerance) and tolerance > 1.0):
        raise ParameterError(f"the log-loss tolerance factor must be a finite number > 1, got {tolerance!r}")
    return tolerance


def log_loss_scores(
    ratios: Sequence[float] | np.ndarray, *, candidates: Sequence[float], alpha: float, tolerance: float
) -> np.ndarray:
    """The clipped log pinball loss of every candidate (module docstring; smaller is better):
    ``(K,)`` integers, each chunk contributing ``0 … LOG_LOSS_RESOLUTION`` to each."""
    values = np.asarray(ratios, dtype=np.float64)  # (m,)
    if values.ndim != 1 or not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ParameterError("ratios must be a 1-D array of finite values >= 0")
    grid = np.log(np.asarray(_check_candidates(candidates)))  # (K,)
    alpha, width = _check_alpha(alpha), math.log(_check_tolerance(tolerance))
    with np.errstate(divide="ignore"):
        diff = np.log(values)[None, :] - grid[:, None]  # (K, m); -inf for a ratio of 0
    loss = np.where(diff >= 0, alpha * diff, (alpha - 1.0) * diff)  # >= 0; +inf for a ratio of 0
    terms: np.ndarray = np.rint(LOG_LOSS_RESOLUTION * np.minimum(loss / width, 1.0)).astype(np.int64)
    return terms.sum(axis=1)  # type: ignore[no-any-return]  # numpy's sum is typed Any


def multiplier_scores(
    ratios: np.ndarray, *, candidates: Sequence[float], alpha: float, utility: str, tolerance: float
) -> np.ndarray:
    """The multiplier round's integer scores ``(K,)`` (smaller is better) under ``utility``."""
    if _check_utility(utility) == "log-loss":
        return log_loss_scores(ratios, candidates=candidates, alpha=alpha, tolerance=tolerance)
    return quantile_scores(ratios, candidates=candidates, alpha=alpha)


def multiplier_score_sensitivity(*, candidates: Sequence[float], alpha: float, utility: str) -> int:
    """``Δ∞`` of :func:`multiplier_scores` when one chunk changes."""
    if _check_utility(utility) == "log-loss":
        return LOG_LOSS_RESOLUTION
    return quantile_score_sensitivity(candidates=candidates, alpha=alpha)


def multiplier_score_range(*, num_chunks: int, alpha: float, utility: str) -> float:
    """The score of a candidate beyond every chunk's ratio: the scores' whole range at ``m``."""
    if _check_utility(utility) == "log-loss":
        return float(num_chunks * LOG_LOSS_RESOLUTION)
    return float(quantile_scores([1.0] * num_chunks, candidates=(0.5, 2.0), alpha=alpha)[0])


def clip_multiplier_event(*, epsilon: float) -> dp_accounting.DpEvent:
    """``DiscreteLaplaceDpEvent(ε, 1)``: the one pure ``ε``-DP round of :func:`private_clip_multiplier`."""
    return DiscreteLaplaceDpEvent(noise_parameter=check_positive("epsilon", epsilon), sensitivity=1)


def private_clip_multiplier(
    chunk_norms: np.ndarray,
    *,
    layer_scales: Sequence[float],
    candidates: Sequence[float],
    epsilon: float,
    alpha: float = DEFAULT_CLIP_QUANTILE,
    utility: str = "quantile",
    tolerance: float = 4.0,
    rng: np.random.Generator | None = None,
    allow_non_private: bool = False,
) -> float:
    """The private ``α``-quantile, over the grid ``candidates``, of each chunk's largest ratio
    ``max_l n_{j,l} / g_l`` (``chunk_norms`` ``(m, L)``, public ``layer_scales`` ``g`` ``(L,)``):
    one ``ε``-DP round (module docstring) scored by ``utility`` ("quantile", or "log-loss" with
    the public ``tolerance`` factor); layer ``l`` is then clipped at ``c·g_l``.

    ``rng`` and ``epsilon = inf`` as in :func:`private_clip_norms`."""
    ratios = multiplier_ratios(chunk_norms, layer_scales=layer_scales)  # (m,)
    grid = _check_candidates(candidates)
    sensitivity = multiplier_score_sensitivity(candidates=grid, alpha=alpha, utility=utility)
    scale = _gumbel_scale(epsilon, sensitivity, allow_non_private)
    if utility == "quantile":
        return grid[_choose(ratios, grid, alpha, scale, rng)]
    scores = log_loss_scores(ratios, candidates=grid, alpha=alpha, tolerance=tolerance)  # (K,)
    return grid[_noisy_min(scores, scale, rng)]


def multiplier_ratios(chunk_norms: np.ndarray, *, layer_scales: Sequence[float]) -> np.ndarray:
    """Each chunk's one number of the multiplier round, ``r_j = max_l n_{j,l} / g_l``, ``(m,)``:
    a function of chunk ``j``'s norms alone (the sensitivity argument of the module docstring)."""
    norms = _checked_norms(chunk_norms)
    scales = np.asarray(layer_scales, dtype=np.float64)
    if scales.shape != (norms.shape[1],) or not np.all(np.isfinite(scales)) or np.any(scales <= 0):
        raise ParameterError(
            f"layer_scales must be {norms.shape[1]} finite values > 0 (one per layer), "
            f"got {list(layer_scales)!r}"
        )
    ratios: np.ndarray = (norms / scales).max(axis=1)
    return ratios


def _checked_norms(chunk_norms: np.ndarray) -> np.ndarray:
    norms = np.asarray(chunk_norms, dtype=np.float64)  # (m, L)
    if norms.ndim != 2 or norms.shape[0] < 1 or norms.shape[1] < 1:
        raise ParameterError(f"chunk_norms must have shape (m, L) with m, L >= 1, got {norms.shape}")
    return norms


def _gumbel_scale(epsilon: float, sensitivity: int, allow_non_private: bool) -> float | None:
    """The Gumbel scale of one ``epsilon``-DP choice; None (exact) for ``epsilon = inf``."""
    if math.isinf(float(epsilon)) and float(epsilon) > 0:
        if not allow_non_private:
            raise DangerousModeError(
                "epsilon = inf chooses clip norms without noise (no privacy guarantee); pass "
                "allow_non_private=True for this baseline"
            )
        return None
    return clip_quantile_scale(epsilon=float(epsilon), linf_sensitivity=sensitivity)


def private_clip_norms(
    chunk_norms: np.ndarray,
    *,
    candidates: Sequence[float],
    epsilon: float,
    alpha: float = DEFAULT_CLIP_QUANTILE,
    rng: np.random.Generator | None = None,
    allow_non_private: bool = False,
) -> tuple[float, ...]:
    """One private ``α``-quantile per layer of ``chunk_norms`` ``(m, L)``, ``ε/L`` each.

    Without ``rng`` the Gumbel noise comes from OpenDP's exact sampler over the OS CSPRNG; an
    ``rng`` (numpy) is for tests and seeded experiments only. ``epsilon = inf`` returns the exact
    best candidate of each layer and needs ``allow_non_private=True``.
    """
    norms = _checked_norms(chunk_norms)
    grid = _check_candidates(candidates)
    num_layers = norms.shape[1]
    sensitivity = quantile_score_sensitivity(candidates=grid, alpha=alpha)
    scale = _gumbel_scale(float(epsilon) / num_layers, sensitivity, allow_non_private)
    return tuple(grid[_choose(norms[:, layer], grid, alpha, scale, rng)] for layer in range(num_layers))


def _choose(
    norms: np.ndarray, grid: list[float], alpha: float, scale: float | None, rng: np.random.Generator | None
) -> int:
    if scale is None:
        return int(np.argmin(quantile_scores(norms, candidates=grid, alpha=alpha)))
    if rng is not None:
        scores = quantile_scores(norms, candidates=grid, alpha=alpha)  # (K,)
        return int(np.argmax(-scores + rng.gumbel(0.0, scale, size=scores.shape)))
    import opendp.prelude as dp

    measurement = _score_transformation(grid, alpha) >> dp.m.then_noisy_max(
        dp.zero_concentrated_divergence(), scale=float(scale), negate=True
    )
    return int(measurement([float(v) for v in norms]))


def _noisy_min(scores: np.ndarray, scale: float | None, rng: np.random.Generator | None) -> int:
    """The index of the smallest of the integer ``scores`` after Gumbel noise of ``scale``: the
    exponential mechanism (OpenDP's noisy max over its CSPRNG, or seeded numpy with ``rng``)."""
    if scale is None:
        return int(np.argmin(scores))
    if rng is not None:
        return int(np.argmax(-scores + rng.gumbel(0.0, scale, size=scores.shape)))
    import opendp.prelude as dp

    dp.enable_features("contrib")
    measurement = dp.m.make_noisy_max(
        dp.vector_domain(dp.atom_domain(T=int)),
        dp.linf_distance(T=int),
        dp.zero_concentrated_divergence(),
        scale=float(scale),
        negate=True,
    )
    return int(measurement([int(v) for v in scores]))
