"""The floating-point-safe OpenDP sampler at the analytic Gaussian's σ.

OpenDP samples an exact discrete Gaussian on the grid 2^-1074 (every float64 is a grid point, so
rounding adds no sensitivity). Its release is accounted directly: the discrete Gaussian is within
total variation d/s² of a rounded continuous Gaussian (s = σ in grid units), so the continuous
Gaussian's accounting holds with (1 + e^ε)·d/s² added to δ (:mod:`dpmtv.privacy.noise`).
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy.special import ndtr

from dpmtv.errors import NumericalError
from dpmtv.privacy import (
    OpenDPGaussianSampler,
    epsilon_of,
    opendp_noise_std,
    plan_gaussian_release,
)
from dpmtv.privacy import noise as noise_module
from dpmtv.privacy.calibrate import SUPPORTED_DELTA, SUPPORTED_EPSILON

BUDGETS = [(e, d) for e in (*SUPPORTED_EPSILON, 0.1, 1.0, 4.0) for d in (*SUPPORTED_DELTA, 1e-5)]


def test_opendp_release_is_within_one_percent_of_the_analytic_gaussian():
    plan = plan_gaussian_release(l2_sensitivity=0.2, epsilon=1.0, delta=1e-5, sampler=OpenDPGaussianSampler())
    assert plan.noise_std <= 1.01 * plan.noise_std_analytic  # was 4.045 / 3.7306 = 1.084
    assert plan.noise_std_sampler_map == pytest.approx(0.2 * 4.045130358292445, rel=1e-6)  # zCDP σ kept


@pytest.mark.parametrize(("epsilon", "delta"), BUDGETS)
def test_never_looser_than_dp_accounting_nor_the_zcdp_map(epsilon, delta):
    """σ >= dp-accounting's analytic σ for (ε, δ) (the continuous mechanism needs at least that),
    and σ <= the σ of OpenDP's own zCDP map (which certifies the same sampler more loosely)."""
    plan = plan_gaussian_release(
        l2_sensitivity=1.0, epsilon=epsilon, delta=delta, sampler=OpenDPGaussianSampler()
    )
    assert plan.noise_std >= dp_accounting.get_sigma_gaussian(epsilon, delta)
    assert plan.noise_std <= opendp_noise_std(l2_sensitivity=1.0, epsilon=epsilon, delta=delta)
    assert plan.noise_std <= plan.noise_std_analytic * (1 + 1e-4)
    # the accountant at the δ left after the sampler's reserve confirms ε
    reserved = noise_module.OpenDPGaussianSampler().reserved_delta(delta=delta)
    assert 0 < reserved <= delta * 2.0**-40
    assert epsilon_of(plan.event, delta=delta - reserved) <= epsilon
    # and the reserve covers the discretisation's δ for any vector of up to 2^40 values
    bound_log2 = noise_module.discrete_gaussian_delta_log2(noise_std=plan.noise_std, epsilon=epsilon)
    assert bound_log2 <= math.log2(reserved)


def _discrete_gaussian_tv_to_rounded_gaussian(s: float) -> float:
    """Exact TV between N_Z(0, s²) and round(N(0, s²)) on the integers (sums to |k| <= 40 s)."""
    k = np.arange(-math.ceil(40 * s), math.ceil(40 * s) + 1, dtype=np.float64)
    discrete = np.exp(-(k**2) / (2 * s * s))
    discrete /= discrete.sum()
    rounded = ndtr((k + 0.5) / s) - ndtr((k - 0.5) / s)
    return 0.5 * float(np.abs(discrete - rounded).sum())


@pytest.mark.parametrize("s", [1.0, 1.5, 2.0, 4.0, 8.0, 30.0])
def test_the_lemma_tv_at_most_one_over_s_squared(s):
    """The lemma the accounting rests on, checked where it can be computed: TV <= 1/s² (the
    derivation gives 0.06/s²)."""
    tv = _discrete_gaussian_tv_to_rounded_gaussian(s)
    assert tv <= 1.0 / s**2
    assert tv <= 0.06 / s**2 + 1e-15


def test_opendp_grid_is_every_float_so_rounding_adds_no_sensitivity():
    """At k = -1074 OpenDP's zCDP map is exactly Δ²/(2σ²): no rounding inflation of Δ."""
    measurement = noise_module._opendp_gaussian(2.0)
    for sensitivity in (1e-6, 0.3, 5.0):
        assert measurement.map(sensitivity) == pytest.approx(sensitivity**2 / 8.0, rel=1e-12)


def test_a_std_too_small_for_the_reserve_is_refused():
    """At σ = 2^-1030 (s = 2^44 grid steps) the term (1 + e)·2^40/2^88 exceeds the reserve δ·2^-40."""
    sampler = OpenDPGaussianSampler()
    reserved = sampler.reserved_delta(delta=1e-5)
    sampler.check_reserved_delta(noise_std=1e-300, epsilon=1.0, reserved_delta=reserved)  # still fine
    with pytest.raises(NumericalError, match="too small for the discrete Gaussian"):
        sampler.check_reserved_delta(noise_std=2.0**-1030, epsilon=1.0, reserved_delta=reserved)
