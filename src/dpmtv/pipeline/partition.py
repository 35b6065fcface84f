"""From records to chunks: partition dispatch, chunk record lists, lazy chunk-prompt rendering.

Model-free and privacy-free glue: the partition functions themselves live in ``dpmtv.privacy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import numpy as np

from dpmtv.data.prompts import Prompt, chunk_prompt
from dpmtv.data.records import Record
from dpmtv.errors import RecordError
from dpmtv.pipeline.settings import BuildSettings
from dpmtv.privacy import (
    AdjacencyRelation,
    Partition,
    PrivacyUnit,
    PrivatePartition,
    partition_private_records,
)
from dpmtv.privacy.noisy_top_k import parallel_half, parallel_half_sizes
from dpmtv.privacy.partition import SparseChunks


def partition_for_build(
    records: Sequence[Record], settings: BuildSettings
) -> tuple[PrivatePartition, Partition, Partition]:
    """The build's partition of ``records`` and its (selection, release) chunks, in one pass down:
    all and all for sequential composition (or no private selection), disjoint halves for
    parallel composition (:func:`parallel_composition_halves`)."""
    chunked = partition_records(
        records,
        unit=settings.privacy_unit,
        relation=settings.relation,
        shots_per_chunk=settings.shots_per_chunk,
        num_chunks=settings.num_chunks,
        max_records_per_user=settings.max_records_per_user,
        insecure_seed=settings.insecure_seed,
    )
    selection = settings.private_selection
    if selection is None or selection.composition == "sequential":
        return chunked, chunked.partition, chunked.partition
    return (chunked, *parallel_composition_halves(chunked.partition))


def partition_records(
    records: Sequence[Record],
    *,
    unit: PrivacyUnit,
    relation: AdjacencyRelation,
    shots_per_chunk: int,
    num_chunks: int | None,
    max_records_per_user: int | None,
    insecure_seed: int | None,
) -> PrivatePartition:
    """The build's partition of ``records`` by :func:`dpmtv.privacy.partition_private_records`
    (no default unit or relation: the caller must say what the guarantee protects). Checks first
    that every record carries the id the assignment hashes, naming the first record without."""
    record_ids: list[str] | None = None
    user_ids: list[str] | None = None
    if unit is PrivacyUnit.USER:
        anonymous = next((r for r in records if r.user_id is None), None)
        if anonymous is not None:
            raise RecordError(f"{anonymous.where}: field 'user_id' is missing; --privacy-unit user needs it")
        user_ids = [str(r.user_id) for r in records]
    elif relation is AdjacencyRelation.ADD_REMOVE_ONE:
        unnamed = next((r for r in records if not r.has_explicit_id), None)
        if unnamed is not None:
            raise RecordError(
                f"{unnamed.where}: field 'id' is missing; add-remove-one assigns chunks by a keyed "
                "hash of each record's id, so every record needs a stable, unique 'id'"
            )
        record_ids = [r.record_id for r in records]
    return partition_private_records(
        unit=unit,
        relation=relation,
        record_ids=record_ids,
        user_ids=user_ids,
        num_records=len(records),
        shots_per_chunk=shots_per_chunk,
        num_chunks=num_chunks,
        max_records_per_user=max_records_per_user,
        insecure_seed=insecure_seed,
    )


def parallel_composition_halves(partition: Partition) -> tuple[Partition, Partition]:
    """(selection half, release half) of ``partition`` for parallel composition
    (:func:`dpmtv.privacy.noisy_top_k.parallel_half` of each chunk), visiting and storing only the
    non-empty chunks; each half keeps its public size (``ceil(m/2)``, ``floor(m/2)``)."""
    halves: tuple[dict[int, np.ndarray], dict[int, np.ndarray]] = ({}, {})
    for j, chunk in partition.nonempty_items():
        half, position = parallel_half(j)
        halves[half][position] = chunk
    selection_size, release_size = parallel_half_sizes(partition.num_chunks)
    unused = partition.num_unused
    return (
        Partition(chunks=SparseChunks(halves[0], num_chunks=selection_size), num_unused=unused),
        Partition(chunks=SparseChunks(halves[1], num_chunks=release_size), num_unused=unused),
    )


def chunk_records(
    records: Sequence[Record], partition: Partition, shots_per_chunk: int
) -> list[list[Record]]:
    """Each chunk's records (empty chunks included), cut to ``shots_per_chunk``."""
    return [[records[int(i)] for i in chunk[:shots_per_chunk]] for chunk in partition.chunks]


class ChunkPrompts(Sequence[Prompt]):
    """Chunk prompts rendered (images decoded) only when a batch asks for them, so memory stays
    flat in the number of records. Empty chunks are skipped: they contribute nothing to the sum,
    and the mean still divides by the public m."""

    def __init__(
        self,
        records: Sequence[Record],
        partition: Partition,
        *,
        shots_per_chunk: int,
        query: str,
        query_question: str,
    ):
        self._records = records
        items = partition.nonempty_items()
        self._chunks = [chunk for _, chunk in items]
        self.chunk_ids = [j for j, _ in items]  # public positions in the partition, increasing
        self._shots = shots_per_chunk
        self._query, self._question = query, query_question

    def __len__(self) -> int:
        return len(self._chunks)

    @overload
    def __getitem__(self, index: int) -> Prompt: ...

    @overload
    def __getitem__(self, index: slice) -> list[Prompt]: ...

    def __getitem__(self, index: int | slice) -> Prompt | list[Prompt]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        chunk = [self._records[int(i)] for i in self._chunks[index][: self._shots]]
        return chunk_prompt(chunk, query=self._query, query_question=self._question)
