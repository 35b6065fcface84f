"""The calibration is used only where it is exact: outside the supported (ε, δ) range it is
refused; inside, it matches the closed-form analytic Gaussian (Balle & Wang 2018)."""

from __future__ import annotations

import pytest

from dpmtv.errors import ParameterError
from dpmtv.privacy import calibrate_gaussian_noise_multiplier
from dpmtv.privacy.calibrate import SUPPORTED_DELTA, SUPPORTED_EPSILON
from tests.privacy.test_calibrate import balle_wang_delta

# Relative distance of the calibrated σ above the exact analytic σ: measured at most 8.2e-6
# (at δ = 1e-12; ~2e-7 for δ >= 1e-10), from the PLD accountant's pessimistic discretisation.
TIGHTNESS = 2e-5


@pytest.mark.parametrize(
    ("epsilon", "delta", "field"),
    [(1.0, 1e-20, "delta"), (1.0, 1e-13, "delta"), (1.0, 0.9, "delta"), (1e-4, 1e-5, "epsilon"),
     (1000.0, 1e-5, "epsilon"), (1e6, 1e-5, "epsilon")],
)  # fmt: skip
def test_outside_the_supported_range_is_refused(epsilon, delta, field):
    with pytest.raises(ParameterError, match=rf"{field} = .* outside the supported range"):
        calibrate_gaussian_noise_multiplier(epsilon=epsilon, delta=delta)


CORNERS = [(e, d) for e in SUPPORTED_EPSILON for d in SUPPORTED_DELTA]
INSIDE = [(e, d) for e in (0.01, 0.3, 1.0, 4.0) for d in (1e-12, 1e-9, 1e-5, 1e-2)]


@pytest.mark.parametrize(("epsilon", "delta"), CORNERS + INSIDE)
def test_calibration_is_the_analytic_gaussian_over_the_supported_range(epsilon, delta):
    """Sound: the closed-form δ(ε) at the calibrated σ is <= δ. Tight: at σ·(1 − TIGHTNESS) it
    is > δ, i.e. the calibrated σ is within TIGHTNESS of the exact analytic σ."""
    sigma = calibrate_gaussian_noise_multiplier(epsilon=epsilon, delta=delta)
    assert balle_wang_delta(sigma, epsilon) <= delta * (1 + 1e-9)
    assert balle_wang_delta(sigma * (1 - TIGHTNESS), epsilon) > delta
