"""What travels between the driver and the workers of a distributed extraction, and the driver's
check that the workers covered every chunk exactly once.

A worker receives a :class:`ChunkBatch`: chunk ids (positions in the build's partition) and each
chunk's records, already cut to ``shots_per_chunk`` — non-empty chunks only: an empty chunk
contributes nothing, and a public ``m`` far above the number of records (``--num-chunks
100000000``) must not cost ``m`` messages. It never sees the partition key, the other chunks, the
unused records or any record index. It returns a :class:`BatchResult`: its task's result for
those chunks (a sum of clipped vectors, per-chunk vectors or votes) and the ids it covered.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpmtv.data.records import Record
from dpmtv.errors import DistributedError, ParameterError
from dpmtv.privacy import Partition
from dpmtv.privacy.partition import SparseChunks

__all__ = ["BatchResult", "ChunkBatch", "check_coverage", "chunks_as_partition", "split_batches"]


@dataclass(frozen=True)
class ChunkBatch:
    """Some chunks' contents, as a worker receives them (empty chunks included: they cover their
    id and add nothing)."""

    batch_id: int
    chunk_ids: tuple[int, ...]
    chunks: tuple[tuple[Record, ...], ...]  # one record tuple per chunk id

    def as_partition(self) -> tuple[list[Record], Partition]:
        """The batch as the build's extraction takes it: a record list and a partition of it in
        which each chunk keeps its id (a fixed-shape private pass places a chunk by its id)."""
        records, dense = chunks_as_partition(self.chunks)
        placed = dict(zip(self.chunk_ids, dense.chunks, strict=True))
        size = max(self.chunk_ids, default=-1) + 1
        return records, Partition(chunks=SparseChunks(placed, num_chunks=size), num_unused=0)


def chunks_as_partition(chunks: Sequence[Sequence[Record]]) -> tuple[list[Record], Partition]:
    """Chunks given as record lists → one record list and the partition of it into those chunks."""
    records: list[Record] = []
    parts = []
    for chunk in chunks:
        parts.append(np.arange(len(records), len(records) + len(chunk), dtype=np.int64))
        records.extend(chunk)
    return records, Partition(chunks=tuple(parts), num_unused=0)


@dataclass
class BatchResult:
    """A worker's answer for one batch: its task's result for those chunks (private and un-noised:
    it lives in the driver's memory until combined, never written) and the chunk ids it covers."""

    batch_id: int
    chunk_ids: tuple[int, ...]
    value: Any


def split_batches(
    records: Sequence[Record], partition: Partition, *, shots_per_chunk: int, chunks_per_batch: int
) -> list[ChunkBatch]:
    """The non-empty chunks in chunk order, ``chunks_per_batch`` at a time, with their records."""
    if chunks_per_batch < 1:
        raise ParameterError(f"chunks_per_batch must be >= 1, got {chunks_per_batch}")
    items = partition.nonempty_items()
    batches = []
    for batch_id, start in enumerate(range(0, len(items), chunks_per_batch)):
        group = items[start : start + chunks_per_batch]
        ids = tuple(j for j, _ in group)
        chunks = tuple(tuple(records[int(i)] for i in chunk[:shots_per_chunk]) for _, chunk in group)
        batches.append(ChunkBatch(batch_id, ids, chunks))
    return batches


def check_coverage(parts: Iterable[BatchResult], *, chunk_ids: Sequence[int]) -> None:
    """Every chunk id of ``chunk_ids`` (the non-empty chunks the driver sent) covered by exactly
    one batch result, and no other id.

    A chunk counted twice (a retried batch whose first answer also arrived) would weigh its
    records twice (twice its vector in the sum, two votes) and break the sensitivity bound; a
    chunk missing would bias the mean. Either stops the work before its charge and its noise.
    """
    seen: dict[int, int] = {}
    for part in parts:
        for chunk_id in part.chunk_ids:
            if chunk_id in seen:
                raise DistributedError(
                    f"chunk {chunk_id} was returned by batch {seen[chunk_id]} and again by batch "
                    f"{part.batch_id}; a chunk must be counted exactly once"
                )
            seen[chunk_id] = part.batch_id
    expected = set(chunk_ids)
    missing, extra = sorted(expected - set(seen)), sorted(set(seen) - expected)
    if missing or extra:
        raise DistributedError(
            f"the workers' chunk ids are not the ones sent: missing {missing[:10]}, unknown {extra[:10]}"
        )
