"""DP-ICL's Poisson-subsampled ensembles: the event, its epsilon against dp-accounting's own
routes, calibration without overshoot, the coupling behind Δ = √2, and the claim that at an
equal number of prompts the subsampled ensemble beats the capped full partition."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant, privacy_loss_distribution
from dp_accounting.rdp import rdp_privacy_accountant

from dpmtv.errors import ParameterError
from dpmtv.eval.dp_icl import ensemble_from_draws, poisson_ensemble, subsampled_ensembles
from dpmtv.privacy import SeededGaussianSampler
from dpmtv.privacy.noisy_vote import (
    calibrate_per_query_noise,
    calibrate_subsampled_query_noise,
    noisy_argmax,
    subsampled_dp_icl_epsilon,
    subsampled_dp_icl_event,
    subsampled_vote_event,
)

ALPHA = 1e-6  # false-failure rate of the statistical test below


def test_event_is_a_poisson_sampled_unit_sensitivity_gaussian_self_composed():
    assert subsampled_vote_event(
        noise_std=3.0, sampling_probability=0.1
    ) == dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(3.0 / math.sqrt(2)))
    event = subsampled_dp_icl_event(noise_std=3.0, sampling_probability=0.1, num_queries=5)
    assert event == dp_accounting.SelfComposedDpEvent(
        subsampled_vote_event(noise_std=3.0, sampling_probability=0.1), 5
    )
    for bad in (0.0, 1.5, math.nan):
        with pytest.raises(ParameterError, match="sampling_probability"):
            subsampled_vote_event(noise_std=3.0, sampling_probability=bad)


@pytest.mark.parametrize(
    ("noise_std", "q", "num_queries"), [(2.0, 0.03125, 1), (3.0, 0.125, 30), (20.0, 0.25, 1000)]
)
def test_epsilon_matches_dp_accounting_directly(noise_std, q, num_queries):
    delta = 1e-5
    ours = subsampled_dp_icl_epsilon(
        noise_std=noise_std, sampling_probability=q, delta=delta, num_queries=num_queries
    )
    # route 1: dp-accounting's PLD accountant, fed the event built here, composed count times
    accountant = pld_privacy_accountant.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    base = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(noise_std / math.sqrt(2)))
    accountant.compose(base, num_queries)
    assert ours == pytest.approx(accountant.get_epsilon(delta), rel=2e-3)
    # route 2: the subsampled Gaussian PLD with sensitivity √2 stated directly (finer grid)
    pld = privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=noise_std,
        sensitivity=math.sqrt(2),
        sampling_prob=q,
        value_discretization_interval=1e-4,
    ).self_compose(num_queries)
    assert ours == pytest.approx(pld.get_epsilon_for_delta(delta), rel=2e-3)
    # route 3: RDP is a looser upper bound
    rdp = rdp_privacy_accountant.RdpAccountant()
    rdp.compose(base, num_queries)
    assert ours <= rdp.get_epsilon(delta) + 1e-9
    # amplification: never worse than the un-subsampled vote
    assert (
        ours
        <= subsampled_dp_icl_epsilon(
            noise_std=noise_std, sampling_probability=1.0, delta=delta, num_queries=num_queries
        )
        + 1e-9
    )


@pytest.mark.parametrize(("num_queries", "q"), [(1, 0.0625), (100, 0.0625), (10_000, 0.25)])
def test_calibration_never_overshoots_and_is_tight(num_queries, q):
    sigma = calibrate_subsampled_query_noise(
        total_epsilon=1.0, delta=1e-5, num_queries=num_queries, sampling_probability=q
    )
    spent = subsampled_dp_icl_epsilon(
        noise_std=sigma, sampling_probability=q, delta=1e-5, num_queries=num_queries
    )
    assert spent <= 1.0 and spent == pytest.approx(1.0, rel=1e-2)
    assert sigma < calibrate_per_query_noise(total_epsilon=1.0, delta=1e-5, num_queries=num_queries)


def test_adding_a_record_changes_at_most_the_one_prompt_it_lands_in():
    """The coupling of the Δ = √2 derivation, on the real ensemble builder: the neighbour
    without record r shares every other record's draws; exactly the prompt r joined differs
    (by r alone), or nothing when r was not sampled."""
    n, prompts, q = 200, 8, 0.2
    for seed in range(30):
        draws = np.random.default_rng(seed).random((n, 3))
        removed = (7 * seed) % n
        keep = np.arange(n) != removed
        full = ensemble_from_draws(draws, num_prompts=prompts, sampling_probability=q)
        neighbour = ensemble_from_draws(
            draws[keep], num_prompts=prompts, sampling_probability=q, record_ids=np.arange(n)[keep]
        )
        changed = [p for p in range(prompts) if not np.array_equal(full[p], neighbour[p])]
        assert len(changed) <= 1
        assert len(changed) == (draws[removed, 0] < q)
        for p in changed:
            assert list(full[p][full[p] != removed]) == list(neighbour[p])


def test_the_sampling_rate_is_public_and_does_not_depend_on_n():
    """Issue 23.4: q was M·S/N, a function of the private N under add-remove-one. Now it is the
    given public rate at N and N + 1 alike."""
    rates = {
        n: subsampled_ensembles(n, 3, shots=4, num_prompts=5, sampling_probability=0.5, seed=0)
        for n in (20, 21, 2000)
    }
    assert {q for q, _ in rates.values()} == {0.5}
    sampled = sum(len(p) for ensemble in rates[2000][1] for p in ensemble)  # Binomial(6000, 0.5)
    assert abs(sampled - 3000) < 6 * math.sqrt(6000 * 0.25)  # 6 sd: false-failure rate < 1e-8


def test_poisson_ensemble_sizes_and_rate():
    q = 0.125
    rng = np.random.default_rng(0)
    sizes = [
        sum(len(m) for m in poisson_ensemble(2048, num_prompts=64, sampling_probability=q, rng=rng))
        for _ in range(200)
    ]
    # Binomial(2048, 0.125): mean 256, sd ≈ 15.0; the mean of 200 draws within 6 sd/√200 (α < 1e-8)
    assert abs(np.mean(sizes) - 256) < 6 * math.sqrt(2048 * q * (1 - q)) / math.sqrt(200)
    ensemble = poisson_ensemble(50, num_prompts=5, sampling_probability=1.0, rng=rng)
    assert sorted(int(i) for m in ensemble for i in m) == list(range(50))  # disjoint, all present


def test_subsampled_beats_capped_at_equal_prompt_count():
    """M = 64 prompts per query, S = 4, N = 2048, Q = 1000 queries at total ε = 1, δ = 1e-5.
    Capped: the first 64 chunks of the partition, plain Gaussian votes composed 1000 times.
    Subsampled: 64 prompts from a fresh Poisson sample (q = 1/8), with amplification. Same votes
    (a 60/4 split between the right answer and one wrong one): the subsampled σ is far smaller,
    so its noisy argmax is right far more often."""
    capped = calibrate_per_query_noise(total_epsilon=1.0, delta=1e-5, num_queries=1000)
    subsampled = calibrate_subsampled_query_noise(
        total_epsilon=1.0, delta=1e-5, num_queries=1000, sampling_probability=64 * 4 / 2048
    )
    assert subsampled < capped / 3
    votes, draws = np.array([60.0, 4.0, 0.0, 0.0]), 4000

    def right(sigma, seed):
        sampler = SeededGaussianSampler(seed)
        return sum(noisy_argmax(votes, noise_std=sigma, sampler=sampler) == 0 for _ in range(draws)) / draws

    p_capped, p_subsampled = right(capped, 1), right(subsampled, 2)
    # two-proportion z-test, one-sided at α = 1e-6 (z > 4.75)
    pooled = (p_capped + p_subsampled) / 2
    z = (p_subsampled - p_capped) / math.sqrt(2 * pooled * (1 - pooled) / draws)
    assert z > 4.75, (p_capped, p_subsampled)
