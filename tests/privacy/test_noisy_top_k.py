"""Private selection maths: vote sensitivity, noisy top-k vs the exponential mechanism's closed
form, the accounting event, and the composed budget."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import dp_accounting
import numpy as np
import opendp.prelude as dp
import pytest
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpmtv.errors import DangerousModeError, ParameterError
from dpmtv.privacy import delta_of, epsilon_of, event_from_json, event_to_json, make_sampler
from dpmtv.privacy.noisy_top_k import (
    head_vote_counts,
    noisy_top_k,
    noisy_top_k_event,
    noisy_top_k_scale,
    parallel_halves,
    plan_private_selection,
    split_budget,
)
from dpmtv.privacy.release import plan_gaussian_release

ALPHA = 1e-6  # false-failure rate of each statistical test with unseeded noise


# ---- votes ---------------------------------------------------------------------------------------
def test_histogram_counts_votes():
    counts = head_vote_counts([(0, 2), (2,), ()], num_candidates=4, max_votes_per_chunk=2)
    assert counts.tolist() == [1, 0, 2, 0]


@pytest.mark.parametrize(
    ("votes", "message"),
    [([(0, 1, 2)], "at most 2 distinct"), ([(1, 1)], "at most 2 distinct"), ([(4,)], r"in \[0, 4\)")],
)
def test_histogram_refuses_votes_that_break_the_sensitivity_bound(votes, message):
    with pytest.raises(ParameterError, match=message):
        head_vote_counts(votes, num_candidates=4, max_votes_per_chunk=2)


@settings(max_examples=50, deadline=None)
@given(data=st.data(), k_prime=st.integers(1, 4), chunks=st.integers(1, 6))
def test_replacing_one_chunk_moves_each_count_by_at_most_one(data, k_prime, chunks):
    vote_set = st.lists(st.integers(0, 7), max_size=k_prime, unique=True)
    votes = data.draw(st.lists(vote_set, min_size=chunks, max_size=chunks))
    changed = list(votes)
    changed[data.draw(st.integers(0, chunks - 1))] = data.draw(vote_set)
    diff = head_vote_counts(changed, num_candidates=8, max_votes_per_chunk=k_prime) - head_vote_counts(
        votes, num_candidates=8, max_votes_per_chunk=k_prime
    )
    assert np.abs(diff).max() <= 1 and np.abs(diff).sum() <= 2 * k_prime


# ---- noisy top-k ---------------------------------------------------------------------------------
def peeling_probabilities(scores: np.ndarray, k: int, scale: float) -> dict[tuple[int, ...], float]:
    """Closed form of k rounds of the exponential mechanism P[i] ∝ exp(u_i / b), winners removed."""
    weights = np.exp(scores / scale)
    out = {}
    for outcome in itertools.permutations(range(len(scores)), k):
        remaining, p = weights.sum(), 1.0
        for index in outcome:
            p *= weights[index] / remaining
            remaining -= weights[index]
        out[outcome] = p
    return out


def chi_square_p(counts: Counter, expected: dict[tuple[int, ...], float], n: int) -> float:
    keys = sorted(expected)
    observed = np.array([counts[key] for key in keys])
    return stats.chisquare(observed, n * np.array([expected[key] for key in keys])).pvalue


def test_scale_is_two_k_over_epsilon():
    assert noisy_top_k_scale(epsilon=0.5, k=4) == pytest.approx(16.0)
    assert noisy_top_k_scale(epsilon=2.0, k=3, linf_sensitivity=2.0) == pytest.approx(6.0)


def test_seeded_frequencies_match_the_exponential_mechanism():
    scores, k, scale, n = np.array([3.0, 2.0, 0.0, 0.0]), 2, 1.0, 20_000
    rng = np.random.default_rng(7)
    epsilon = 2 * k / scale
    counts = Counter(noisy_top_k(scores, k=k, epsilon=epsilon, rng=rng) for _ in range(n))
    assert chi_square_p(counts, peeling_probabilities(scores, k, scale), n) > ALPHA


def test_opendp_frequencies_match_the_exponential_mechanism():
    """Unseeded (OS CSPRNG): fails by chance with probability ALPHA = 1e-6."""
    scores, k, scale, n = np.array([2, 1, 0]), 2, 1.0, 3_000
    counts = Counter(noisy_top_k(scores, k=k, epsilon=2 * k / scale) for _ in range(n))
    assert chi_square_p(counts, peeling_probabilities(scores.astype(float), k, scale), n) > ALPHA


def test_infinite_epsilon_is_the_exact_top_k_and_needs_the_switch():
    scores = np.array([5, 9, 1, 9, 7])
    with pytest.raises(DangerousModeError, match="allow_non_private"):
        noisy_top_k(scores, k=3, epsilon=math.inf)
    assert noisy_top_k(scores, k=3, epsilon=math.inf, allow_non_private=True) == (1, 3, 4)


def test_huge_epsilon_returns_the_exact_top_k():
    scores = np.array([40, 3, 17, 25, 0, 31])
    assert noisy_top_k(scores, k=3, epsilon=1e9) == (0, 5, 3)
    assert noisy_top_k(scores, k=3, epsilon=1e9, rng=np.random.default_rng(0)) == (0, 5, 3)


def test_k_out_of_range_is_refused():
    with pytest.raises(ParameterError, match="k must be in"):
        noisy_top_k(np.array([1, 2]), k=3, epsilon=1.0)


@pytest.mark.parametrize("k", [1, 3])
def test_scale_agrees_with_opendp_privacy_maps(k):
    """OpenDP: Gumbel top-k is k·ε₀²/8-zCDP, its exponential-noise variant 2k/b-DP (ε₀ = 2/b)."""
    dp.enable_features("contrib")
    epsilon = 1.5
    scale = noisy_top_k_scale(epsilon=epsilon, k=k)
    domain, metric = dp.vector_domain(dp.atom_domain(T=int)), dp.linf_distance(T=int, monotonic=False)
    zcdp = dp.m.make_noisy_top_k(domain, metric, dp.zero_concentrated_divergence(), k=k, scale=scale)
    pure = dp.m.make_noisy_top_k(domain, metric, dp.max_divergence(), k=k, scale=scale)
    assert zcdp.map(1) == pytest.approx(k * (epsilon / k) ** 2 / 8, rel=1e-9)
    assert pure.map(1) == pytest.approx(epsilon, rel=1e-9)


# ---- the accounting event ------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon", [0.05, 0.5, 2.0])
def test_one_round_event_is_exactly_randomized_response(epsilon):
    """δ(ε') of an ε-DP dominating pair RR_ε: (e^ε − e^ε')/(1 + e^ε) for ε' < ε, 0 above."""
    event = noisy_top_k_event(epsilon=epsilon, k=1)
    for fraction in (0.0, 0.3, 0.9, 1.01):
        target = fraction * epsilon
        expected = max(0.0, (math.exp(epsilon) - math.exp(target)) / (1 + math.exp(epsilon)))
        assert delta_of(event, epsilon=target) == pytest.approx(expected, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize(("epsilon", "k"), [(1.0, 8), (0.3, 3), (4.0, 10)])
def test_k_rounds_are_epsilon_pure_and_match_an_independent_pld(epsilon, k):
    """Also: never above the pure bound k·ε₀, up to the accountant's pessimistic 1e-3 grid."""
    event = noisy_top_k_event(epsilon=epsilon, k=k)
    assert epsilon_of(event, delta=1e-12) <= epsilon + k * 1e-3
    rr = pld_lib.from_privacy_parameters(
        common.DifferentialPrivacyParameters(epsilon / k, 0.0), value_discretization_interval=1e-3
    ).self_compose(k)
    assert epsilon_of(event, delta=1e-5) == pytest.approx(rr.get_epsilon_for_delta(1e-5), rel=1e-9)


def test_event_serialises():
    data = event_to_json(noisy_top_k_event(epsilon=1.0, k=4))
    assert data["class_name"] == "SelfComposedDpEvent" and data["count"] == 4
    assert data["event"] == {
        "module_name": "dp_accounting.dp_event",
        "class_name": "DiscreteLaplaceDpEvent",
        "noise_parameter": 0.25,
        "sensitivity": 1,
    }


def test_event_reads_back_for_the_ledger():
    event = noisy_top_k_event(epsilon=1.0, k=4)
    assert event_from_json(event_to_json(event)) == event


# ---- budget split and composition ----------------------------------------------------------------
def _release(plan, epsilon, delta):
    return plan_gaussian_release(
        l2_sensitivity=0.1,
        epsilon=epsilon,
        delta=delta,
        sampler=make_sampler("csprng-numpy"),
        fixed_events=plan.fixed_events,
    )


def test_split_budget():
    budget = split_budget(total_epsilon=2.0, total_delta=1e-6, selection_fraction=0.25)
    assert (budget.epsilon_selection, budget.epsilon, budget.delta) == (0.5, 2.0, 1e-6)
    with pytest.raises(ParameterError, match="selection_fraction"):
        split_budget(total_epsilon=1.0, total_delta=1e-6, selection_fraction=1.0)
    with pytest.raises(ParameterError, match="epsilon"):
        split_budget(total_epsilon=-1.0, total_delta=1e-6, selection_fraction=0.5)


def test_sequential_plan_composes_to_the_total_as_an_independent_pld_says():
    plan = plan_private_selection(total_epsilon=1.0, total_delta=1e-5, k=4, selection_fraction=0.25)
    assert plan.epsilon_selection == 0.25 and plan.noise_scale == pytest.approx(32.0)
    release = _release(plan, 1.0, 1e-5)
    selection = pld_lib.from_privacy_parameters(
        common.DifferentialPrivacyParameters(0.25 / 4, 0.0), value_discretization_interval=1e-3
    ).self_compose(4)
    gaussian = pld_lib.from_gaussian_mechanism(release.noise_multiplier, value_discretization_interval=1e-3)
    independent = selection.compose(gaussian).get_epsilon_for_delta(1e-5)
    assert release.epsilon_spent == pytest.approx(independent, rel=1e-9)
    assert 1.0 - 1e-4 < release.epsilon_spent <= 1.0
    assert isinstance(release.event, dp_accounting.ComposedDpEvent)
    parallel = plan_private_selection(total_epsilon=1.0, total_delta=1e-5, k=4, composition="parallel")
    assert release.noise_multiplier > _release(parallel, 1.0, 1e-5).noise_multiplier  # selection is paid for


def test_parallel_plan_gives_both_the_whole_budget():
    plan = plan_private_selection(total_epsilon=2.0, total_delta=1e-6, k=5, composition="parallel")
    assert plan.fixed_events == () and plan.epsilon_selection == 2.0
    selection, release = parallel_halves(7)
    assert selection.tolist() == [0, 2, 4, 6] and release.tolist() == [1, 3, 5]
    with pytest.raises(ParameterError, match="composition"):
        plan_private_selection(total_epsilon=1.0, total_delta=1e-6, k=2, composition="mixed")


@settings(max_examples=8, deadline=None)
@given(
    epsilon=st.floats(0.2, 8.0),
    delta=st.sampled_from([1e-7, 1e-5, 1e-3]),
    fraction=st.floats(0.05, 0.9),
    k=st.integers(1, 16),
)
def test_composition_never_exceeds_the_target(epsilon, delta, fraction, k):
    plan = plan_private_selection(total_epsilon=epsilon, total_delta=delta, k=k, selection_fraction=fraction)
    release = _release(plan, epsilon, delta)
    assert release.epsilon_spent <= epsilon
    assert epsilon_of(dp_accounting.ComposedDpEvent([*plan.fixed_events, release.event]), delta=delta) >= 0
