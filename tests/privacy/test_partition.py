from __future__ import annotations

import numpy as np
import pytest

from dpmtv.errors import ParameterError
from dpmtv.privacy import (
    fresh_partition_key,
    partition_add_remove_one,
    partition_replace_one,
    secure_rng,
    seeded_rng,
)


def test_replace_one_sizes_disjoint_and_unused():
    part = partition_replace_one(23, shots_per_chunk=5, rng=seeded_rng(0))
    assert part.num_chunks == 4
    assert part.num_unused == 3
    assert all(chunk.shape == (5,) for chunk in part.chunks)
    used = np.concatenate(part.chunks)
    assert len(set(used.tolist())) == 20  # disjoint
    assert used.min() >= 0 and used.max() < 23


def test_replace_one_exact_fit_has_no_unused():
    part = partition_replace_one(12, shots_per_chunk=4, rng=secure_rng())
    assert (part.num_chunks, part.num_unused) == (3, 0)
    assert sorted(np.concatenate(part.chunks).tolist()) == list(range(12))


def test_replace_one_too_few_records_names_both_numbers():
    with pytest.raises(ParameterError, match=r"num_records \(3\).*shots_per_chunk \(5\)"):
        partition_replace_one(3, shots_per_chunk=5, rng=seeded_rng(0))


@pytest.mark.parametrize("shots", [0, -1, 2.5, True])
def test_replace_one_rejects_bad_shots(shots):
    with pytest.raises(ParameterError, match="shots_per_chunk"):
        partition_replace_one(10, shots_per_chunk=shots, rng=seeded_rng(0))


def test_secure_rng_permutations_differ_and_seeded_reproduce():
    a = partition_replace_one(100, shots_per_chunk=10, rng=secure_rng())
    b = partition_replace_one(100, shots_per_chunk=10, rng=secure_rng())
    # Equal with probability 1/100!: a failure means the generator is not freshly seeded.
    assert not all(np.array_equal(x, y) for x, y in zip(a.chunks, b.chunks, strict=True))
    c = partition_replace_one(100, shots_per_chunk=10, rng=seeded_rng(5))
    d = partition_replace_one(100, shots_per_chunk=10, rng=seeded_rng(5))
    assert all(np.array_equal(x, y) for x, y in zip(c.chunks, d.chunks, strict=True))


def _membership(record_ids, part):
    return [frozenset(record_ids[i] for i in chunk) for chunk in part.chunks]


IDS = [f"rec-{i}" for i in range(200)]


def test_add_remove_deterministic_per_key_and_covers_all():
    key = fresh_partition_key()
    a = partition_add_remove_one(IDS, num_chunks=8, key=key)
    b = partition_add_remove_one(IDS, num_chunks=8, key=key)
    assert _membership(IDS, a) == _membership(IDS, b)
    assert a.num_chunks == 8 and a.num_unused == 0
    assert sorted(np.concatenate(a.chunks).tolist()) == list(range(200))


def test_add_remove_differs_across_keys():
    a = partition_add_remove_one(IDS, num_chunks=8, key=b"k" * 32)
    b = partition_add_remove_one(IDS, num_chunks=8, key=b"j" * 32)
    # Identical assignments under two keys have probability 8**-200.
    assert _membership(IDS, a) != _membership(IDS, b)


def test_add_or_remove_one_record_changes_exactly_one_chunk():
    key = fresh_partition_key()
    base = _membership(IDS, partition_add_remove_one(IDS, num_chunks=8, key=key))
    added_ids = [*IDS[:50], "new-record", *IDS[50:]]
    added = _membership(added_ids, partition_add_remove_one(added_ids, num_chunks=8, key=key))
    assert sum(x != y for x, y in zip(base, added, strict=True)) == 1
    removed_ids = IDS[:7] + IDS[8:]
    removed = _membership(removed_ids, partition_add_remove_one(removed_ids, num_chunks=8, key=key))
    assert sum(x != y for x, y in zip(base, removed, strict=True)) == 1


def test_add_remove_keeps_empty_chunks():
    part = partition_add_remove_one(["a", "b"], num_chunks=50, key=b"x" * 32)
    assert part.num_chunks == 50
    assert sum(len(c) for c in part.chunks) == 2
    assert sum(len(c) == 0 for c in part.chunks) >= 48


def test_add_remove_rejects_duplicates_and_bad_arguments():
    with pytest.raises(ParameterError, match="duplicate record id 'a'"):
        partition_add_remove_one(["a", "b", "a"], num_chunks=2, key=b"x" * 32)
    with pytest.raises(ParameterError, match="num_chunks"):
        partition_add_remove_one(["a"], num_chunks=0, key=b"x" * 32)
    with pytest.raises(ParameterError, match="key"):
        partition_add_remove_one(["a"], num_chunks=2, key=b"")
