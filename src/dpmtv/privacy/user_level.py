"""User-level privacy: all of a user's records go to one chunk, and each user is capped (docs/design.md §1).

Relation
========
Records carry a ``user_id``. The user-level neighbouring relation is *add or remove one user*:
the neighbour has all of one user's records added or removed (``N`` and the number of users are
private). The number of chunks ``m`` is public and fixed, as for record-level add-remove-one.

Assignment
==========
:func:`partition_by_user`:

1. **Cap.** A user with more than ``k = max_records_per_user`` records keeps ``k`` of them, a
   uniformly random subset; the excess is dropped and counted. The subset is drawn from a
   generator seeded with ``HMAC-SHA256(cap_key, user_id)``, where ``cap_key = HMAC-SHA256(key,
   "dpmtv user-level cap")`` is derived from the build's fresh key: deterministic given the key,
   random from OS entropy across builds, and a function of that user's own id and records only.
2. **Chunk.** User ``u`` goes to chunk ``HMAC-SHA256(key, u) mod m`` — the keyed hash of
   :func:`~dpmtv.privacy.partition.partition_add_remove_one`, applied to the distinct user ids —
   with a key drawn fresh per build (:func:`~dpmtv.privacy.partition.fresh_partition_key`) and
   never stored. All of a user's kept records land in that one chunk, in input order.

Sensitivity at user level
=========================
Let ``D`` and ``D'`` differ by one user ``v``'s records. Couple the two runs through the same key
(it is drawn independently of the data). Each other user's chunk and kept subset are functions of
the key, that user's id and that user's own records only, so every user other than ``v`` keeps
the same records in the same chunk, and ``v``'s kept records live only in
chunk ``j* = HMAC(key, v) mod m``. So exactly one chunk's record list differs (by ``v``'s ≤ k
records), and every other chunk — hence its prompt and its activation vector — is identical. The
clipped vector of ``j*`` moves by at most ``2·C_l`` per layer (both ends have norm ``<= C_l``,
including the empty chunk's zero vector), and the mean divides by the public ``m``, so the L2
sensitivity is the record-level one::

    Δ = 2·sqrt(Σ_l C_l²) / m

(:func:`user_level_l2_sensitivity`). The cap is not needed for this bound — clipping bounds any
chunk's change — but it keeps one user from filling a chunk's prompt (utility, context length),
and the build's per-chunk truncation to ``s`` records (a function of the chunk's own record list)
preserves the argument. The guarantee is DP per user only if each user id names one person: ids
must be stable and never shared between people.

Private counts
==============
The number of users and of dropped records are statistics of the private data. Show them to the
operator of the build; never write them into the artifact, the ledger or logs that leave the
machine.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpmtv.errors import ParameterError
from dpmtv.privacy._checks import check_int
from dpmtv.privacy.partition import Partition, SparseChunks, partition_add_remove_one
from dpmtv.privacy.sensitivity import l2_sensitivity

__all__ = ["UserPartition", "partition_by_user", "user_level_l2_sensitivity"]

_CAP_DOMAIN = b"dpmtv user-level cap"


@dataclass(frozen=True)
class UserPartition:
    """The user-level partition and its PRIVATE counts (operator display only).

    Attributes:
        partition: chunks of record indices; ``num_unused`` = records dropped by the cap.
        num_users: distinct user ids (private).
        num_dropped_records: records beyond ``max_records_per_user`` (private).
        num_capped_users: users who lost records to the cap (private).
        max_records_per_user: the public cap ``k``.
    """

    partition: Partition
    num_users: int
    num_dropped_records: int
    num_capped_users: int
    max_records_per_user: int


def partition_by_user(
    user_ids: Sequence[str],
    *,
    num_chunks: int,
    max_records_per_user: int,
    key: bytes,
) -> UserPartition:
    """Assign each user to one chunk by a keyed hash and cap each user's records.

    Args:
        user_ids: one user id per record (parallel to the caller's record list).
        num_chunks: the public, fixed ``m``.
        max_records_per_user: the public cap ``k`` (>= 1).
        key: a fresh per-build key (:func:`~dpmtv.privacy.partition.fresh_partition_key`), never
            stored; it fixes both the chunks and the capped subsets.

    Returns:
        A :class:`UserPartition`; chunk arrays hold record indices in input order.

    Raises:
        ParameterError: an empty list, a missing/empty/non-string user id (names the index),
            ``m < 1``, ``k < 1`` or an invalid key.
    """
    check_int("num_chunks", num_chunks, minimum=1)
    cap = check_int("max_records_per_user", max_records_per_user, minimum=1)
    by_user = _records_by_user(user_ids)
    users = list(by_user)  # first-appearance order
    user_chunks = partition_add_remove_one(users, num_chunks=num_chunks, key=key)
    cap_key = hmac.new(bytes(key), _CAP_DOMAIN, hashlib.sha256).digest()
    kept = {user: _cap(by_user[user], cap, cap_key, user) for user in users}
    chunks = SparseChunks(  # only the chunks that hold users: O(#users), whatever m
        {
            j: np.sort(np.concatenate([kept[users[u]] for u in members]))
            for j, members in user_chunks.nonempty_items()
        },
        num_chunks,
    )
    dropped = len(user_ids) - sum(len(k) for k in kept.values())
    return UserPartition(
        partition=Partition(chunks=chunks, num_unused=dropped),
        num_users=len(users),
        num_dropped_records=dropped,
        num_capped_users=sum(len(by_user[u]) > cap for u in users),
        max_records_per_user=cap,
    )


def user_level_l2_sensitivity(*, l2_clip_norms: Sequence[float], num_chunks: int) -> float:
    """``Δ = 2·sqrt(Σ_l C_l²) / m`` per user: one user changes one chunk (module docstring).

    Delegates to :func:`dpmtv.privacy.sensitivity.l2_sensitivity` under add-remove-one, whose
    docstring derives the per-chunk bound; the user-level step is that adding or removing a user
    changes exactly one chunk under :func:`partition_by_user`.
    """
    return l2_sensitivity(l2_clip_norms=l2_clip_norms, num_chunks=num_chunks, relation="add-remove-one")


def _records_by_user(user_ids: Sequence[str]) -> dict[str, list[int]]:
    if len(user_ids) == 0:
        raise ParameterError("no records to partition: user_ids is empty")
    by_user: dict[str, list[int]] = {}
    for index, user in enumerate(user_ids):
        if not isinstance(user, str) or not user:
            raise ParameterError(
                f"record at index {index} has user id {user!r}; user-level privacy needs a "
                "non-empty 'user_id' on every record"
            )
        by_user.setdefault(user, []).append(index)
    return by_user


def _cap(indices: list[int], cap: int, cap_key: bytes, user: str) -> np.ndarray:
    """All indices if there are at most ``cap``; else a uniform random ``cap``-subset drawn from
    a generator seeded by ``HMAC-SHA256(cap_key, user)`` (256 bits)."""
    owned = np.asarray(indices, dtype=np.int64)
    if owned.size <= cap:
        return owned
    seed = int.from_bytes(hmac.new(cap_key, user.encode("utf-8"), hashlib.sha256).digest(), "big")
    return np.sort(np.random.Generator(np.random.PCG64(seed)).choice(owned, size=cap, replace=False))
