"""Clopper–Pearson bounds and the conservative ε_lower (statistical assertions state their rates)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpmtv.audit.stats import clopper_pearson_lower, clopper_pearson_upper, epsilon_lower_bound
from dpmtv.errors import ParameterError
from dpmtv.privacy import analytic_gaussian_noise_multiplier


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (10, 10), (17, 1000), (999, 1000)])
def test_clopper_pearson_matches_scipy_exact_interval(k, n):
    """A two-sided 95% exact interval is the pair of one-sided 97.5% bounds."""
    interval = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    assert clopper_pearson_lower(k, n, alpha=0.025) == pytest.approx(interval.low, abs=1e-12)
    assert clopper_pearson_upper(k, n, alpha=0.025) == pytest.approx(interval.high, abs=1e-12)


def test_clopper_pearson_closed_forms_at_the_edges():
    assert clopper_pearson_upper(0, 100, alpha=0.025) == pytest.approx(1 - 0.025 ** (1 / 100))
    assert clopper_pearson_lower(100, 100, alpha=0.025) == pytest.approx(0.025 ** (1 / 100))
    np.testing.assert_allclose(clopper_pearson_lower(np.array([0, 100]), 100, alpha=0.1), [0.0, 0.1**0.01])


def test_perfect_separation_reaches_the_maximum_detectable_epsilon():
    n = 2000
    bound = epsilon_lower_bound(np.zeros(n), np.ones(n), delta=1e-5)
    half = n // 2
    expected = math.log((0.025 ** (1 / half) - 1e-5) / (1 - 0.025 ** (1 / half)))
    assert bound.epsilon_lower == pytest.approx(expected) == pytest.approx(bound.epsilon_max_detectable)
    assert bound.tpr == 1.0 and bound.fpr == 0.0 and math.isinf(bound.epsilon_point)


def test_threshold_is_chosen_on_held_out_data_only():
    """The selection halves are perfectly separated, the evaluation halves identically
    distributed: a bound that reused the selection data would report ε ≈ 6.2; the held-out one
    is 0 unless the two N(0,1) samples of 1000 differ by chance at the chosen threshold."""
    rng = np.random.default_rng(0)
    n = 1000
    neg = np.concatenate([np.full(n, -5.0), rng.normal(size=n)])
    pos = np.concatenate([np.full(n, 5.0), rng.normal(size=n)])
    assert epsilon_lower_bound(neg, pos, delta=1e-5).epsilon_lower < 0.3


def test_delta_is_subtracted():
    rng = np.random.default_rng(1)
    neg, pos = rng.normal(size=2000), rng.normal(3.0, 1.0, size=2000)
    assert epsilon_lower_bound(neg, pos, delta=1e-5).epsilon_lower > 1.0
    assert epsilon_lower_bound(neg, pos, delta=0.999).epsilon_lower == 0.0


def test_both_sides_are_tested():
    rng = np.random.default_rng(2)
    neg, pos = rng.normal(size=2000), rng.normal(-3.0, 1.0, size=2000)
    bound = epsilon_lower_bound(neg, pos, delta=1e-5)
    assert (bound.side, bound.positive) in {("lower", "with"), ("upper", "without")}
    assert bound.epsilon_lower > 1.0


def test_coverage_on_the_exact_gaussian_mechanism():
    """200 audits of pairs N(0, z²) vs N(1, z²), z calibrated to (1, 1e-5): the true ε is 1, so
    each audit reports ε_lower > 1 with probability <= 5%. We allow 25 of 200:
    P[Bin(200, 0.05) > 25] = 1.3e-4 is this test's false-failure rate (seeded, so deterministic)."""
    z = analytic_gaussian_noise_multiplier(epsilon=1.0, delta=1e-5)
    rng = np.random.default_rng(3)
    failures = sum(
        epsilon_lower_bound(rng.normal(0, z, 2000), rng.normal(1, z, 2000), delta=1e-5).epsilon_lower > 1.0
        for _ in range(200)
    )
    assert stats.binom.sf(25, 200, 0.05) < 2e-4
    assert failures <= 25


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"delta": 0.0}, "delta"),
        ({"confidence": 1.0}, "confidence"),
        ({"selection_fraction": 0.0}, "selection_fraction"),
    ],
)
def test_bad_parameters(kwargs, match):
    arguments = {"delta": 1e-5, **kwargs}
    with pytest.raises(ParameterError, match=match):
        epsilon_lower_bound(np.zeros(100), np.ones(100), **arguments)


def test_too_few_or_bad_scores():
    with pytest.raises(ParameterError, match="more trials"):
        epsilon_lower_bound(np.zeros(15), np.ones(15), delta=1e-5)
    with pytest.raises(ParameterError, match="NaN"):
        epsilon_lower_bound(np.array([np.nan] * 40), np.ones(40), delta=1e-5)
