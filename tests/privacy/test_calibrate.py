"""Calibration: golden values, round trips, no overshoot, and two independent routes."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize
from scipy.stats import norm

from dpmtv.errors import ParameterError
from dpmtv.privacy import (
    analytic_gaussian_noise_multiplier,
    calibrate_gaussian_noise_multiplier,
    epsilon_of,
    gaussian_release_event,
    validate_epsilon_delta,
)


def balle_wang_delta(sigma: float, epsilon: float) -> float:
    """Our own closed form (Balle & Wang 2018, Thm 8) for sensitivity 1:
    δ(ε) = Φ(−εσ + 1/(2σ)) − e^ε Φ(−εσ − 1/(2σ)), evaluated in log space."""
    a = norm.logcdf(-epsilon * sigma + 0.5 / sigma)
    b = epsilon + norm.logcdf(-epsilon * sigma - 0.5 / sigma)
    return math.exp(a) - math.exp(b)


def balle_wang_epsilon(sigma: float, delta: float) -> float:
    """Invert our closed form in ε by bracketing root finding."""
    return optimize.brentq(lambda e: balle_wang_delta(sigma, e) - delta, 0.0, 200.0, xtol=1e-13)


def _eps(z: float, delta: float) -> float:
    return epsilon_of(gaussian_release_event(noise_multiplier=z), delta=delta)


def test_analytic_golden_value():
    sigma = analytic_gaussian_noise_multiplier(epsilon=1.0, delta=1e-5)
    assert round(sigma, 7) == 3.7306316
    assert sigma == pytest.approx(3.7306316348159374, rel=1e-10)
    assert balle_wang_delta(sigma, 1.0) == pytest.approx(1e-5, rel=1e-8)


def test_calibrated_close_to_and_not_below_analytic():
    z = calibrate_gaussian_noise_multiplier(epsilon=1.0, delta=1e-5)
    analytic = analytic_gaussian_noise_multiplier(epsilon=1.0, delta=1e-5)
    assert analytic <= z <= analytic * (1 + 1e-3)
    assert _eps(z, 1e-5) <= 1.0
    assert _eps(z, 1e-5) == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize(
    ("epsilon", "delta"), [(0.1, 1e-6), (0.5, 1e-5), (1.0, 1e-5), (3.0, 1e-8), (8.0, 1e-3)]
)
def test_sigma_epsilon_sigma_round_trip(epsilon, delta):
    z = calibrate_gaussian_noise_multiplier(epsilon=epsilon, delta=delta)
    eps_back = _eps(z, delta)
    assert eps_back <= epsilon
    assert eps_back == pytest.approx(epsilon, rel=1e-5)
    # and from sigma: sigma -> epsilon -> sigma
    z_again = calibrate_gaussian_noise_multiplier(epsilon=eps_back, delta=delta)
    assert z_again == pytest.approx(z, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(
    log_epsilon=st.floats(math.log(0.05), math.log(20.0)),
    log10_delta=st.floats(-10.0, -2.0),
)
def test_calibration_never_overshoots(log_epsilon, log10_delta):
    epsilon, delta = math.exp(log_epsilon), 10.0**log10_delta
    z = calibrate_gaussian_noise_multiplier(epsilon=epsilon, delta=delta)
    assert _eps(z, delta) <= epsilon + 1e-9


@pytest.mark.parametrize("sigma", [0.8, 2.0, 3.7306316348159374, 10.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-8])
def test_pld_agrees_with_own_closed_form(sigma, delta):
    """Route 1: our Balle–Wang formula. Route 2: dp-accounting's PLD accountant (pessimistic)."""
    closed = balle_wang_epsilon(sigma, delta)
    pld = _eps(sigma, delta)
    assert pld >= closed - 1e-9  # the PLD estimate is an upper bound
    assert pld == pytest.approx(closed, rel=1e-4, abs=1e-6)


def test_fixed_events_need_more_noise_and_stay_within_budget():
    alone = calibrate_gaussian_noise_multiplier(epsilon=1.0, delta=1e-5)
    selection = dp_accounting.LaplaceDpEvent(5.0)
    z = calibrate_gaussian_noise_multiplier(epsilon=1.0, delta=1e-5, fixed_events=[selection])
    assert z > alone
    composed = dp_accounting.ComposedDpEvent([selection, gaussian_release_event(noise_multiplier=z)])
    assert epsilon_of(composed, delta=1e-5) <= 1.0


def test_fixed_events_that_spend_the_budget_are_refused():
    with pytest.raises(ParameterError, match="fixed events alone"):
        calibrate_gaussian_noise_multiplier(
            epsilon=1.0, delta=1e-5, fixed_events=[dp_accounting.LaplaceDpEvent(0.5)]
        )


@pytest.mark.parametrize(
    ("epsilon", "delta", "match"),
    [
        (-1, 1e-5, "epsilon must be > 0.*got -1"),
        (0.0, 1e-5, "epsilon must be > 0"),
        (math.inf, 1e-5, "epsilon must be > 0 and finite"),
        (math.nan, 1e-5, "epsilon"),
        (1.0, 0.0, r"delta must be in \(0, 1\), got 0.0"),
        (1.0, 1.0, "delta must be in"),
        (1.0, "x", "delta must be in"),
    ],
)
def test_invalid_budget(epsilon, delta, match):
    with pytest.raises(ParameterError, match=match):
        validate_epsilon_delta(epsilon=epsilon, delta=delta)
    with pytest.raises(ParameterError, match=match):
        calibrate_gaussian_noise_multiplier(epsilon=epsilon, delta=delta)


def test_delta_at_least_one_over_n_warns():
    assert validate_epsilon_delta(epsilon=1.0, delta=1e-5, num_records=1000) == []
    warnings = validate_epsilon_delta(epsilon=1.0, delta=1e-2, num_records=1000)
    assert len(warnings) == 1 and "1/N" in warnings[0]
