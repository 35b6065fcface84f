"""The one partition entry point: the privacy unit and the relation decide how records are chunked.

A build must never reach a partition function without saying which unit its guarantee protects:
:func:`partition_private_records` has no default unit and no default relation, and it is the only
function the build calls. The three assignments it dispatches to, and why each keeps one unit's
change inside one chunk:

===============  ================  ====================================================
unit             relation          assignment
===============  ================  ====================================================
record           replace-one       :func:`~dpmtv.privacy.partition.partition_replace_one`
record           add-remove-one    :func:`~dpmtv.privacy.partition.partition_add_remove_one`
user             add-remove-one    :func:`~dpmtv.privacy.user_level.partition_by_user`
===============  ================  ====================================================

User level with replace-one is refused: the number of users is private, so the chunks cannot
be cut from it; users are hashed into a public ``m`` (add or remove one user).

Randomness
==========
Every random choice of the partition (the replace-one permutation, the HMAC key of the
add-remove and user-level assignments and, through that key, each user's capped subset) comes
from :func:`partition_randomness`: OS entropy for a real build, or, in the explicitly INSECURE
seeded mode, a function of the seed alone. Two seeded builds on neighbouring datasets then use
the same permutation/key — the coupling of the sensitivity proofs — and differ only by what the
data changed, which is how :mod:`dpmtv.audit.sensitivity` measures the sensitivity.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from dpmtv.errors import ParameterError
from dpmtv.privacy._checks import check_int
from dpmtv.privacy.partition import (
    Partition,
    fresh_partition_key,
    partition_add_remove_one,
    partition_replace_one,
    secure_rng,
    seeded_rng,
)
from dpmtv.privacy.relation import AdjacencyRelation
from dpmtv.privacy.user_level import partition_by_user

__all__ = [
    "PartitionRandomness",
    "PrivacyUnit",
    "PrivatePartition",
    "check_partition_parameters",
    "derive_insecure_seed",
    "parse_privacy_unit",
    "partition_private_records",
    "partition_randomness",
]


class PrivacyUnit(str, Enum):
    """Whose data the guarantee protects: one record, or all records of one user."""

    RECORD = "record"
    USER = "user"


def parse_privacy_unit(value: str | PrivacyUnit) -> PrivacyUnit:
    """The unit named by ``value``. Raises ParameterError naming the value and the valid ones."""
    if isinstance(value, PrivacyUnit):
        return value
    try:
        return PrivacyUnit(value)
    except ValueError:
        valid = ", ".join(repr(u.value) for u in PrivacyUnit)
        raise ParameterError(f"unknown privacy unit {value!r}; valid values are {valid}") from None


def derive_insecure_seed(seed: int, purpose: str) -> int:
    """A 64-bit seed for one ``purpose`` ("partition", "private-selection", ...) of a seeded run.

    Distinct purposes get independent-looking streams, so e.g. the permutation never reuses the
    noise's draws. INSECURE by construction: anyone with ``seed`` recomputes it.
    """
    check_int("seed", seed, minimum=0)
    digest = hashlib.sha256(f"dpmtv insecure seed/{purpose}/{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass(frozen=True)
class PartitionRandomness:
    """The partition's random inputs: an HMAC key (add-remove, user level) and a permutation
    generator (replace-one). Never stored."""

    key: bytes
    rng: np.random.Generator


def partition_randomness(insecure_seed: int | None) -> PartitionRandomness:
    """Fresh OS entropy, or (INSECURE) a key and generator that are functions of the seed only."""
    if insecure_seed is None:
        return PartitionRandomness(key=fresh_partition_key(), rng=secure_rng())
    key_seed = derive_insecure_seed(insecure_seed, "partition-key")
    return PartitionRandomness(
        key=hashlib.sha256(key_seed.to_bytes(8, "big")).digest(),
        rng=seeded_rng(derive_insecure_seed(insecure_seed, "partition-permutation")),
    )


@dataclass(frozen=True)
class PrivatePartition:
    """A build's partition and its counts. Under add-remove-one and user level the counts are
    PRIVATE statistics: show them to the operator on request, never store them.

    Attributes:
        partition: the chunks; ``num_unused`` is the replace-one tail or the records dropped by
            the per-user cap.
        unit, relation: what the guarantee protects, and against which change.
        num_records: ``N`` (public only under replace-one).
        num_users: distinct users (user level; private), else None.
    """

    partition: Partition
    unit: PrivacyUnit
    relation: AdjacencyRelation
    num_records: int
    num_users: int | None

    @property
    def counts_are_public(self) -> bool:
        return self.relation is AdjacencyRelation.REPLACE_ONE

    @property
    def num_protected_units(self) -> int:
        """What δ must be small against: records, or users at user level."""
        if self.unit is PrivacyUnit.USER:
            assert self.num_users is not None  # partition_private_records counts users at user level
            return self.num_users
        return self.num_records

    def describe_counts(self) -> str:
        """The counts in words, for the operator's eyes only."""
        if self.unit is PrivacyUnit.USER:
            return (
                f"{self.num_records} records of {self.num_users} users; {self.partition.num_unused} "
                "records beyond --max-records-per-user were dropped"
            )
        return f"{self.num_records} records, {self.partition.num_unused} unused by the partition"


def partition_private_records(
    *,
    unit: PrivacyUnit,
    relation: AdjacencyRelation,
    record_ids: Sequence[str] | None,
    user_ids: Sequence[str] | None,
    num_records: int,
    shots_per_chunk: int,
    num_chunks: int | None,
    max_records_per_user: int | None,
    insecure_seed: int | None,
) -> PrivatePartition:
    """Chunk ``num_records`` records for a guarantee per ``unit`` under ``relation``.

    Args:
        unit, relation: required; no defaults (see the module docstring's table).
        record_ids: one unique id per record (record level, add-remove-one), else unused.
        user_ids: one user id per record (user level), else unused.
        num_records: ``N``.
        shots_per_chunk: ``s`` (replace-one cuts ``floor(N/s)`` chunks of ``s``).
        num_chunks: the public ``m`` (add-remove-one and user level); must be None for
            replace-one, where ``m`` follows from the public ``N``.
        max_records_per_user: the public cap ``k`` (user level only).
        insecure_seed: None for OS entropy; a seed makes the partition reproducible (INSECURE).

    Raises:
        ParameterError: a missing or superfluous public parameter, user level with replace-one,
            or any error of the assignment functions (duplicate ids, ``N < s``, ...).
    """
    unit, relation = parse_privacy_unit(unit), AdjacencyRelation(relation)
    check_int("shots_per_chunk", shots_per_chunk, minimum=1)
    check_partition_parameters(
        unit=unit, relation=relation, num_chunks=num_chunks, max_records_per_user=max_records_per_user
    )
    randomness = partition_randomness(insecure_seed)
    num_users = None
    if unit is PrivacyUnit.USER:
        if user_ids is None or len(user_ids) != num_records:
            raise ParameterError("user level needs one user id per record")
        assert num_chunks is not None and max_records_per_user is not None  # check_partition_parameters
        by_user = partition_by_user(
            user_ids, num_chunks=num_chunks, max_records_per_user=max_records_per_user, key=randomness.key
        )
        partition, num_users = by_user.partition, by_user.num_users
    elif relation is AdjacencyRelation.REPLACE_ONE:
        partition = partition_replace_one(num_records, shots_per_chunk=shots_per_chunk, rng=randomness.rng)
    else:
        if record_ids is None or len(record_ids) != num_records:
            raise ParameterError("add-remove-one needs one record id per record")
        assert num_chunks is not None  # check_partition_parameters
        partition = partition_add_remove_one(record_ids, num_chunks=num_chunks, key=randomness.key)
    return PrivatePartition(partition, unit, relation, num_records, num_users)


def check_partition_parameters(
    *,
    unit: PrivacyUnit,
    relation: AdjacencyRelation,
    num_chunks: int | None,
    max_records_per_user: int | None,
) -> None:
    """The public counts each unit/relation needs, and no others (a superfluous one would be
    silently ignored, so it is refused). Raises ParameterError naming the option."""
    if unit is PrivacyUnit.USER and relation is not AdjacencyRelation.ADD_REMOVE_ONE:
        raise ParameterError(
            "user-level privacy is add/remove one user (the number of users is private); "
            f"the neighbouring relation must be 'add-remove-one', got {relation.value!r}"
        )
    if relation is AdjacencyRelation.ADD_REMOVE_ONE and num_chunks is None:
        raise ParameterError(
            f"{'--privacy-unit user' if unit is PrivacyUnit.USER else 'add-remove-one'} needs a "
            "public, fixed number of chunks: pass --num-chunks (it must not be derived from the "
            "private data)"
        )
    if relation is AdjacencyRelation.REPLACE_ONE and num_chunks is not None:
        raise ParameterError(
            f"--num-chunks {num_chunks} is only for add-remove-one and user level; under "
            "replace-one m = floor(N / s) follows from the public N"
        )
    if unit is PrivacyUnit.USER and max_records_per_user is None:
        raise ParameterError("--privacy-unit user needs --max-records-per-user K (a public cap)")
    if unit is PrivacyUnit.RECORD and max_records_per_user is not None:
        raise ParameterError(f"--max-records-per-user {max_records_per_user} is only for --privacy-unit user")
    for name, value in (("num_chunks", num_chunks), ("max_records_per_user", max_records_per_user)):
        if value is not None:
            check_int(name, value, minimum=1)
