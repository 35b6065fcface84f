"""From records to chunk prompts: partition dispatch, chunk record lists, lazy prompt rendering.

Model-free and privacy-free glue: the partition functions themselves live in ``dpmtv.privacy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from dpmtv.data.records import Record
from dpmtv.errors import ParameterError, RecordError
from dpmtv.privacy import (
    AdjacencyRelation,
    Partition,
    PrivacyUnit,
    PrivatePartition,
    partition_private_records,
)
from dpmtv.privacy.noisy_top_k import parallel_half, parallel_half_sizes
from dpmtv.privacy.partition import SparseChunks
from dpmtv.prompts import Example, Prompt, blank_image


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
    record_ids = user_ids = None
    if unit is PrivacyUnit.USER:
        anonymous = next((r for r in records if r.user_id is None), None)
        if anonymous is not None:
            raise RecordError(f"{anonymous.where}: field 'user_id' is missing; --privacy-unit user needs it")
        user_ids = [r.user_id for r in records]
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
    sizes = parallel_half_sizes(partition.num_chunks)
    return tuple(
        Partition(chunks=SparseChunks(chunks, num_chunks=size), num_unused=partition.num_unused)
        for chunks, size in zip(halves, sizes, strict=True)
    )


def nonempty_chunk_records(
    records: Sequence[Record], partition: Partition, shots_per_chunk: int
) -> list[list[Record]]:
    """The non-empty chunks' records, cut to ``shots_per_chunk``, in chunk order (O(non-empty
    chunks) for a huge public ``m``)."""
    return [[records[int(i)] for i in chunk[:shots_per_chunk]] for chunk in partition.nonempty_chunks()]


def chunk_records(
    records: Sequence[Record], partition: Partition, shots_per_chunk: int
) -> list[list[Record]]:
    """Each chunk's records (empty chunks included), cut to ``shots_per_chunk``."""
    return [[records[int(i)] for i in chunk[:shots_per_chunk]] for chunk in partition.chunks]


class ChunkPrompts(Sequence):
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
        self._chunks = partition.nonempty_chunks()
        self._shots = shots_per_chunk
        self._query, self._question = query, query_question

    def __len__(self) -> int:
        return len(self._chunks)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        chunk = [self._records[int(i)] for i in self._chunks[index][: self._shots]]
        return chunk_prompt(chunk, query=self._query, query_question=self._question)


def chunk_prompt(chunk: Sequence[Record], *, query: str, query_question: str) -> Prompt:
    """One chunk's prompt: its records as demonstrations, then the query (docs/design.md §2)."""
    if query == "record":
        *demos, last = chunk
        query_example = Example(last.load_images(), last.question)
    else:
        demos = list(chunk)
        query_example = Example((public_query_image(query),), query_question)
    return Prompt(tuple(Example(r.load_images(), r.question, r.answer) for r in demos), query_example)


def public_query_image(query: str) -> Image.Image:
    if query == "blank":
        return blank_image()
    try:
        with Image.open(Path(query)) as image:
            return image.convert("RGB")
    except OSError as exc:
        raise ParameterError(
            f"--query '{query}' is neither 'record', 'blank' nor a readable image: {exc}"
        ) from None
