"""DP-ICL vote aggregation: sensitivity, events, golden composition, calibration, and the noisy
argmax's output distribution (statistical tests at a stated false-failure rate)."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant, privacy_loss_distribution
from dp_accounting.rdp import rdp_privacy_accountant
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from dpmtv.errors import ParameterError
from dpmtv.privacy import SeededGaussianSampler, analytic_gaussian_noise_multiplier
from dpmtv.privacy.noisy_vote import (
    answer_vote_counts,
    calibrate_per_query_noise,
    dp_icl_epsilon,
    dp_icl_event,
    noisy_argmax,
    noisy_vote_event,
    vote_l2_sensitivity,
    votes_by_candidate,
)

ALPHA = 1e-6  # false-failure rate of each statistical test below
SIGMA_1 = 3.7306316348159374  # analytic Gaussian multiplier for (1, 1e-5), Balle & Wang


def test_sensitivity_is_sqrt2_under_both_relations():
    assert vote_l2_sensitivity("replace-one") == vote_l2_sensitivity("add-remove-one") == math.sqrt(2)
    with pytest.raises(ParameterError, match="unknown neighbouring relation"):
        vote_l2_sensitivity("swap")


def test_replacing_one_chunks_vote_moves_the_histogram_by_at_most_sqrt2():
    candidates = ("a", "b", "c")
    before = answer_vote_counts(["a", "a", "b", "zzz"], candidates)
    np.testing.assert_array_equal(before, [2, 1, 0])  # "zzz" is outside the candidates: dropped
    for new_vote in ["b", "c", "zzz", "a"]:
        after = answer_vote_counts(["a", new_vote, "b", "zzz"], candidates)  # chunk 1 changed its vote
        assert np.linalg.norm(after - before) <= math.sqrt(2) + 1e-12
    np.testing.assert_array_equal(votes_by_candidate({"a": 2, "q": 5}, candidates), [2, 0, 0])
    with pytest.raises(ParameterError, match="without duplicates"):
        answer_vote_counts(["a"], ("a", "a"))


def test_events_are_unit_sensitivity_gaussians_self_composed():
    assert noisy_vote_event(noise_std=3.0) == dp_accounting.GaussianDpEvent(3.0 / math.sqrt(2))
    event = dp_icl_event(noise_std=3.0, num_queries=7)
    assert event == dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(3.0 / math.sqrt(2)), 7)
    with pytest.raises(ParameterError, match="num_queries"):
        dp_icl_event(noise_std=3.0, num_queries=0)
    with pytest.raises(ParameterError, match="noise_std"):
        noisy_vote_event(noise_std=0.0)


@pytest.mark.parametrize(("noise_std", "num_queries"), [(5.0, 1), (20.0, 10), (60.0, 100), (400.0, 10_000)])
def test_composition_matches_independent_dp_accounting_routes(noise_std, num_queries):
    delta = 1e-5
    ours = dp_icl_epsilon(noise_std=noise_std, delta=delta, num_queries=num_queries)
    # route 1: a PLD accountant built here, composing the event count times
    accountant = pld_privacy_accountant.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(dp_accounting.GaussianDpEvent(noise_std / math.sqrt(2)), num_queries)
    assert ours == pytest.approx(accountant.get_epsilon(delta), rel=1e-3)
    # route 2: the PLD of the mechanism with sensitivity √2 stated directly, not normalised
    pld = privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=noise_std, sensitivity=math.sqrt(2), value_discretization_interval=1e-4
    ).self_compose(num_queries)
    assert ours == pytest.approx(pld.get_epsilon_for_delta(delta), rel=1e-3)
    # route 3: RDP is a looser upper bound
    rdp = rdp_privacy_accountant.RdpAccountant()
    rdp.compose(dp_accounting.GaussianDpEvent(noise_std / math.sqrt(2)), num_queries)
    assert ours <= rdp.get_epsilon(delta) + 1e-9


@pytest.mark.parametrize("num_queries", [1, 4, 100, 10_000])
def test_calibration_golden_values(num_queries):
    # Gaussian self-composition is again Gaussian, so the per-query multiplier for Q queries at
    # (1, 1e-5) is √Q·σ₁(1, 1e-5) (test-side cross-check only; the library uses the accountant)
    sigma = calibrate_per_query_noise(total_epsilon=1.0, delta=1e-5, num_queries=num_queries)
    assert sigma / math.sqrt(2) == pytest.approx(math.sqrt(num_queries) * SIGMA_1, rel=1e-3)
    assert dp_icl_epsilon(noise_std=sigma, delta=1e-5, num_queries=num_queries) <= 1.0
    assert analytic_gaussian_noise_multiplier(epsilon=1.0, delta=1e-5) == pytest.approx(SIGMA_1, rel=1e-12)


def test_calibrated_noise_grows_with_the_number_of_queries():
    sigmas = [calibrate_per_query_noise(total_epsilon=2.0, delta=1e-6, num_queries=q) for q in (1, 10, 1000)]
    assert sigmas[0] < sigmas[1] < sigmas[2]
    with pytest.raises(ParameterError, match="epsilon"):
        calibrate_per_query_noise(total_epsilon=0.0, delta=1e-5, num_queries=3)


@settings(max_examples=15, deadline=None)
@given(
    log_epsilon=st.floats(math.log(0.1), math.log(10.0)),
    log10_delta=st.floats(-9.0, -3.0),
    num_queries=st.integers(1, 5000),
)
def test_calibration_never_overshoots(log_epsilon, log10_delta, num_queries):
    epsilon, delta = math.exp(log_epsilon), 10.0**log10_delta
    sigma = calibrate_per_query_noise(total_epsilon=epsilon, delta=delta, num_queries=num_queries)
    assert dp_icl_epsilon(noise_std=sigma, delta=delta, num_queries=num_queries) <= epsilon + 1e-9


def _win_probabilities(counts: np.ndarray, sigma: float) -> np.ndarray:
    """P(i = argmax(counts + N(0, σ²I))) = ∫ φ(x) Π_{j≠i} Φ(x + (c_i − c_j)/σ) dx."""

    def integrand(x, i):
        others = np.delete(counts, i)
        return stats.norm.pdf(x) * np.prod(stats.norm.cdf(x + (counts[i] - others) / sigma))

    return np.array([integrate.quad(integrand, -12, 12, args=(i,))[0] for i in range(len(counts))])


def test_noisy_argmax_two_candidates_binomial():
    counts, sigma, draws = np.array([3.0, 1.0]), 2.0, 20_000
    sampler = SeededGaussianSampler(11)
    wins = sum(noisy_argmax(counts, noise_std=sigma, sampler=sampler) == 0 for _ in range(draws))
    p = stats.norm.cdf((3.0 - 1.0) / (sigma * math.sqrt(2)))  # P(N(2, 2σ²) > 0) = 0.7602…
    assert p == pytest.approx(0.760250, abs=1e-6)
    assert stats.binomtest(int(wins), draws, p).pvalue > ALPHA


@pytest.mark.parametrize("counts", [[5.0, 4.0, 0.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
def test_noisy_argmax_matches_report_noisy_max_distribution(counts):
    counts, sigma, draws = np.array(counts), 1.5, 20_000
    expected = _win_probabilities(counts, sigma)
    assert expected.sum() == pytest.approx(1.0, abs=1e-6)
    sampler = SeededGaussianSampler(5)
    observed = np.bincount(
        [noisy_argmax(counts, noise_std=sigma, sampler=sampler) for _ in range(draws)], minlength=len(counts)
    )
    assert stats.chisquare(observed, expected * draws).pvalue > ALPHA
