"""Calibrate the Gaussian noise multiplier to a target (epsilon, delta) (docs/design.md §2).

Two routes, both for unit sensitivity (multiply by ``Δ`` to get the noise std):

* :func:`analytic_gaussian_noise_multiplier`: the analytic Gaussian mechanism of Balle & Wang
  (ICML 2018), exact for one Gaussian release: the smallest ``σ₁`` with
  ``Φ(−εσ₁ + 1/(2σ₁)) − e^ε Φ(−εσ₁ − 1/(2σ₁)) <= δ``. ``σ₁(1, 1e-5) = 3.7306316348...``.
* :func:`calibrate_gaussian_noise_multiplier`: a search over the PLD accountant for the whole
  composed build (fixed events, e.g. a private head selection, plus the Gaussian release). It is
  the one the release uses, and it never overshoots: the returned multiplier's accounted epsilon
  is <= the target, checked after the search.

Supported range: ``ε ∈ [1e-3, 20]``, ``δ ∈ [1e-12, 0.5]`` (:data:`SUPPORTED_EPSILON`,
:data:`SUPPORTED_DELTA`); :func:`calibrate_gaussian_noise_multiplier` refuses anything else.
Inside it the calibrated multiplier is within 1e-5 relative of the exact analytic one (measured
at most 8.2e-6, at δ = 1e-12; ~2e-7 for δ >= 1e-10; ``tests/privacy/test_calibration_range.py``
checks the corners and a grid against the closed form), and one calibration takes at most ~10 s.
Outside it the PLD accountant is no longer exact or practical: below δ = 1e-12 its tail
truncation overestimates the multiplier (1e-3 too high at 1e-14, 252× at δ = 1e-20: 4467 instead
of 17.7); above ε = 20 the privacy-loss grid grows with ε (ε = 1000 takes ~50 s, ε = 1e6 tries
to allocate 60 GiB), and such ε protect nothing anyway. ``δ > 0.5`` is no guarantee worth stating.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import dp_accounting
from dp_accounting import mechanism_calibration

from dpmtv.errors import NumericalError, ParameterError
from dpmtv.privacy.events import epsilon_of, gaussian_release_event, make_accountant

__all__ = [
    "analytic_gaussian_noise_multiplier",
    "calibrate_gaussian_noise_multiplier",
    "check_calibration_range",
    "validate_epsilon_delta",
]

SUPPORTED_EPSILON = (1e-3, 20.0)  # closed interval of target epsilons the calibration accepts
SUPPORTED_DELTA = (1e-12, 0.5)  # closed interval of target deltas

# Search tolerance relative to the analytic multiplier (the answer is within ~1e-3 of it).
_RELATIVE_TOL = 1e-7


def validate_epsilon_delta(*, epsilon: float, delta: float, num_records: int | None = None) -> list[str]:
    """Check a target budget; return warnings for legal but risky values.

    Raises:
        ParameterError: epsilon not finite and > 0, or delta not in (0, 1); names the value.

    Returns:
        Warning strings, e.g. when ``delta >= 1/N`` (such a delta allows releasing a whole
        record outright with probability delta).
    """
    if isinstance(epsilon, bool) or not _is_real(epsilon) or not (math.isfinite(epsilon) and epsilon > 0):
        raise ParameterError(f"epsilon must be > 0 and finite, got {epsilon!r}")
    if isinstance(delta, bool) or not _is_real(delta) or not (0.0 < delta < 1.0):
        raise ParameterError(f"delta must be in (0, 1), got {delta!r}")
    warnings = []
    if num_records is not None and num_records > 0 and delta >= 1.0 / num_records:
        warnings.append(
            f"delta = {delta:g} is >= 1/N = {1.0 / num_records:g} for N = {num_records} records; "
            "such a delta permits leaking a whole record; choose delta well below 1/N"
        )
    return warnings


def check_calibration_range(*, epsilon: float, delta: float) -> None:
    """Refuse a valid (epsilon, delta) outside the supported range (see the module docstring).

    Raises:
        ParameterError: names the value, the range and why.
    """
    validate_epsilon_delta(epsilon=epsilon, delta=delta)
    low, high = SUPPORTED_EPSILON
    if not low <= float(epsilon) <= high:
        raise ParameterError(
            f"epsilon = {epsilon:g} is outside the supported range [{low:g}, {high:g}] of the noise "
            "calibration (beyond it the PLD accountant is too slow and memory-hungry to be exact, "
            "and below it the noise would drown any signal)"
        )
    low, high = SUPPORTED_DELTA
    if not low <= float(delta) <= high:
        raise ParameterError(
            f"delta = {delta:g} is outside the supported range [{low:g}, {high:g}] of the noise "
            "calibration (below 1e-12 the PLD accountant overestimates the noise; above 0.5 there is "
            "no meaningful guarantee)"
        )


def analytic_gaussian_noise_multiplier(*, epsilon: float, delta: float) -> float:
    """Balle & Wang's analytic Gaussian ``σ₁(ε, δ)`` for sensitivity 1 (``get_sigma_gaussian``)."""
    validate_epsilon_delta(epsilon=epsilon, delta=delta)
    return float(dp_accounting.get_sigma_gaussian(float(epsilon), float(delta)))


def calibrate_gaussian_noise_multiplier(
    *,
    epsilon: float,
    delta: float,
    fixed_events: Sequence[dp_accounting.DpEvent] = (),
    reserved_delta: float = 0.0,
) -> float:
    """Smallest noise multiplier ``z`` (within a 1e-7 relative tolerance, rounded up) such that
    ``ComposedDpEvent([*fixed_events, GaussianDpEvent(z)])`` is (epsilon, delta − reserved_delta)-DP
    under the PLD accountant of :func:`dpmtv.privacy.events.make_accountant`. ``reserved_delta``
    (in ``[0, delta/2]``) is what a sampler keeps for its own deviation from the continuous
    Gaussian (:meth:`dpmtv.privacy.noise.NoiseSampler.reserved_delta`); the range check applies
    to the target ``delta``.

    ``dp_accounting.calibrate_dp_mechanism`` (Brent's method) finds ``z`` within ``tol`` of the
    optimum from either side; we add ``tol`` and then re-check with the accountant, growing ``z``
    until the accounted epsilon is <= the target, so the result never overshoots.

    Raises:
        ParameterError: an invalid (epsilon, delta) or one outside the supported range
            (:func:`check_calibration_range`), or fixed events that alone spend the budget.
    """
    check_calibration_range(epsilon=epsilon, delta=delta)
    if not 0.0 <= float(reserved_delta) <= 0.5 * float(delta):
        raise ParameterError(f"reserved_delta must be in [0, delta/2], got {reserved_delta!r}")
    return _calibrate_memo(float(epsilon), float(delta) - float(reserved_delta), tuple(fixed_events))


@functools.lru_cache(maxsize=512)
def _calibrate_memo(epsilon: float, delta: float, fixed_events: tuple[dp_accounting.DpEvent, ...]) -> float:
    """The search itself, memoised: a pure function of public numbers (events are frozen and
    hashable), and a demo or sweep calibrates the same (ε, δ) for many releases."""
    fixed = list(fixed_events)
    _check_fixed_budget(fixed, epsilon=epsilon, delta=delta)
    analytic = analytic_gaussian_noise_multiplier(epsilon=epsilon, delta=delta)
    tol = _RELATIVE_TOL * analytic

    def make_event(z: float) -> dp_accounting.DpEvent:
        return _release_event(fixed, z)

    bracket = mechanism_calibration.LowerEndpointAndGuess(0.5 * analytic, analytic)
    return search_noise_multiplier(make_event, epsilon=epsilon, delta=delta, bracket=bracket, tol=tol)


def search_noise_multiplier(
    make_event: Callable[[float], dp_accounting.DpEvent],
    *,
    epsilon: float,
    delta: float,
    bracket: mechanism_calibration.BracketInterval,
    tol: float,
) -> float:
    """The smallest multiplier ``z`` in ``bracket`` (within ``tol``, rounded up) with
    ``make_event(z)`` (epsilon, delta)-DP under the PLD accountant: the one search every
    calibration in dpmtv uses (releases here, DP-ICL votes in :mod:`dpmtv.privacy.noisy_vote`).

    ``dp_accounting.calibrate_dp_mechanism`` (Brent's method) finds ``z`` within ``tol`` of the
    optimum from either side; ``tol`` is added and :func:`round_up_noise_multiplier` then grows
    ``z`` until the accountant confirms, so the result never overshoots the budget."""
    found = mechanism_calibration.calibrate_dp_mechanism(
        make_accountant, make_event, epsilon, delta, bracket_interval=bracket, tol=tol
    )
    return round_up_noise_multiplier(make_event, float(found) + tol, epsilon=epsilon, delta=delta, step=tol)


def round_up_noise_multiplier(
    make_event: Callable[[float], dp_accounting.DpEvent],
    z: float,
    *,
    epsilon: float,
    delta: float,
    step: float,
) -> float:
    """Grow ``z`` (by ``step``, doubling) until the accountant confirms epsilon <= target (the
    no-overshoot guarantee)."""
    for _ in range(60):
        if epsilon_of(make_event(z), delta=delta) <= epsilon:
            return z
        z, step = z + step, 2 * step
    raise NumericalError(f"could not calibrate a noise multiplier for epsilon={epsilon}, delta={delta}")


def _release_event(fixed: list[dp_accounting.DpEvent], z: float) -> dp_accounting.DpEvent:
    gaussian = gaussian_release_event(noise_multiplier=z)
    return dp_accounting.ComposedDpEvent([*fixed, gaussian]) if fixed else gaussian


def _check_fixed_budget(fixed: list[dp_accounting.DpEvent], *, epsilon: float, delta: float) -> None:
    if not fixed:
        return
    spent = epsilon_of(dp_accounting.ComposedDpEvent(fixed), delta=delta)
    if not spent < epsilon:
        raise ParameterError(
            f"the fixed events alone spend epsilon = {spent:g} at delta = {delta:g}, which leaves "
            f"nothing of the target epsilon = {epsilon:g} for the release"
        )


def _is_real(value: object) -> bool:
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True
