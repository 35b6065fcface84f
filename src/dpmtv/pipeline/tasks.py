"""The build's chunk tasks (:class:`dpmtv.forward.executor.ChunkTask`), each a function of one chunk's
records at a time, run by an executor in this process or on Ray workers:

* :class:`ClippedSum` — the build's release: the sum of the chunks' clipped vectors (the build
  takes its mean and adds noise once, on the driver);
* :class:`ClippedRows` — the sensitivity audit (:mod:`dpmtv.audit.sensitivity`): the clipped
  vector of each chunk, kept in the driver's memory;
* :class:`CenteredRows` — a build with a private clip norm (:mod:`dpmtv.pipeline.private_clip`):
  each chunk's centered, not yet clipped vector, kept in the driver's memory until the norms are
  chosen and the rows clipped and summed there.

Both run the build's own extraction, :func:`iter_clipped_chunks` (prompt rendering, the private
forward passes — one chunk per pass or fixed public shapes —, centering, per-layer clipping), so
distributed results are the local ones computed in pieces. (Private selection's votes are
:class:`dpmtv.selection.private.HeadVotes`.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from dpmtv._progress import progress_bar
from dpmtv.data.records import Record
from dpmtv.errors import DistributedError
from dpmtv.forward.executor import Executor, LocalExecutor
from dpmtv.forward.extract import extract_each_chunk
from dpmtv.forward.prompt_budget import resolve_max_prompt_tokens
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.partition import ChunkPrompts
from dpmtv.pipeline.private_batching import fixed_shape_of
from dpmtv.pipeline.settings import BuildSettings
from dpmtv.privacy import ClippedSumAccumulator, Partition, clip_l2_per_layer
from dpmtv.privacy.aggregate import max_clipped_sum_norm

__all__ = [
    "CenteredRows",
    "ChunkJob",
    "ClippedRows",
    "ClippedSum",
    "clipped_sum_of_rows",
    "iter_centered_chunks",
    "iter_clipped_chunks",
    "sum_clipped_chunks",
]


def iter_clipped_chunks(
    loaded: LoadedModel,
    records: Sequence[Record],
    partition: Partition,
    heads: HeadSet,
    settings: BuildSettings,
    reference: dict[int, np.ndarray],
    clip_norms: dict[int, float],
) -> Iterator[dict[int, np.ndarray]]:
    """:func:`iter_centered_chunks`, each chunk clipped per layer to ``clip_norms``."""
    for centered in iter_centered_chunks(loaded, records, partition, heads, settings, reference):
        yield clip_l2_per_layer(centered, l2_clip_norms=clip_norms)


def iter_centered_chunks(
    loaded: LoadedModel,
    records: Sequence[Record],
    partition: Partition,
    heads: HeadSet,
    settings: BuildSettings,
    reference: dict[int, np.ndarray],
) -> Iterator[dict[int, np.ndarray]]:
    """Per non-empty chunk: the selected heads' last-token outputs, centered,
    ``{layer: (1, k_l*d)}`` — each from the chunk's own forward pass or its row, fixed by
    its chunk id, of a pass of fixed public shapes, so a function of that chunk alone
    (:func:`~dpmtv.forward.extract.extract_each_chunk`, :mod:`dpmtv.forward.fixed_shapes`); a chunk that the
    public prompt-length rule drops, or whose computation fails (:mod:`dpmtv.forward.failed_chunks`),
    yields zero rows (it contributes nothing). These are private, un-noised per-chunk
    values: the build sums them away at once; experiments (audits, sweeps) may hold them in
    memory, never write them."""
    prompts = ChunkPrompts(
        records,
        partition,
        shots_per_chunk=settings.shots_per_chunk,
        query=settings.query_source,
        query_question=settings.query_question,
    )
    budget = resolve_max_prompt_tokens(loaded.adapter, settings.max_prompt_tokens)
    extract = extract_each_chunk(
        loaded.adapter,
        prompts,
        heads,
        max_prompt_tokens=budget,
        prepare_workers=settings.prepare_workers,
        fixed_shape=fixed_shape_of(loaded.adapter, settings),
        slots=prompts.chunk_ids,
    )
    with progress_bar("extracting chunks", len(prompts), enabled=settings.progress) as advance:
        for activations in extract:
            if activations is None:  # dropped by a public rule (budget, failed chunk): no contribution
                yield {layer: np.zeros((1, np.size(reference[layer]))) for layer in heads.layers}
            else:
                yield {layer: values - reference[layer] for layer, values in activations.items()}
            advance(1)


@dataclass(frozen=True)
class ChunkJob:
    """What every chunk of one extraction shares, all public: the heads, the build settings
    (prompt format, token budget), the centering reference and the clip norms."""

    heads: HeadSet
    settings: BuildSettings
    reference: dict[int, np.ndarray]  # layer -> (k_l*d,)
    l2_clip_norms: dict[int, float]

    @property
    def layer_dims(self) -> dict[int, int]:
        return {layer: int(np.size(self.reference[layer])) for layer in self.heads.layers}

    @property
    def shots_per_chunk(self) -> int:
        return self.settings.shots_per_chunk

    def clipped_chunks(
        self, loaded: LoadedModel, records: Sequence[Record], partition: Partition, *, progress: bool
    ) -> Iterator[dict[int, np.ndarray]]:
        """:func:`iter_clipped_chunks` with this job: per non-empty chunk, ``{layer: (1, k_l*d)}``."""
        settings = dataclasses.replace(self.settings, progress=progress)
        return iter_clipped_chunks(
            loaded, records, partition, self.heads, settings, self.reference, self.l2_clip_norms
        )

    def centered_chunks(
        self, loaded: LoadedModel, records: Sequence[Record], partition: Partition, *, progress: bool
    ) -> Iterator[dict[int, np.ndarray]]:
        """:func:`iter_centered_chunks` with this job (its clip norms unused)."""
        settings = dataclasses.replace(self.settings, progress=progress)
        return iter_centered_chunks(loaded, records, partition, self.heads, settings, self.reference)


@dataclass(frozen=True)
class _ClippedChunksTask:
    """What the build's extraction tasks share: the job, and the records a chunk sends."""

    job: ChunkJob
    description: ClassVar[str] = "extracting chunks"

    @property
    def shots_per_chunk(self) -> int:
        return self.job.shots_per_chunk


@dataclass(frozen=True)
class ClippedSum(_ClippedChunksTask):
    """The sum of the chunks' clipped vectors, ``Σ_j â_j`` per layer (un-noised)."""

    def run(
        self, loaded: LoadedModel, records: Sequence[Record], partition: Partition, *, progress: bool
    ) -> ClippedSumAccumulator:
        accumulator = ClippedSumAccumulator(self.job.layer_dims)
        for clipped in self.job.clipped_chunks(loaded, records, partition, progress=progress):
            accumulator.add(clipped)
        return accumulator

    def combine(self, results: list[ClippedSumAccumulator]) -> ClippedSumAccumulator:
        """Added in the order given (chunk order), so that the sum does not depend on which worker
        finished first (float addition is not associative)."""
        total = ClippedSumAccumulator(self.job.layer_dims)
        for accumulator in results:
            total.merge(accumulator)
        return total

    def check_batch(self, value: object, *, batch_id: int, num_chunks: int) -> None:
        """A worker's sum for ``num_chunks`` chunks: one row per chunk, and per layer an L2 norm
        no clipped chunks can exceed, ``n·C_l`` up to float rounding
        (:func:`~dpmtv.privacy.aggregate.max_clipped_sum_norm`) — so the whole sum is within
        ``n·‖C‖``, ``‖C‖ = sqrt(Σ_l C_l²)``. A sum beyond it (a bug or a tampered worker) would
        break Δ: refused before the noise. The message names no norm (it is private)."""
        dims, norms = self.job.layer_dims, self.job.l2_clip_norms
        if (
            not isinstance(value, ClippedSumAccumulator)
            or value.layer_dims != dims
            or value.num_rows != num_chunks
        ):
            raise DistributedError(
                f"batch {batch_id}: the worker's answer is not a sum of {num_chunks} chunk(s) over "
                f"layers {sorted(dims)}; refused before the noise"
            )
        bounds = {
            layer: max_clipped_sum_norm(norms[layer], num_rows=num_chunks, dim=dims[layer]) for layer in dims
        }
        above = value.layers_above(bounds)
        if above:
            layer = above[0]
            raise DistributedError(
                f"batch {batch_id}: the worker's sum of {num_chunks} clipped chunk(s) has an L2 norm above "
                f"{num_chunks}·C = {bounds[layer]:.6g} in layer {layer}, more than clipped chunks can sum "
                "to; refused before the noise"
            )


@dataclass(frozen=True)
class ClippedRows(_ClippedChunksTask):
    """Each non-empty chunk's clipped vector, layers concatenated, float64 ``(chunks, Σ k_l*d)``.
    Private and un-noised: for audits and experiments that hold them in memory, never write them."""

    def run(
        self, loaded: LoadedModel, records: Sequence[Record], partition: Partition, *, progress: bool
    ) -> np.ndarray:
        layers = self.job.heads.layers
        rows = [
            np.concatenate([clipped[layer] for layer in layers], axis=1).astype(np.float64)
            for clipped in self.job.clipped_chunks(loaded, records, partition, progress=progress)
        ]
        return np.concatenate(rows) if rows else np.zeros((0, sum(self.job.layer_dims.values())))

    def combine(self, results: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(results)


@dataclass(frozen=True)
class CenteredRows(_ClippedChunksTask):
    """Each non-empty chunk's centered vector before clipping, ``{layer: (chunks, k_l*d)}``
    float64, for a clip norm chosen privately from them. Private and un-noised: held in the
    driver's memory, clipped and summed there, never written."""

    def run(
        self, loaded: LoadedModel, records: Sequence[Record], partition: Partition, *, progress: bool
    ) -> dict[int, np.ndarray]:
        chunks = list(self.job.centered_chunks(loaded, records, partition, progress=progress))
        return self.combine([{layer: chunk[layer] for layer in self.job.heads.layers} for chunk in chunks])

    def combine(self, results: list[dict[int, np.ndarray]]) -> dict[int, np.ndarray]:
        """Stacked in the order given (chunk order)."""
        dims = self.job.layer_dims
        return {
            layer: np.concatenate([r[layer] for r in results]).astype(np.float64)
            if results
            else np.zeros((0, dims[layer]))
            for layer in self.job.heads.layers
        }

    def check_batch(self, value: object, *, batch_id: int, num_chunks: int) -> None:
        """A worker's rows: one per chunk in each layer, of the layer's width, finite."""
        dims = self.job.layer_dims
        if (
            not isinstance(value, dict)
            or sorted(value) != sorted(dims)
            or any(np.shape(value[layer]) != (num_chunks, dims[layer]) for layer in dims)
            or not all(np.all(np.isfinite(value[layer])) for layer in dims)
        ):
            raise DistributedError(
                f"batch {batch_id}: the worker's answer is not {num_chunks} finite chunk row(s) over "
                f"layers {sorted(dims)}; refused before the noise"
            )


def sum_clipped_chunks(
    loaded: LoadedModel,
    records: Sequence[Record],
    partition: Partition,
    heads: HeadSet,
    settings: BuildSettings,
    reference: dict[int, np.ndarray],
    l2_clip_norms: dict[int, float],
    *,
    executor: Executor | None = None,
) -> ClippedSumAccumulator:
    """The sum of every chunk's clipped vector, ``Σ_j â_j`` per layer, by ``executor`` (default:
    this process). Un-noised: the caller takes the mean and noises it once."""
    task = ClippedSum(ChunkJob(heads, settings, reference, l2_clip_norms))
    total: ClippedSumAccumulator = (executor or LocalExecutor()).run(
        loaded, records, partition, task, progress=settings.progress
    )
    return total


def clipped_sum_of_rows(
    rows: dict[int, np.ndarray], layers: Sequence[int], l2_clip_norms: dict[int, float]
) -> ClippedSumAccumulator:
    """:class:`CenteredRows`' rows clipped chunk by chunk at ``l2_clip_norms`` and summed in chunk
    order: the sum :class:`ClippedSum` accumulates from the same chunks (un-noised)."""
    accumulator = ClippedSumAccumulator({layer: rows[layer].shape[1] for layer in layers})
    for j in range(len(rows[layers[0]])):
        accumulator.add(
            clip_l2_per_layer(
                {layer: rows[layer][j : j + 1] for layer in layers}, l2_clip_norms=l2_clip_norms
            )
        )
    return accumulator
