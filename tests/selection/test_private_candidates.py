"""Private selection among public candidate head sets (dpmtv.selection.candidates): the public
lists, the per-chunk utilities (bounded, a function of the chunk's own records: one changed
record moves every total by at most 1), the end-to-end choice and its event against
dp-accounting."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpmtv.distributed.batches import chunks_as_partition
from dpmtv.errors import ParameterError
from dpmtv.heads import HeadSet
from dpmtv.privacy import epsilon_of
from dpmtv.privacy.noisy_top_k import plan_private_selection
from dpmtv.selection.candidates import (
    CandidateUtilities,
    candidate_head_sets,
    candidate_totals,
    select_private_candidates,
)

POOL = HeadSet.of((layer, head) for layer in range(2) for head in range(4))  # the planted model's


def _chunks(records, size=4):
    return [records[start : start + size] for start in range(0, len(records) - size + 1, size)]


def _utilities(loaded, chunks, utility="probability"):
    task = CandidateUtilities(tuple(candidate_head_sets("layer-subsets", POOL)), utility, None, 4)
    records, partition = chunks_as_partition(chunks)
    return task.run(loaded, records, partition, progress=False)


def test_the_candidate_lists_are_public_functions_of_the_pool():
    subsets = candidate_head_sets("layer-subsets", POOL)
    assert [sorted(c.layers) for c in subsets] == [[0], [1], [0, 1]]
    assert subsets[2] == POOL and all(len(c.heads_in(layer)) == 4 for c in subsets for layer in c.layers)
    four = HeadSet.of((layer, 0) for layer in range(4))
    assert len(candidate_head_sets("layer-subsets", four)) == 15
    assert len(candidate_head_sets("layer-blocks", four)) == 10  # 4 + 3 + 2 + 1 contiguous blocks
    with pytest.raises(ParameterError, match="layer-blocks"):
        candidate_head_sets("layer-subsets", HeadSet.of((layer, 0) for layer in range(9)))
    with pytest.raises(ParameterError, match="--selection-candidates"):
        candidate_head_sets("everything", POOL)


def test_totals_refuse_utilities_outside_zero_one_and_count_a_failed_chunk_as_zero():
    assert candidate_totals(
        [np.array([0.5, 1.0]), None, np.array([0.0, 0.25])], num_candidates=2
    ).tolist() == [
        0.5,
        1.25,
    ]
    for bad in (np.array([0.5, 1.5]), np.array([-0.1, 0.0]), np.array([0.5]), np.array([np.nan, 0.0])):
        with pytest.raises(ParameterError, match="chunk 0: a candidate utility"):
            candidate_totals([bad], num_candidates=2)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 15), st.integers(0, 23), st.sampled_from(["correct", "probability"]))
def test_one_changed_record_changes_only_its_chunk_and_every_total_by_at_most_one(
    planted, public_records, index, replacement, utility
):
    loaded, _ = planted
    records = list(public_records[:16])
    changed = list(records)
    changed[index] = dataclasses.replace(public_records[replacement], record_id=f"changed-{replacement}")
    changed[index] = dataclasses.replace(changed[index], answer="not the answer")
    before = _utilities(loaded, _chunks(records), utility)
    after = _utilities(loaded, _chunks(changed), utility)
    differing = [j for j, (a, b) in enumerate(zip(before, after)) if not np.array_equal(a, b)]
    assert set(differing) <= {index // 4}
    totals = [candidate_totals(u, num_candidates=3) for u in (before, after)]
    assert np.max(np.abs(totals[0] - totals[1])) <= 1.0
    assert all(np.all((np.asarray(u) >= 0) & (np.asarray(u) <= 1)) for u in before)


def test_the_choice_at_a_large_epsilon_is_the_candidate_with_the_planted_heads_net_gain(
    planted, public_records
):
    """Layer 1 holds two planted heads and two decoys (net +1), layer 0 one and three (−0.5):
    patching layer 1 alone helps most."""
    loaded, _ = planted
    plan = plan_private_selection(total_epsilon=1e4, total_delta=1e-6, k=1, max_votes_per_chunk=1)
    records, partition = chunks_as_partition(_chunks(public_records))
    task = CandidateUtilities(tuple(candidate_head_sets("layer-subsets", POOL)), "probability", None, 4)
    result = select_private_candidates(
        loaded, records, partition, task=task, plan=plan, rng=np.random.default_rng(0), progress=False
    )
    assert sorted(result.heads.layers) == [1] and result.method == "private-candidate-choice"
    details = result.details
    assert details["k"] == 1 and details["max_votes_per_chunk"] == 1 and details["chosen"] == 1
    assert details["candidates"][1] == result.heads.to_json() and "INSECURE" in details["sampler"]
    assert details["event"]["class_name"] == "DiscreteLaplaceDpEvent"
    with pytest.raises(ParameterError, match="k = k' = 1"):
        select_private_candidates(
            loaded,
            records,
            partition,
            task=task,
            plan=plan_private_selection(total_epsilon=1.0, total_delta=1e-6, k=2),
            progress=False,
        )


def test_the_choice_is_one_pure_round_composed_with_the_release_by_dp_accounting():
    """The plan's event is one ε_sel-DP round (the RR pair's PLD), and the release calibrated on
    top of it meets the total (ε, δ) by dp-accounting's own PLD composition."""
    from dpmtv.privacy.noise import OpenDPGaussianSampler
    from dpmtv.privacy.release import plan_gaussian_release

    plan = plan_private_selection(
        total_epsilon=1.0, total_delta=1e-5, k=1, max_votes_per_chunk=1, selection_fraction=0.3
    )
    pure = pld_lib.from_privacy_parameters(
        common.DifferentialPrivacyParameters(0.3, 0.0), value_discretization_interval=1e-4
    )
    for delta in (1e-9, 1e-5, 1e-2):
        assert epsilon_of(plan.event, delta=delta) == pytest.approx(
            pure.get_epsilon_for_delta(delta), rel=1e-6
        )
    release = plan_gaussian_release(
        l2_sensitivity=0.1,
        epsilon=1.0,
        delta=1e-5,
        sampler=OpenDPGaussianSampler(),
        fixed_events=plan.fixed_events,
    )
    gaussian = pld_lib.from_gaussian_mechanism(
        standard_deviation=release.noise_multiplier, value_discretization_interval=1e-4
    )
    composed = pure.compose(gaussian)
    assert composed.get_epsilon_for_delta(1e-5) <= 1.0 + 1e-3
