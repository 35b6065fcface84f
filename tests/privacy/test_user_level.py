"""User-level partition: one chunk per user, a per-user cap, and the one-chunk neighbour property."""

from __future__ import annotations

import numpy as np
import pytest

from dpmtv.errors import ParameterError
from dpmtv.privacy import fresh_partition_key, l2_sensitivity
from dpmtv.privacy.user_level import partition_by_user, user_level_l2_sensitivity

KEY = b"k" * 32


def _users(counts: dict[str, int], *, interleave: bool = True) -> list[str]:
    """User ids for records; users own several records, interleaved in the input."""
    ids = [user for user, count in counts.items() for _ in range(count)]
    return list(np.random.default_rng(0).permutation(ids)) if interleave else ids


def _chunk_of_each_record(parts) -> dict[int, int]:
    return {int(i): j for j, chunk in enumerate(parts.partition.chunks) for i in chunk}


def test_all_records_of_a_user_share_one_chunk_and_are_capped():
    counts = {"alice": 7, "bob": 2, "carol": 1, "dave": 4, "erin": 3}
    ids = _users(counts)
    parts = partition_by_user(ids, num_chunks=3, max_records_per_user=3, key=KEY)
    where = _chunk_of_each_record(parts)
    for user, count in counts.items():
        owned = [i for i, u in enumerate(ids) if u == user]
        kept = [i for i in owned if i in where]
        assert len(kept) == min(count, 3)
        assert len({where[i] for i in kept}) == 1  # one chunk per user
    assert parts.num_users == 5 and parts.num_capped_users == 2
    assert parts.num_dropped_records == parts.partition.num_unused == (7 - 3) + (4 - 3)
    assert parts.partition.num_chunks == 3
    for chunk in parts.partition.chunks:  # input order inside a chunk
        assert list(chunk) == sorted(chunk) and chunk.dtype == np.int64


def test_removing_a_user_changes_exactly_one_chunk():
    """Pathwise, with the same key: the cap (3 of up to 5 records) keeps the same subset for every
    other user, and only the removed user's chunk differs."""
    counts = {f"user-{u}": 1 + u % 5 for u in range(30)}
    ids = _users(counts)
    full = partition_by_user(ids, num_chunks=6, max_records_per_user=3, key=KEY)
    gone = "user-4"  # owns 5 records, 3 kept
    keep = [i for i, u in enumerate(ids) if u != gone]
    reduced = partition_by_user([ids[i] for i in keep], num_chunks=6, max_records_per_user=3, key=KEY)

    def as_ids(part, source):
        return [[source[i] for i in chunk] for chunk in part.partition.chunks]

    before, after = as_ids(full, ids), as_ids(reduced, [ids[i] for i in keep])
    changed = [j for j in range(6) if before[j] != after[j]]
    assert len(changed) == 1
    assert [u for u in before[changed[0]] if u != gone] == after[changed[0]]
    assert before[changed[0]].count(gone) == 3 and full.num_capped_users == reduced.num_capped_users + 1


def test_cap_draws_a_uniform_subset_from_os_entropy():
    """The kept subset varies between builds (fresh key from OS entropy) and each record of a
    capped user is kept with probability k/n. 400 draws of a 2-of-4 cap: each index count ~ Bin(400, 1/2);
    the bound 200 ± 70 (7 sigma) fails with probability < 1e-10."""
    ids = ["u"] * 4
    hits = np.zeros(4)
    subsets = set()
    for _ in range(400):
        parts = partition_by_user(ids, num_chunks=1, max_records_per_user=2, key=fresh_partition_key())
        kept = parts.partition.chunks[0]
        hits[kept] += 1
        subsets.add(tuple(kept))
    assert np.all(np.abs(hits - 200) < 70) and len(subsets) == 6


def test_fresh_keys_move_users_between_chunks():
    ids = [f"u{i}" for i in range(40)]
    layouts = set()
    for _ in range(3):
        parts = partition_by_user(ids, num_chunks=4, max_records_per_user=1, key=fresh_partition_key())
        layouts.add(tuple(tuple(chunk) for chunk in parts.partition.chunks))
    assert len(layouts) == 3  # equal layouts of 40 users over 4 chunks: probability ~4^-40


def test_same_key_same_partition():
    ids = _users({"a": 6, "b": 2, "c": 5})
    one, two = (partition_by_user(ids, num_chunks=2, max_records_per_user=2, key=KEY) for _ in range(2))
    assert all(np.array_equal(x, y) for x, y in zip(one.partition.chunks, two.partition.chunks))


def test_empty_chunks_are_kept():
    parts = partition_by_user(["a", "a"], num_chunks=5, max_records_per_user=5, key=KEY)
    assert parts.partition.num_chunks == 5
    assert sorted(len(c) for c in parts.partition.chunks) == [0, 0, 0, 0, 2]


@pytest.mark.parametrize(
    ("ids", "kwargs", "match"),
    [
        ([], {}, "empty"),
        (["a", None, "b"], {}, "index 1"),
        (["a", ""], {}, "index 1"),
        (["a"], {"num_chunks": 0}, "num_chunks"),
        (["a"], {"max_records_per_user": 0}, "max_records_per_user"),
        (["a"], {"key": b""}, "key"),
    ],
)
def test_bad_input_is_refused(ids, kwargs, match):
    arguments = {"num_chunks": 2, "max_records_per_user": 2, "key": KEY, **kwargs}
    with pytest.raises(ParameterError, match=match):
        partition_by_user(ids, **arguments)


def test_user_level_sensitivity_is_the_record_level_bound():
    got = user_level_l2_sensitivity(l2_clip_norms=[1.0, 2.0], num_chunks=8)
    assert got == pytest.approx(2 * np.sqrt(5) / 8)
    assert got == l2_sensitivity(l2_clip_norms=[1.0, 2.0], num_chunks=8, relation="replace-one")
