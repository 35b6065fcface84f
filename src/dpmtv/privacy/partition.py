"""Split the private records into disjoint chunks, each record in at most one chunk.

Two assignments, one per neighbouring relation (docs/design.md §1, §2):

* :func:`partition_replace_one`: a uniformly random permutation of the ``N`` record positions,
  drawn from OS entropy and never stored, cut into ``m = floor(N / s)`` chunks of exactly ``s``
  records; the ``N - m*s`` leftover records are unused. The permutation depends only on the
  public ``N``, never on record contents, so in the coupling where both neighbouring datasets use
  the same permutation, the replaced record's position falls in exactly one chunk (or in the
  unused tail) and every other chunk is identical.
* :func:`partition_add_remove_one`: record-addressed assignment, ``chunk = HMAC-SHA256(key, id)
  mod m`` for a public, fixed ``m``. Adding or removing a record changes the membership of exactly
  one chunk; all other chunks keep the same records in the same relative order.

The only randomness source for the permutation is :func:`secure_rng`; :func:`seeded_rng` exists
for explicitly insecure, reproducible experiments.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from dpmtv.errors import ParameterError
from dpmtv.privacy._checks import check_int

__all__ = [
    "Partition",
    "SparseChunks",
    "fresh_partition_key",
    "partition_add_remove_one",
    "partition_replace_one",
    "secure_rng",
    "seeded_rng",
]


_NO_RECORDS = np.empty(0, dtype=np.int64)
_NO_RECORDS.flags.writeable = False


class SparseChunks(Sequence[np.ndarray]):
    """``m`` chunks of which only the non-empty ones are stored.

    Under add-remove-one and user level ``m`` is public and may far exceed the number of records
    (``--num-chunks 100000000`` with 8 records): empty chunks contribute nothing to the sum, so
    memory and work stay O(non-empty chunks), while ``len`` is still the public ``m`` that the
    mean divides by."""

    def __init__(self, nonempty: Mapping[int, np.ndarray], num_chunks: int):
        self._nonempty = {int(j): chunk for j, chunk in sorted(nonempty.items()) if len(chunk)}
        self._num_chunks = num_chunks

    def __len__(self) -> int:
        return self._num_chunks

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, index: slice) -> list[np.ndarray]: ...

    def __getitem__(self, index: int | slice) -> np.ndarray | list[np.ndarray]:
        if isinstance(index, slice):
            return [self[j] for j in range(*index.indices(len(self)))]
        j = range(self._num_chunks)[index]  # bounds and negative indices as for a tuple
        return self._nonempty.get(j, _NO_RECORDS)

    def nonempty(self) -> list[np.ndarray]:
        """The non-empty chunks, in chunk order."""
        return list(self._nonempty.values())

    def nonempty_items(self) -> list[tuple[int, np.ndarray]]:
        """(chunk index, chunk) of the non-empty chunks, in chunk order."""
        return list(self._nonempty.items())


@dataclass(frozen=True)
class Partition:
    """Disjoint chunks of record indices.

    Attributes:
        chunks: one ``int64`` array per chunk, indices into the caller's record list (a tuple, or
            :class:`SparseChunks` where most chunks may be empty).
        num_unused: records assigned to no chunk (the replace-one leftover; 0 for add-remove).
    """

    chunks: Sequence[np.ndarray]
    num_unused: int

    @property
    def num_chunks(self) -> int:
        """The number of chunks ``m`` (public under both relations)."""
        return len(self.chunks)

    def nonempty_chunks(self) -> list[np.ndarray]:
        """The chunks that hold records, in chunk order, without visiting the empty ones."""
        return [chunk for _, chunk in self.nonempty_items()]

    def nonempty_items(self) -> list[tuple[int, np.ndarray]]:
        """(chunk index, chunk) of the chunks that hold records, in chunk order, without visiting
        the empty ones."""
        if isinstance(self.chunks, SparseChunks):
            return self.chunks.nonempty_items()
        return [(j, chunk) for j, chunk in enumerate(self.chunks) if len(chunk)]


def secure_rng() -> np.random.Generator:
    """A numpy Generator seeded with 256 bits of OS entropy (``secrets.randbits``).

    The seed is not stored or returned, so the draws cannot be reproduced.
    """
    return np.random.Generator(np.random.PCG64(secrets.randbits(256)))


def seeded_rng(seed: int) -> np.random.Generator:
    """A reproducible numpy Generator for the explicitly INSECURE seeded mode.

    Anyone who knows ``seed`` knows every draw; never use it for a real release.
    """
    return np.random.Generator(np.random.PCG64(check_int("seed", seed, minimum=0)))


def partition_replace_one(num_records: int, *, shots_per_chunk: int, rng: np.random.Generator) -> Partition:
    """Shuffle ``num_records`` positions and cut ``floor(N / s)`` chunks of exactly ``s``.

    Args:
        num_records: ``N``, public under replace-one.
        shots_per_chunk: ``s``, records per chunk (>= 1).
        rng: the permutation source; :func:`secure_rng` for a real release.

    Raises:
        ParameterError: ``s < 1``, ``N < 0``, or ``N < s`` (no full chunk); names both numbers.
    """
    check_int("shots_per_chunk", shots_per_chunk, minimum=1)
    check_int("num_records", num_records, minimum=0)
    if num_records < shots_per_chunk:
        raise ParameterError(
            f"num_records ({num_records}) is smaller than shots_per_chunk ({shots_per_chunk}): "
            "not even one chunk can be filled; use fewer shots per chunk or more records"
        )
    num_chunks = num_records // shots_per_chunk
    order = rng.permutation(num_records).astype(np.int64)
    used = order[: num_chunks * shots_per_chunk].reshape(num_chunks, shots_per_chunk)
    chunks = tuple(np.array(row) for row in used)  # (m,) arrays of s indices
    return Partition(chunks=chunks, num_unused=num_records - num_chunks * shots_per_chunk)


def fresh_partition_key() -> bytes:
    """A fresh 32-byte HMAC key from OS entropy, drawn once per build and never stored."""
    return secrets.token_bytes(32)


def partition_add_remove_one(record_ids: Sequence[str], *, num_chunks: int, key: bytes) -> Partition:
    """Assign each record to chunk ``HMAC-SHA256(key, record_id) mod num_chunks``.

    The chunk of a record depends only on its own id and the key, so adding or removing one record
    changes the membership of exactly one chunk; every other chunk keeps the same records in the
    same relative (input) order. ``num_chunks`` is public and fixed; chunks may be empty or of
    different sizes, and none is dropped, so ``num_unused`` is 0.

    The key must be drawn fresh for every build with :func:`fresh_partition_key`
    (``secrets.token_bytes(32)``) and never stored: with it, an observer could tell which chunk a
    given id went to. The modulo bias of a 256-bit digest is below ``m / 2**256``.

    Raises:
        ParameterError: ``num_chunks < 1``, an empty key, a non-string id, or a duplicate id
            (the id is the unit of privacy, so it must be unique).
    """
    check_int("num_chunks", num_chunks, minimum=1)
    if not isinstance(key, (bytes, bytearray)) or len(key) == 0:
        raise ParameterError("key must be non-empty bytes; use fresh_partition_key()")
    assignment = np.fromiter(
        (_chunk_of(rid, key, num_chunks) for rid in _unique_ids(record_ids)),
        dtype=np.int64,
        count=len(record_ids),
    )
    return Partition(chunks=group_by_chunk(assignment, num_chunks), num_unused=0)


def group_by_chunk(assignment: np.ndarray, num_chunks: int) -> SparseChunks:
    """Record indices grouped by their chunk, each group in input order: O(N log N), whatever m."""
    order = np.argsort(assignment, kind="stable")  # stable: input order inside a chunk
    chunk_ids, starts = np.unique(assignment[order], return_index=True)
    groups = np.split(order.astype(np.int64), starts[1:]) if len(order) else []
    return SparseChunks(dict(zip(chunk_ids.tolist(), groups, strict=True)), num_chunks)


def _unique_ids(record_ids: Sequence[str]) -> Sequence[str]:
    seen: set[str] = set()
    for index, rid in enumerate(record_ids):
        if not isinstance(rid, str):
            raise ParameterError(f"record id at index {index} must be a str, got {rid!r}")
        if rid in seen:
            raise ParameterError(
                f"duplicate record id {rid!r} (index {index}); under add-remove-one the record id "
                "is the unit of privacy and must be unique"
            )
        seen.add(rid)
    return record_ids


def _chunk_of(record_id: str, key: bytes, num_chunks: int) -> int:
    digest = hmac.new(bytes(key), record_id.encode("utf-8"), hashlib.sha256).digest()
    return int.from_bytes(digest, "big") % num_chunks
