"""Private selection, model side: bounded per-chunk votes and the end-to-end noisy choice."""

from __future__ import annotations

import numpy as np

from dpmtv.distributed.batches import chunks_as_partition
from dpmtv.heads import HeadSet
from dpmtv.privacy.noisy_top_k import plan_private_selection
from dpmtv.selection import chunk_votes, select_private
from tests.selection.planted import PLANTED


def _chunks(records, size=4):
    return [records[start : start + size] for start in range(0, len(records) - size + 1, size)]


def _flat(pairs):
    return {layer * 4 + head for layer, head in pairs}


def test_votes_are_bounded_and_favour_the_planted_heads(planted, public_records):
    loaded, _ = planted
    votes = chunk_votes(loaded, _chunks(public_records), max_votes_per_chunk=3, progress=False)
    assert len(votes) == 6
    assert all(len(v) <= 3 and len(set(v)) == len(v) for v in votes)
    counts = np.bincount([h for v in votes for h in v], minlength=8)
    assert set(np.argsort(-counts, kind="stable")[:3].tolist()) == _flat(PLANTED)


def test_a_chunk_vote_depends_only_on_its_own_records(planted, public_records):
    loaded, _ = planted
    chunks = _chunks(public_records)[:3] + [public_records[:1]]  # the last has no demonstration
    together = chunk_votes(loaded, chunks, max_votes_per_chunk=2, progress=False)
    alone = [chunk_votes(loaded, [c], max_votes_per_chunk=2, progress=False)[0] for c in chunks]
    assert together == alone and together[-1] == ()


def test_select_private_end_to_end(planted, public_records):
    loaded, _ = planted
    plan = plan_private_selection(total_epsilon=1e4, total_delta=1e-6, k=3, selection_fraction=0.5)
    records, partition = chunks_as_partition(_chunks(public_records))
    result = select_private(
        loaded, records, partition, shots_per_chunk=4, plan=plan, rng=np.random.default_rng(0), progress=False
    )
    assert result.heads == HeadSet.of(PLANTED) and result.method == "private-noisy-top-k"
    details = result.details
    assert details["epsilon_selection"] == 5e3 and details["k"] == 3
    assert details["composition"] == "sequential"
    assert details["event"]["class_name"] == "SelfComposedDpEvent" and "INSECURE" in details["sampler"]
    assert result.scores is None and result.dev_metric is None  # nothing but the noisy choice leaves


def test_select_private_respects_the_pool(planted, public_records):
    loaded, _ = planted
    plan = plan_private_selection(total_epsilon=1e4, total_delta=1e-6, k=1)
    pool = HeadSet.of([(0, 0), (1, 3)])
    records, partition = chunks_as_partition(_chunks(public_records))
    result = select_private(
        loaded, records, partition, shots_per_chunk=4, plan=plan, pool=pool, progress=False
    )
    assert result.heads == HeadSet.of([(1, 3)])
