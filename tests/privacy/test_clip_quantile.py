"""The private clip-norm quantile: scores against their closed form, the sensitivity by brute
force, the noise scale against OpenDP's own privacy maps, the output distribution against the
exponential mechanism's closed form, and the accounting event."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import opendp.prelude as dp
import pytest
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmtv.errors import DangerousModeError, ParameterError
from dpmtv.privacy import epsilon_of
from dpmtv.privacy.clip_quantile import (
    clip_norm_candidates,
    clip_quantile_event,
    clip_quantile_scale,
    private_clip_norms,
    quantile_score_sensitivity,
    quantile_scores,
)
from tests.privacy._chisquare import chisquare_pvalue

ALPHA = 1e-6  # false-failure rate of each statistical test with unseeded noise
GRID = clip_norm_candidates(low=0.1, high=100.0, count=16)


def closed_form_scores(norms, grid, alpha):
    """``|(1−α)·#{n < c} − α·#{n > c}|·den`` for ``α = num/den``."""
    frac = Fraction(alpha).limit_denominator(1000)
    num, den = frac.numerator, frac.denominator
    norms = np.asarray(norms)
    return np.array([abs((den - num) * int((norms < c).sum()) - num * int((norms > c).sum())) for c in grid])


def exponential_mechanism(scores, epsilon, linf_sensitivity):
    logits = -epsilon * np.asarray(scores, dtype=np.float64) / (2.0 * linf_sensitivity)
    p = np.exp(logits - logits.max())
    return p / p.sum()


@pytest.mark.parametrize("alpha", [0.5, 0.25, 0.75])
def test_scores_are_the_closed_form_quantile_score(alpha):
    norms = np.random.default_rng(0).lognormal(1.0, 1.0, size=37)
    np.testing.assert_array_equal(
        quantile_scores(norms, candidates=GRID, alpha=alpha), closed_form_scores(norms, GRID, alpha)
    )


@settings(max_examples=60, deadline=None)
@given(
    norms=st.lists(st.floats(0.0, 200.0), min_size=1, max_size=12),
    index=st.integers(0, 11),
    new=st.floats(0.0, 200.0),
    alpha=st.sampled_from([0.5, 0.25, 0.9]),
)
def test_changing_one_chunk_moves_every_score_by_at_most_the_sensitivity(norms, index, new, alpha):
    changed = list(norms)
    changed[index % len(norms)] = new
    diff = quantile_scores(changed, candidates=GRID, alpha=alpha) - quantile_scores(
        norms, candidates=GRID, alpha=alpha
    )
    assert np.abs(diff).max() <= quantile_score_sensitivity(candidates=GRID, alpha=alpha)


def test_sensitivity_is_attained_for_the_median():
    # Moving one norm from below every candidate to above every one changes lt by -1, gt by +1.
    before, after = [0.0, 0.0, 0.0], [0.0, 0.0, 1000.0]
    diff = quantile_scores(after, candidates=GRID, alpha=0.5) - quantile_scores(
        before, candidates=GRID, alpha=0.5
    )
    assert np.abs(diff).max() == quantile_score_sensitivity(candidates=GRID, alpha=0.5) == 2


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 3.0])
def test_scale_matches_opendps_own_privacy_maps(epsilon):
    sensitivity = quantile_score_sensitivity(candidates=GRID, alpha=0.5)
    scale = clip_quantile_scale(epsilon=epsilon, linf_sensitivity=sensitivity)
    dp.enable_features("contrib")
    scores = dp.t.make_quantile_score_candidates(
        dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.symmetric_distance(), list(GRID), alpha=0.5
    )
    pure = scores >> dp.m.then_noisy_max(dp.max_divergence(), scale=scale, negate=True)
    gumbel = scores >> dp.m.then_noisy_max(dp.zero_concentrated_divergence(), scale=scale, negate=True)
    assert math.isclose(pure.map(2), epsilon, rel_tol=1e-9)
    assert math.isclose(gumbel.map(2), epsilon**2 / 8, rel_tol=1e-9)  # bounded range: ρ = ε²/8


@pytest.mark.parametrize("sampler", ["numpy", "opendp"])
def test_choice_follows_the_exponential_mechanism(sampler):
    norms = np.random.default_rng(1).lognormal(1.0, 1.0, size=(40, 1))
    epsilon = 0.6
    scores = quantile_scores(norms[:, 0], candidates=GRID, alpha=0.5)
    expected = exponential_mechanism(scores, epsilon, quantile_score_sensitivity(candidates=GRID, alpha=0.5))
    draws = 3000
    rng = np.random.default_rng() if sampler == "numpy" else None
    index = {c: i for i, c in enumerate(GRID)}
    counts = np.zeros(len(GRID))
    for _ in range(draws):
        counts[index[private_clip_norms(norms, candidates=GRID, epsilon=epsilon, rng=rng)[0]]] += 1
    assert chisquare_pvalue(counts, expected) > ALPHA


def test_large_epsilon_picks_the_sample_quantile_and_inf_needs_the_switch():
    rng = np.random.default_rng(2)
    norms = rng.lognormal(1.0, 0.5, size=(1001, 3)) * np.array([1.0, 5.0, 20.0])
    fine = clip_norm_candidates(low=0.1, high=500.0, count=200)
    exact = private_clip_norms(norms, candidates=fine, epsilon=math.inf, allow_non_private=True)
    for layer, chosen in enumerate(exact):
        i = fine.index(chosen)
        median = float(np.median(norms[:, layer]))
        assert fine[max(i - 1, 0)] <= median <= fine[min(i + 1, len(fine) - 1)]
    noisy = private_clip_norms(norms, candidates=fine, epsilon=300.0, rng=rng)
    assert all(abs(fine.index(a) - fine.index(b)) <= 1 for a, b in zip(noisy, exact))
    with pytest.raises(DangerousModeError, match="allow_non_private"):
        private_clip_norms(norms, candidates=fine, epsilon=math.inf)


def test_event_is_the_composition_of_one_pure_round_per_layer():
    epsilon, layers = 0.4, 4
    event = clip_quantile_event(epsilon=epsilon, num_layers=layers)
    composed = pld_lib.from_privacy_parameters(
        common.DifferentialPrivacyParameters(epsilon / layers, 0.0), value_discretization_interval=1e-3
    ).self_compose(layers)
    for delta in (1e-9, 1e-5, 1e-2):
        assert epsilon_of(event, delta=delta) == pytest.approx(
            composed.get_epsilon_for_delta(delta), rel=1e-9
        )
    assert epsilon_of(event, delta=1e-12) <= epsilon * (1 + 1e-3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"candidates": (1.0,)}, "candidates"),
        ({"candidates": (2.0, 1.0)}, "strictly increasing"),
        ({"alpha": 1.0}, "quantile"),
        ({"epsilon": 0.0}, "epsilon"),
    ],
)
def test_bad_parameters_are_named(kwargs, message):
    args = {"candidates": GRID, "epsilon": 1.0, "alpha": 0.5, "rng": np.random.default_rng(0)} | kwargs
    with pytest.raises(ParameterError, match=message):
        private_clip_norms(np.ones((3, 2)), **args)
