"""The exponential mechanism's factor: ``P ∝ exp(ε·U)`` for scores that move together (the choice
on the release under add-remove-one), ``exp(ε·U/2)`` otherwise. Checked on the property itself
(probability ratios between neighbours, closed form), on OpenDP's own privacy map, and on the
sampled choices (χ² against the stated probabilities)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import opendp.prelude as dp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from dpmtv.privacy import event_to_json
from dpmtv.privacy.noisy_top_k import monotone_scores, noisy_top_k, noisy_top_k_scale, plan_private_selection
from tests.privacy._chisquare import chisquare_pvalue

ALPHA = 1e-6  # false-failure rate of the unseeded χ² test; the seeded one is deterministic


def _choice_probabilities(totals: np.ndarray, scale: float) -> np.ndarray:
    """The exponential mechanism that Gumbel-max with scale ``b`` samples: ``P ∝ exp(U/b)``."""
    weights = np.exp((totals - totals.max()) / scale)
    return weights / weights.sum()


def _worst_log_ratio(before: np.ndarray, after: np.ndarray, scale: float) -> float:
    """max over outcomes of |log P'[S] − log P[S]|, in log space (no underflow)."""
    log_before = before / scale - logsumexp(before / scale)
    log_after = after / scale - logsumexp(after / scale)
    return float(np.abs(log_after - log_before).max())


def test_the_factor_differs_by_relation_and_the_event_does_not():
    assert monotone_scores(utility="released-probability", neighbouring_relation="add-remove-one")
    assert not monotone_scores(utility="released-probability", neighbouring_relation="replace-one")
    assert not monotone_scores(utility="noisy-probability", neighbouring_relation="add-remove-one")
    assert not monotone_scores(utility=None, neighbouring_relation="add-remove-one")
    assert noisy_top_k_scale(epsilon=0.5, k=1, monotone=True) == pytest.approx(2.0)
    assert noisy_top_k_scale(epsilon=0.5, k=1) == pytest.approx(4.0)
    plans = {
        monotone: plan_private_selection(
            total_epsilon=1.0,
            total_delta=1e-5,
            k=1,
            max_votes_per_chunk=1,
            selection_fraction=0.1,
            monotone=monotone,
        )  # fmt: skip
        for monotone in (True, False)
    }
    assert plans[True].noise_scale == pytest.approx(plans[False].noise_scale / 2)
    assert event_to_json(plans[True].event) == event_to_json(plans[False].event)  # the same ε_sel
    assert plans[True].fixed_events == plans[False].fixed_events


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    n=st.integers(2, 8),
    epsilon=st.floats(0.01, 5.0),
)
def test_scores_that_move_together_are_epsilon_dp_at_factor_one(data, n, epsilon):
    """Adding one record adds a term in [0, 1] to every total: the ratio of every outcome's
    probability between the neighbours stays within e^±ε with P ∝ exp(ε·U)."""
    totals = np.array(data.draw(st.lists(st.floats(0.0, 200.0), min_size=n, max_size=n)))
    added = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)))
    scale = noisy_top_k_scale(epsilon=epsilon, k=1, monotone=True)
    assert _worst_log_ratio(totals, totals + added, scale) <= epsilon * (1 + 1e-9)


def test_replace_one_needs_the_factor_two():
    """Replacing a record can raise one total by 1 and lower another by 1: at factor 1 the ratio
    exceeds e^ε; at factor 2 (the replace-one scale) it does not."""
    epsilon, totals = 1.0, np.array([10.0, 10.0])
    replaced = totals + np.array([1.0, -1.0])
    assert _worst_log_ratio(totals, replaced, noisy_top_k_scale(epsilon=epsilon, k=1, monotone=True)) > 1.2
    assert _worst_log_ratio(totals, replaced, noisy_top_k_scale(epsilon=epsilon, k=1)) <= epsilon + 1e-12


def test_opendp_certifies_the_monotone_scale():
    """OpenDP's map for monotone L∞ scores: exponential-noise top-1 at scale 1/ε is ε-DP."""
    dp.enable_features("contrib")
    epsilon = 0.7
    scale = noisy_top_k_scale(epsilon=epsilon, k=1, monotone=True)
    domain, metric = (
        dp.vector_domain(dp.atom_domain(T=float, nan=False)),
        dp.linf_distance(T=float, monotonic=True),
    )
    pure = dp.m.make_noisy_top_k(domain, metric, dp.max_divergence(), k=1, scale=scale)
    assert pure.map(1.0) == pytest.approx(epsilon, rel=1e-6)


@pytest.mark.parametrize("monotone", [True, False])
def test_seeded_choices_match_the_stated_probabilities(monotone):
    """Seeded Gumbel noise: deterministic, so the χ² threshold is a fixed outcome, not a rate."""
    totals, epsilon, draws = np.array([6.0, 5.0, 4.0, 2.5, 0.0]), 0.8, 40_000
    rng = np.random.default_rng(11)
    chosen = Counter(
        noisy_top_k(totals, k=1, epsilon=epsilon, rng=rng, monotone=monotone)[0] for _ in range(draws)
    )
    counts = np.array([chosen[i] for i in range(len(totals))])
    stated = _choice_probabilities(totals, (1.0 if monotone else 2.0) / epsilon)
    assert chisquare_pvalue(counts, stated) > ALPHA
    other = _choice_probabilities(totals, (2.0 if monotone else 1.0) / epsilon)
    assert chisquare_pvalue(counts, other) < ALPHA  # the test tells the two factors apart


def test_opendp_choices_match_exp_epsilon_u():
    """OpenDP's sampler (OS CSPRNG): fails by chance with probability ALPHA = 1e-6."""
    totals, epsilon, draws = np.array([3.0, 2.0, 1.0, 0.0]), 1.0, 4_000
    chosen = Counter(noisy_top_k(totals, k=1, epsilon=epsilon, monotone=True)[0] for _ in range(draws))
    counts = np.array([chosen[i] for i in range(len(totals))])
    assert chisquare_pvalue(counts, _choice_probabilities(totals, 1.0 / epsilon)) > ALPHA
