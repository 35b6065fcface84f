"""Release plans and the one noisy release."""

from __future__ import annotations

import json
import math

import dp_accounting
import numpy as np
import pytest

from dpmtv.errors import DangerousModeError, NoiseAlreadyAddedError, ParameterError
from dpmtv.privacy import (
    ClippedSumAccumulator,
    CsprngNumpyGaussianSampler,
    NoisedVector,
    OpenDPGaussianSampler,
    SeededGaussianSampler,
    add_gaussian_noise,
    analytic_gaussian_noise_multiplier,
    calibrate_gaussian_noise_multiplier,
    clip_l2_per_layer,
    epsilon_of,
    event_from_json,
    l2_sensitivity,
    partition_replace_one,
    plan_gaussian_release,
    release_clipped_mean,
    release_clipped_sum,
    release_without_noise,
    seeded_rng,
)
from dpmtv.privacy.aggregate import summation_slack

DIMS = {0: 4, 3: 6}


def _mean(num_chunks=5, seed=0):
    rng = np.random.default_rng(seed)
    acc = ClippedSumAccumulator(DIMS)
    rows = {layer: rng.normal(size=(num_chunks, dim)) for layer, dim in DIMS.items()}
    acc.add(rows)
    # one batch: its exactly rounded sum over m·(1 + κ) (dpmtv.privacy.aggregate), bitwise
    divisor = num_chunks * (1.0 + summation_slack(num_chunks))
    expected = {layer: np.array([math.fsum(c) for c in r.T]) / divisor for layer, r in rows.items()}
    return acc.mean(num_chunks=num_chunks), expected


def test_plan_without_sampler_map():
    plan = plan_gaussian_release(
        l2_sensitivity=0.2, epsilon=1.0, delta=1e-5, sampler=CsprngNumpyGaussianSampler()
    )
    assert plan.epsilon_spent <= plan.epsilon == 1.0
    assert plan.noise_std_sampler_map is None
    assert plan.noise_std == pytest.approx(0.2 * plan.noise_multiplier, rel=1e-15)
    assert plan.noise_std / 0.2 >= plan.noise_multiplier
    assert plan.noise_std >= plan.noise_std_analytic
    assert plan.noise_std == pytest.approx(plan.noise_std_analytic, rel=1e-3)
    assert plan.sampler == "csprng-numpy" and plan.sampler_secure and plan.private


def test_plan_with_opendp_calibrates_at_delta_minus_its_reserve():
    plan = plan_gaussian_release(l2_sensitivity=0.2, epsilon=1.0, delta=1e-5, sampler=OpenDPGaussianSampler())
    assert plan.noise_std_sampler_map is not None  # recorded for reference, larger, not used
    reserved = OpenDPGaussianSampler().reserved_delta(delta=1e-5)
    calibrated = 0.2 * calibrate_gaussian_noise_multiplier(epsilon=1.0, delta=1e-5 - reserved)
    assert plan.noise_std == pytest.approx(calibrated, rel=1e-12)
    assert plan.noise_std < plan.noise_std_sampler_map
    assert plan.epsilon_spent <= 1.0
    assert plan.event == dp_accounting.GaussianDpEvent(plan.noise_multiplier)


def test_plan_with_fixed_events_accounts_the_composition():
    selection = dp_accounting.LaplaceDpEvent(4.0)
    plan = plan_gaussian_release(
        l2_sensitivity=1.0,
        epsilon=1.0,
        delta=1e-5,
        sampler=CsprngNumpyGaussianSampler(),
        fixed_events=[selection],
    )
    assert isinstance(plan.event, dp_accounting.ComposedDpEvent)
    assert plan.event.events[0] == selection
    assert epsilon_of(plan.event, delta=1e-5) == plan.epsilon_spent <= 1.0
    assert plan.noise_std > analytic_gaussian_noise_multiplier(epsilon=1.0, delta=1e-5)


def test_plan_metadata_is_json_and_round_trips_the_event():
    plan = plan_gaussian_release(
        l2_sensitivity=0.5, epsilon=2.0, delta=1e-6, sampler=CsprngNumpyGaussianSampler()
    )
    data = json.loads(json.dumps(plan.to_metadata()))
    assert event_from_json(data["event"]) == plan.event
    assert data["epsilon_spent"] <= data["epsilon"] == 2.0


def test_plan_rejects_bad_sensitivity():
    with pytest.raises(ParameterError, match="l2_sensitivity"):
        plan_gaussian_release(
            l2_sensitivity=0.0, epsilon=1.0, delta=1e-5, sampler=CsprngNumpyGaussianSampler()
        )


def test_noise_is_one_draw_over_the_concatenated_layers():
    mean, expected = _mean()
    plan = plan_gaussian_release(
        l2_sensitivity=0.1, epsilon=1.0, delta=1e-5, sampler=SeededGaussianSampler(11)
    )
    assert not plan.sampler_secure
    released = add_gaussian_noise(mean, plan=plan, sampler=SeededGaussianSampler(11))
    noise = SeededGaussianSampler(11).sample(10, noise_std=plan.noise_std)
    assert (
        isinstance(released, NoisedVector) and released.noised and not released.private
    )  # seeded: no guarantee
    np.testing.assert_allclose(released.layers[0], expected[0] + noise[:4], rtol=1e-13)
    np.testing.assert_allclose(released.layers[3], expected[3] + noise[4:], rtol=1e-13)
    assert not released.layers[0].flags.writeable
    assert released.plan is plan


def test_noise_only_once():
    mean, _ = _mean()
    sampler = CsprngNumpyGaussianSampler()
    plan = plan_gaussian_release(l2_sensitivity=0.1, epsilon=1.0, delta=1e-5, sampler=sampler)
    released = add_gaussian_noise(mean, plan=plan, sampler=sampler)
    assert mean.consumed
    with pytest.raises(NoiseAlreadyAddedError):
        add_gaussian_noise(mean, plan=plan, sampler=sampler)
    with pytest.raises(NoiseAlreadyAddedError):
        add_gaussian_noise(released, plan=plan, sampler=sampler)
    with pytest.raises(NoiseAlreadyAddedError):
        release_without_noise(mean, allow_non_private=True)


def test_sampler_must_match_plan():
    mean, _ = _mean()
    plan = plan_gaussian_release(
        l2_sensitivity=0.1, epsilon=1.0, delta=1e-5, sampler=CsprngNumpyGaussianSampler()
    )
    with pytest.raises(ParameterError, match="sampler 'csprng-numpy'"):
        add_gaussian_noise(mean, plan=plan, sampler=SeededGaussianSampler(1))
    assert not mean.consumed


def test_non_private_release_needs_the_switch():
    mean, expected = _mean()
    with pytest.raises(DangerousModeError) as info:
        release_without_noise(mean, allow_non_private=False)
    assert "--non-private" in str(info.value) and "allow_non_private=True" in str(info.value)
    assert not mean.consumed
    released = release_without_noise(mean, allow_non_private=True)
    assert not released.noised and not released.private
    assert released.plan.epsilon == math.inf
    assert isinstance(released.plan.event, dp_accounting.NonPrivateDpEvent)
    np.testing.assert_array_equal(released.layers[3], expected[3])
    with pytest.raises(ParameterError, match="non-private plan"):
        add_gaussian_noise(_mean()[0], plan=released.plan, sampler=CsprngNumpyGaussianSampler())


def test_end_to_end_replace_one_release():
    """partition -> fake activations -> clip -> accumulate -> Δ -> plan -> noise."""
    part = partition_replace_one(103, shots_per_chunk=10, rng=seeded_rng(0))
    norms = {0: 1.0, 3: 2.0}
    acc = ClippedSumAccumulator(DIMS)
    rng = np.random.default_rng(3)
    for chunk in part.chunks:
        acts = {layer: rng.normal(size=(1, dim)) * 5 + chunk.size for layer, dim in DIMS.items()}
        acc.add(clip_l2_per_layer(acts, l2_clip_norms=norms))
    mean = acc.mean(num_chunks=part.num_chunks)
    delta_l2 = l2_sensitivity(
        l2_clip_norms=list(norms.values()), num_chunks=part.num_chunks, relation="replace-one"
    )
    assert delta_l2 == pytest.approx(2 * math.sqrt(5) / 10)
    sampler = OpenDPGaussianSampler()
    plan = plan_gaussian_release(l2_sensitivity=delta_l2, epsilon=1.0, delta=1e-5, sampler=sampler)
    released = add_gaussian_noise(mean, plan=plan, sampler=sampler)
    assert set(released.layers) == {0, 3}
    assert released.layers[3].shape == (6,) and released.plan.epsilon_spent <= 1.0


def _rows(num_rows=5, seed=0):
    rng = np.random.default_rng(seed)
    return {layer: 3.0 * rng.normal(size=(num_rows, dim)) for layer, dim in DIMS.items()}


def test_release_clipped_mean_is_clip_then_mean_by_public_m_then_one_draw():
    """The seam computes exactly the hand-assembled release (identical operations, so bitwise)."""
    rows, norms = _rows(), {0: 1.0, 3: 0.5}
    plan = plan_gaussian_release(
        l2_sensitivity=0.3, epsilon=1.0, delta=1e-5, sampler=SeededGaussianSampler(7)
    )
    seam = release_clipped_mean(
        rows, l2_clip_norms=norms, num_chunks=8, plan=plan, sampler=SeededGaussianSampler(7)
    )
    by_hand = ClippedSumAccumulator(DIMS)
    by_hand.add(clip_l2_per_layer(rows, l2_clip_norms=norms))
    expected = add_gaussian_noise(by_hand.mean(num_chunks=8), plan=plan, sampler=SeededGaussianSampler(7))
    for layer in DIMS:
        np.testing.assert_array_equal(seam.layers[layer], expected.layers[layer])


def test_release_clipped_sum_of_merged_partial_sums_equals_one_accumulator():
    """Workers' partial sums merged on the driver release what one process would (same draw)."""
    rows = clip_l2_per_layer(_rows(6), l2_clip_norms={0: 1.0, 3: 1.0})
    left = ClippedSumAccumulator.of({layer: r[:2] for layer, r in rows.items()})
    left.merge(ClippedSumAccumulator.of({layer: r[2:] for layer, r in rows.items()}))
    plan = plan_gaussian_release(
        l2_sensitivity=0.3, epsilon=1.0, delta=1e-5, sampler=SeededGaussianSampler(3)
    )
    merged = release_clipped_sum(left, num_chunks=6, plan=plan, sampler=SeededGaussianSampler(3))
    single = release_clipped_sum(
        ClippedSumAccumulator.of(rows), num_chunks=6, plan=plan, sampler=SeededGaussianSampler(3)
    )
    for layer in DIMS:
        np.testing.assert_allclose(merged.layers[layer], single.layers[layer], rtol=1e-12, atol=1e-12)


def test_release_clipped_sum_charges_before_the_draw_and_a_refusal_draws_nothing():
    calls = []

    class Recording(SeededGaussianSampler):
        def perturb(self, values, *, noise_std):
            calls.append("noise")
            return super().perturb(values, noise_std=noise_std)

    sampler = Recording(0)
    plan = plan_gaussian_release(l2_sensitivity=0.3, epsilon=1.0, delta=1e-5, sampler=sampler)
    sums = ClippedSumAccumulator.of(clip_l2_per_layer(_rows(), l2_clip_norms={0: 1.0, 3: 1.0}))
    release_clipped_sum(
        sums, num_chunks=5, plan=plan, sampler=sampler, before_noise=lambda: calls.append("charge")
    )
    assert calls == ["charge", "noise"]

    def refuse():
        raise DangerousModeError("refused")

    calls.clear()
    sums = ClippedSumAccumulator.of(clip_l2_per_layer(_rows(), l2_clip_norms={0: 1.0, 3: 1.0}))
    with pytest.raises(DangerousModeError, match="refused"):
        release_clipped_sum(sums, num_chunks=5, plan=plan, sampler=sampler, before_noise=refuse)
    assert calls == []


def test_release_clipped_sum_without_a_plan_needs_the_explicit_switch():
    sums = ClippedSumAccumulator.of(_rows())
    with pytest.raises(DangerousModeError, match="non-private"):
        release_clipped_sum(sums, num_chunks=5, plan=None)
    sums = ClippedSumAccumulator.of(_rows())
    released = release_clipped_sum(sums, num_chunks=5, plan=None, allow_non_private=True, l2_sensitivity=0.4)
    assert not released.noised and released.plan.l2_sensitivity == 0.4


def test_release_clipped_sum_with_a_plan_and_no_sampler_is_refused_before_the_charge():
    calls = []
    plan = plan_gaussian_release(
        l2_sensitivity=0.3, epsilon=1.0, delta=1e-5, sampler=SeededGaussianSampler(0)
    )
    sums = ClippedSumAccumulator.of(clip_l2_per_layer(_rows(), l2_clip_norms={0: 1.0, 3: 1.0}))
    with pytest.raises(ParameterError, match="needs the sampler 'seeded-numpy'"):
        release_clipped_sum(sums, num_chunks=5, plan=plan, before_noise=lambda: calls.append("charge"))
    assert calls == []
