"""The float64 mean must stay within the sensitivity at a million chunks (issue 23.5).

The sensitivity proof bounds the EXACT means: ``‖μ(D) − μ(D')‖ <= Δ``. The release noises the
COMPUTED mean, so what must hold is ``‖μ̃(D) − μ̃(D')‖ <= Δ`` for the computed ones. By the
triangle inequality that holds whenever

    ‖μ̃(D) − μ*(D)‖ + ‖μ̃(D') − μ*(D')‖ + ‖μ*(D) − μ*(D')‖ <= Δ,

where ``μ*`` is the exact value the accumulator aims at (the exact sum over ``m·(1 + κ)``,
:data:`dpmtv.privacy.aggregate`'s slack ``κ``; ``κ = 0`` before). The test measures the two
rounding errors against exact rational arithmetic (``fractions.Fraction`` per coordinate, from
``math.fsum``'s correctly rounded partials) on synthetic clipped rows — no model.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpmtv.privacy import ClippedSumAccumulator, aggregate, clip_l2_per_layer, l2_sensitivity

NUM_CHUNKS = 10**6
DIM = 4
CLIP_NORM = 1.0
BATCH = 4096


def _rows(seed: int) -> np.ndarray:
    """Rows clipped to C, every one on the clip sphere (the worst case for the error bounds),
    with magnitudes that do not add up exactly in float64."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(NUM_CHUNKS, DIM)) + np.array([3.0, -1.0, 0.5, 7.0])
    return clip_l2_per_layer({0: rows * 1e3}, l2_clip_norms={0: CLIP_NORM})[0]  # (m, D)


def _computed_mean(rows: np.ndarray) -> np.ndarray:
    accumulator = ClippedSumAccumulator({0: DIM})
    for start in range(0, len(rows), BATCH):
        accumulator.add({0: rows[start : start + BATCH]})
    return accumulator.mean(num_chunks=NUM_CHUNKS)._consume()[0]


def _exact_sum(column: np.ndarray) -> Fraction:
    """Σ column exactly: each float64 is mantissa·2^exponent with a 53-bit integer mantissa;
    mantissas of one exponent are summed as integers (512 at a time fit in int64)."""
    fractions, exponents = np.frexp(column)
    mantissas = (fractions * 2.0**53).astype(np.int64)
    total = Fraction(0)
    for exponent in np.unique(exponents):
        same = mantissas[exponents == exponent]
        integer = sum(int(same[i : i + 512].sum()) for i in range(0, len(same), 512))
        total += Fraction(integer) * Fraction(2) ** (int(exponent) - 53)
    return total


def _exact_target(rows: np.ndarray) -> list[Fraction]:
    """The exact mean the computation aims at: Σ rows / (m·(1 + κ)), in rationals."""
    slack = Fraction(getattr(aggregate, "summation_slack", lambda m: 0.0)(NUM_CHUNKS))
    return [_exact_sum(column) / (NUM_CHUNKS * (1 + slack)) for column in rows.T]


def _distance(first, second) -> float:
    """‖first − second‖₂, exactly up to the final square root (floats are read as rationals)."""
    squares = sum((Fraction(a) - Fraction(b)) ** 2 for a, b in zip(first, second, strict=True))
    return math.sqrt(float(squares))


def test_the_computed_means_of_neighbours_stay_within_the_sensitivity_at_a_million_chunks():
    rows = _rows(0)
    neighbour = rows.copy()
    neighbour[123_456] = -rows[123_456]  # replace-one: one chunk's vector replaced, ‖change‖ = 2C
    delta = l2_sensitivity(l2_clip_norms=[CLIP_NORM], num_chunks=NUM_CHUNKS, relation="replace-one")
    exact, exact_neighbour = _exact_target(rows), _exact_target(neighbour)
    computed = [_computed_mean(rows).tolist(), _computed_mean(neighbour).tolist()]
    rounding = _distance(computed[0], exact) + _distance(computed[1], exact_neighbour)
    proved = _distance(exact, exact_neighbour)  # <= 2C'/(m(1 + κ)), C' the clipped norm
    assert proved <= delta
    assert proved + rounding <= delta, (
        f"rounding {rounding / delta:.3g}·Δ exceeds the slack {(delta - proved) / delta:.3g}·Δ"
    )
