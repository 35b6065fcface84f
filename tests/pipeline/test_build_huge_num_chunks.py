"""A public ``--num-chunks`` far above the number of records: work and memory stay
O(non-empty chunks) (empty chunks add zero to the sum; the mean still divides by the public m)."""

import tracemalloc

import numpy as np
import pytest

import dpmtv.forward.extract
from dpmtv.data import load_records
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from dpmtv.privacy import fresh_partition_key, partition_add_remove_one
from dpmtv.privacy.user_level import partition_by_user
from tests.conftest import write_records

HUGE_M = 100_000_000


def test_add_remove_partition_of_a_huge_m_holds_only_the_nonempty_chunks():
    ids = [f"r{i}" for i in range(8)]
    tracemalloc.start()
    part = partition_add_remove_one(ids, num_chunks=HUGE_M, key=fresh_partition_key())
    _, peak_bytes = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak_bytes < 1_000_000  # a tuple of m arrays would need gigabytes
    assert part.num_chunks == HUGE_M and len(part.chunks) == HUGE_M
    nonempty = part.nonempty_chunks()
    assert sorted(np.concatenate(nonempty).tolist()) == list(range(8))  # every record once
    assert 1 <= len(nonempty) <= 8
    assert len(part.chunks[-1]) in (0, 1) and len(part.chunks[HUGE_M - 1]) == len(part.chunks[-1])
    with pytest.raises(IndexError):
        part.chunks[HUGE_M]


def test_user_partition_of_a_huge_m_holds_only_the_nonempty_chunks():
    users = ["u1", "u2", "u1", "u3", "u2", "u1"]
    tracemalloc.start()
    parts = partition_by_user(users, num_chunks=HUGE_M, max_records_per_user=2, key=fresh_partition_key())
    _, peak_bytes = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak_bytes < 1_000_000
    assert parts.partition.num_chunks == HUGE_M
    kept = np.concatenate(parts.partition.nonempty_chunks())
    assert len(kept) == 5  # u1 capped at 2 of its 3 records
    for chunk in parts.partition.nonempty_chunks():  # one user per chunk here, input order kept
        assert len({users[i] for i in chunk}) == 1 and list(chunk) == sorted(chunk)


def test_build_with_a_huge_num_chunks_runs_one_forward_pass_per_nonempty_chunk(
    tiny_llava, tmp_path, monkeypatch
):
    records = load_records(write_records(tmp_path / "data", 8))
    passes = []
    real = dpmtv.forward.extract.selected_heads_of

    def counting(adapter, inputs, heads):
        passes.append(int(inputs["input_ids"].shape[0]))
        return real(adapter, inputs, heads)

    monkeypatch.setattr(dpmtv.forward.extract, "selected_heads_of", counting)
    settings = BuildSettings(
        epsilon=1.0,
        delta=1e-5,
        l2_clip_norm=(1.0,),
        shots_per_chunk=4,
        neighbouring_relation="add-remove-one",
        num_chunks=HUGE_M,
        progress=False,
    )
    heads = parse_head_spec("layers:0", tiny_llava.adapter.geometry)
    result = build_task_vector(tiny_llava, records, heads, settings)
    assert 1 <= len(passes) <= 8 and set(passes) == {1}  # one private chunk per pass, non-empty only
    privacy = result.vector.metadata.privacy
    assert privacy.num_chunks == HUGE_M
    assert privacy.l2_sensitivity == pytest.approx(2 * 1.0 / HUGE_M, rel=1e-12)


@pytest.mark.parametrize("composition", ["sequential", "parallel"])
def test_private_selection_with_a_huge_num_chunks_visits_only_the_nonempty_chunks(
    tiny_llava, tmp_path, composition
):
    """Private head selection lists the selection chunks' votes: the non-empty ones only, while
    the metadata keeps the public number of voting chunks (m, or its half under parallel
    composition), never the data-dependent count of non-empty ones."""
    from dpmtv.pipeline.settings import PrivateSelectionSettings

    records = load_records(write_records(tmp_path / "data", 8))
    settings = BuildSettings(
        epsilon=4.0,
        delta=1e-5,
        l2_clip_norm=(1.0,),
        shots_per_chunk=4,
        neighbouring_relation="add-remove-one",
        num_chunks=HUGE_M,
        private_selection=PrivateSelectionSettings(k=2, composition=composition),
        insecure_seed=3,
        allow_insecure_seed=True,
        progress=False,
    )
    tracemalloc.start()
    result = build_task_vector(tiny_llava, records, None, settings)
    _, peak_bytes = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak_bytes < 50_000_000  # O(m) lists or index arrays of 10^8 chunks take gigabytes
    metadata = result.vector.metadata
    half = {"sequential": HUGE_M, "parallel": HUGE_M // 2}[composition]
    assert metadata.head_selection["details"]["num_chunks_voting"] == half
    assert metadata.privacy.num_chunks == half and len(result.vector.heads.pairs) == 2


@pytest.mark.parametrize("num_chunks", [2, 7, 8])
def test_parallel_halves_of_stored_chunks_are_the_index_halves(num_chunks):
    """The sparse split puts every chunk where the index split of ``parallel_halves`` does."""
    from dpmtv.pipeline.partition import parallel_composition_halves
    from dpmtv.privacy import Partition
    from dpmtv.privacy.noisy_top_k import parallel_halves

    chunks = tuple(np.array([j, 100 + j]) if j % 3 else np.array([], np.int64) for j in range(num_chunks))
    halves = parallel_composition_halves(Partition(chunks=chunks, num_unused=1))
    for half, indices in zip(halves, parallel_halves(num_chunks), strict=True):
        assert half.num_chunks == len(indices) and half.num_unused == 1
        assert [list(half.chunks[p]) for p in range(len(indices))] == [list(chunks[j]) for j in indices]
