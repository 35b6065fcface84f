"""The one-round private clip multiplier (dpmtv.privacy.clip_quantile.private_clip_multiplier):
its statistic, its distribution against the exponential mechanism's closed form, its
sensitivity when one chunk changes in every layer, and its event against dp-accounting's PLD."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmtv.errors import DangerousModeError, ParameterError
from dpmtv.privacy import epsilon_of
from dpmtv.privacy.clip_quantile import (
    clip_multiplier_event,
    clip_norm_candidates,
    private_clip_multiplier,
    quantile_score_sensitivity,
    quantile_scores,
)
from tests.privacy._chisquare import chisquare_pvalue

ALPHA = 1e-6  # false-failure rate of each statistical test with unseeded noise
MULTIPLIERS = clip_norm_candidates(low=1 / 16, high=16.0, count=17)
SCALES = (1.0, 4.0, 0.5)


def _ratios(norms, scales):
    """The statistic written out: each chunk's largest norm-to-scale ratio."""
    return np.array([max(n / g for n, g in zip(row, scales)) for row in norms])


def test_choice_follows_the_exponential_mechanism_over_the_largest_ratios():
    rng = np.random.default_rng(3)
    norms = rng.lognormal(0.0, 1.0, size=(30, 3)) * np.array(SCALES)
    epsilon = 0.8
    scores = quantile_scores(_ratios(norms, SCALES), candidates=MULTIPLIERS, alpha=0.5)
    logits = -epsilon * scores / (2.0 * quantile_score_sensitivity(candidates=MULTIPLIERS, alpha=0.5))
    expected = np.exp(logits - logits.max())
    expected /= expected.sum()
    draws = 3000
    index = {c: i for i, c in enumerate(MULTIPLIERS)}
    counts = np.zeros(len(MULTIPLIERS))
    sampler = np.random.default_rng()
    for _ in range(draws):
        chosen = private_clip_multiplier(
            norms, layer_scales=SCALES, candidates=MULTIPLIERS, epsilon=epsilon, rng=sampler
        )
        counts[index[chosen]] += 1
    assert chisquare_pvalue(counts, expected) > ALPHA


def test_the_opendp_sampler_gives_a_grid_value():
    norms = np.random.default_rng(4).lognormal(size=(20, 3))
    chosen = private_clip_multiplier(norms, layer_scales=SCALES, candidates=MULTIPLIERS, epsilon=1.0)
    assert chosen in MULTIPLIERS


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.floats(0.0, 50.0), min_size=3, max_size=3), min_size=1, max_size=12),
    st.integers(0, 11),
    st.lists(st.floats(0.0, 50.0), min_size=3, max_size=3),
)
def test_changing_one_chunk_in_every_layer_moves_every_score_by_at_most_the_sensitivity(rows, index, new):
    norms = np.array(rows)
    changed = norms.copy()
    changed[index % len(rows)] = new
    before = quantile_scores(_ratios(norms, SCALES), candidates=MULTIPLIERS, alpha=0.5)
    after = quantile_scores(_ratios(changed, SCALES), candidates=MULTIPLIERS, alpha=0.5)
    assert np.max(np.abs(before - after)) <= quantile_score_sensitivity(candidates=MULTIPLIERS, alpha=0.5)


def test_without_noise_the_multiplier_leaves_the_quantile_share_of_chunks_unclipped_in_every_layer():
    rng = np.random.default_rng(5)
    norms = rng.lognormal(0.0, 0.3, size=(2001, 3)) * np.array(SCALES)
    fine = clip_norm_candidates(low=0.1, high=10.0, count=400)
    c = private_clip_multiplier(
        norms, layer_scales=SCALES, candidates=fine, epsilon=math.inf, allow_non_private=True, alpha=0.25
    )
    unclipped = np.all(norms <= c * np.array(SCALES), axis=1).mean()
    assert unclipped == pytest.approx(0.25, abs=0.02)
    with pytest.raises(DangerousModeError, match="allow_non_private"):
        private_clip_multiplier(norms, layer_scales=SCALES, candidates=fine, epsilon=math.inf)


def test_event_is_one_pure_round():
    event = clip_multiplier_event(epsilon=0.3)
    pure = pld_lib.from_privacy_parameters(
        common.DifferentialPrivacyParameters(0.3, 0.0), value_discretization_interval=1e-3
    )
    for delta in (1e-9, 1e-5, 1e-2):
        assert epsilon_of(event, delta=delta) == pytest.approx(pure.get_epsilon_for_delta(delta), rel=1e-9)


@pytest.mark.parametrize("scales", [(1.0, 2.0), (1.0, 0.0, 2.0), (1.0, math.nan, 2.0)])
def test_bad_layer_scales_are_named(scales):
    with pytest.raises(ParameterError, match="layer_scales"):
        private_clip_multiplier(
            np.ones((4, 3)),
            layer_scales=scales,
            candidates=MULTIPLIERS,
            epsilon=1.0,
            rng=np.random.default_rng(0),
        )
