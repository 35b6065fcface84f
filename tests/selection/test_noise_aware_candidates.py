"""Noise-aware candidate utilities (issue 28): each chunk's mean plus the release's public noise
for the candidate, the smaller ``layer-groups`` candidates, and the per-candidate release std
against its closed form. The utility stays a function of the chunk alone (and of noise drawn from
public seeds and the chunk's public id), so one changed record moves every total by at most 1."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpmtv.distributed.batches import chunks_as_partition
from dpmtv.errors import ParameterError
from dpmtv.heads import HeadSet
from dpmtv.pipeline import settings as build_settings
from dpmtv.selection import candidates as candidates_module
from dpmtv.selection.candidates import CandidateUtilities, candidate_head_sets, candidate_totals

POOL = HeadSet.of((layer, head) for layer in range(2) for head in range(4))  # the planted model's
GROUPS = tuple(candidate_head_sets("layer-groups", POOL))


def _chunks(records, size=4):
    return [records[start : start + size] for start in range(0, len(records) - size + 1, size)]


def _noisy(std, utility="noisy-probability", seed=0):
    return CandidateUtilities(GROUPS, utility, None, 4, noise_std=tuple(std), noise_seed=seed)


def _run(loaded, task, chunks):
    records, partition = chunks_as_partition(chunks)
    return task.run(loaded, records, partition, progress=False)


def test_layer_groups_are_the_layer_subsets_then_their_halves_and_quarters():
    subsets = candidate_head_sets("layer-subsets", POOL)
    assert list(GROUPS[: len(subsets)]) == subsets
    assert len(GROUPS) == 3 * 7 and len(set(GROUPS)) == len(GROUPS)  # 3 subsets x (1 + 2 + 4)
    halves = GROUPS[3:9]
    assert [h.pairs for h in halves[:2]] == [((0, 0), (0, 1)), ((0, 2), (0, 3))]
    assert halves[4].pairs == ((0, 0), (0, 1), (1, 0), (1, 1))  # the same half in every layer
    quarters = GROUPS[9:]
    assert all(len(q.heads_in(layer)) == 1 for q in quarters for layer in q.layers)
    big = HeadSet.of((layer, head) for layer in range(4) for head in range(8))
    assert len(candidate_head_sets("layer-groups", big)) == 15 * 7
    odd = HeadSet.of([(0, 0), (1, 0), (1, 1), (1, 2)])  # uneven layers: repeats dropped, none empty
    groups = candidate_head_sets("layer-groups", odd)
    assert len({g.pairs for g in groups}) == len(groups) and all(g.pairs for g in groups)


def test_the_settings_and_the_module_list_the_same_candidate_lists_and_utilities():
    with pytest.raises(ParameterError, match="layer-subsets, layer-blocks, layer-groups"):
        build_settings.PrivateSelectionSettings(k=1, method="candidates", candidates="nope")
    for utility in candidates_module.CANDIDATE_UTILITIES:
        build_settings.PrivateSelectionSettings(k=1, method="candidates", utility=utility)
    for kind in candidates_module.CANDIDATE_LISTS:
        build_settings.PrivateSelectionSettings(k=1, method="candidates", candidates=kind)
    with pytest.raises(ParameterError, match="nominal clip multiplier"):
        build_settings.PrivateSelectionSettings(k=1, noise_clip_multiplier=0.0)


@pytest.mark.parametrize(
    ("utility", "std", "match"),
    [
        ("noisy-probability", None, "needs one finite release noise std"),
        ("noisy-probability", (0.1,), "needs one finite release noise std"),
        ("noisy-correct", (-0.1,) * len(GROUPS), "needs one finite release noise std"),
        ("noisy-probability", (math.nan,) * len(GROUPS), "needs one finite release noise std"),
        ("probability", (0.1,) * len(GROUPS), "takes no release noise std"),
        ("loudest", None, "candidate utility must be one of"),
    ],
)
def test_a_noise_std_is_given_exactly_for_a_noisy_utility(planted, public_records, utility, std, match):
    loaded, _ = planted
    task = CandidateUtilities(GROUPS, utility, None, 4, noise_std=std)
    with pytest.raises(ParameterError, match=match):
        _run(loaded, task, _chunks(list(public_records[:8])))


def test_the_noise_is_a_function_of_the_public_seed_and_chunk_id_and_changes_the_utilities(
    planted, public_records
):
    loaded, _ = planted
    chunks = _chunks(list(public_records[:8]))
    std = [0.0] * len(GROUPS)
    plain = _run(loaded, CandidateUtilities(GROUPS, "probability", None, 4), chunks)
    silent = _run(loaded, _noisy(std), chunks)
    assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(plain, silent, strict=True))  # σ = 0
    loud = [5.0] * len(GROUPS)
    first, again, other = (_run(loaded, _noisy(loud, seed=s), chunks) for s in (0, 0, 1))
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))
    assert not all(np.allclose(a, b) for a, b in zip(first, plain, strict=True))
    # chunk 1's noise comes from its id, not from its position among the non-empty chunks
    records, partition = chunks_as_partition([[], chunks[1]])
    alone = _noisy(loud).run(loaded, records, partition, progress=False)
    assert np.array_equal(alone[0], first[1])


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 15), st.integers(0, 23), st.sampled_from(["noisy-correct", "noisy-probability"]))
def test_one_changed_record_changes_only_its_chunk_and_every_noisy_total_by_at_most_one(
    planted, public_records, index, replacement, utility
):
    loaded, _ = planted
    records = list(public_records[:16])
    changed = list(records)
    changed[index] = dataclasses.replace(
        public_records[replacement], record_id=f"changed-{replacement}", answer="not the answer"
    )
    task = _noisy(np.linspace(0.0, 3.0, len(GROUPS)), utility)
    before, after = _run(loaded, task, _chunks(records)), _run(loaded, task, _chunks(changed))
    differing = [j for j, (a, b) in enumerate(zip(before, after, strict=True)) if not np.array_equal(a, b)]
    assert set(differing) <= {index // 4}
    totals = [candidate_totals(u, num_candidates=len(GROUPS)) for u in (before, after)]
    assert np.max(np.abs(totals[0] - totals[1])) <= 1.0
    assert all(np.all((np.asarray(u) >= 0) & (np.asarray(u) <= 1)) for u in before)
