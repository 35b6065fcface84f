"""Where per-chunk work runs: in this process (:class:`LocalExecutor`) or on Ray workers
(:class:`dpmtv.distributed.RayExecutor`). Three kinds of work share it, each a
:class:`ChunkTask` that is a function of one chunk's records at a time:

* :class:`ClippedSum` — the build's release: the sum of the chunks' clipped vectors (the build
  takes its mean and adds noise once, on the driver);
* :class:`ClippedRows` — the sensitivity audit (:mod:`dpmtv.audit.sensitivity`): the clipped
  vector of each chunk, kept in the driver's memory;
* :class:`dpmtv.selection.private.HeadVotes` — private head selection: each chunk's vote (the
  driver checks the votes' structure and builds the histogram).

The first two run the build's own extraction, :func:`dpmtv.build.iter_clipped_chunks` (prompt
rendering, one forward pass per chunk, centring, per-layer clipping), so distributed results are
the local ones computed in pieces.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from dpmtv.data.records import Record
from dpmtv.errors import DistributedError
from dpmtv.heads import HeadSet
from dpmtv.privacy import ClippedSumAccumulator, Partition
from dpmtv.privacy.aggregate import max_clipped_sum_norm

__all__ = [
    "ChunkJob",
    "ChunkTask",
    "ClippedRows",
    "ClippedSum",
    "Executor",
    "LocalExecutor",
    "ModelSource",
    "sum_clipped_chunks",
]


@dataclass(frozen=True)
class ModelSource:
    """How a worker loads the driver's model (once per worker): the arguments of
    :func:`dpmtv.models.loading.load_model`. On a cluster the checkpoint folder must exist at the
    same path on every node; workers check that they loaded the same weights as the driver."""

    name_or_path: str
    dtype: str = "float32"
    device: str = "cpu"
    adapter_spec: str | None = None
    trust_remote_code: bool = False

    def load(self):
        from dpmtv.models.loading import load_model

        return load_model(
            self.name_or_path,
            dtype=self.dtype,
            device=self.device,
            adapter_spec=self.adapter_spec,
            trust_remote_code=self.trust_remote_code,
        )


class ChunkTask(Protocol):
    """Work on some chunks, all of its parameters public (it is sent to workers).

    ``run`` gets a record list and a partition of it (a worker: one batch of chunks, their ids
    renumbered from 0) and must treat each chunk on its own — one forward pass per chunk — so that
    its result for a chunk is a function of that chunk's records alone. It covers the non-empty
    chunks only (an empty chunk contributes nothing, and executors send none). ``combine`` joins
    the results of consecutive batches, given in chunk order, into the result for all chunks.
    """

    shots_per_chunk: int  # records per chunk that travel to a worker
    description: str  # for the progress bar

    # Optional: ``check_batch(value, *, batch_id, num_chunks)``, the driver's check of one batch's
    # result from a worker (raises DistributedError); ClippedSum checks its sum's norm.

    def run(self, loaded, records: Sequence[Record], partition: Partition, *, progress: bool) -> Any: ...

    def combine(self, results: list[Any]) -> Any: ...


class Executor(Protocol):
    workers: int

    def run(
        self, loaded, records: Sequence[Record], partition: Partition, task: ChunkTask, *, progress: bool
    ) -> Any:
        """``task``'s result for all of ``partition``'s non-empty chunks."""
        ...


class LocalExecutor:
    """Runs a task in this process, chunk after chunk (the default)."""

    workers = 1

    def run(self, loaded, records, partition, task: ChunkTask, *, progress: bool = False) -> Any:
        return task.combine([task.run(loaded, records, partition, progress=progress)])


@dataclass(frozen=True)
class ChunkJob:
    """What every chunk of one extraction shares, all public: the heads, the build settings
    (prompt format, token budget), the centring reference and the clip norms."""

    heads: HeadSet
    settings: Any  # dpmtv.settings.BuildSettings
    reference: dict[int, np.ndarray]  # layer -> (k_l*d,)
    l2_clip_norms: dict[int, float]

    @property
    def layer_dims(self) -> dict[int, int]:
        return {layer: int(np.size(self.reference[layer])) for layer in self.heads.layers}

    @property
    def shots_per_chunk(self) -> int:
        return self.settings.shots_per_chunk

    def clipped_chunks(self, loaded, records, partition, *, progress: bool):
        """:func:`dpmtv.build.iter_clipped_chunks` with this job: per non-empty chunk,
        ``{layer: (1, k_l*d)}``."""
        from dpmtv.build import iter_clipped_chunks  # build imports this module

        settings = dataclasses.replace(self.settings, progress=progress)
        return iter_clipped_chunks(
            loaded, records, partition, self.heads, settings, self.reference, self.l2_clip_norms
        )


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

    def run(self, loaded, records, partition, *, progress: bool) -> ClippedSumAccumulator:
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

    def check_batch(self, value, *, batch_id: int, num_chunks: int) -> None:
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

    def run(self, loaded, records, partition, *, progress: bool) -> np.ndarray:
        layers = self.job.heads.layers
        rows = [
            np.concatenate([clipped[layer] for layer in layers], axis=1).astype(np.float64)
            for clipped in self.job.clipped_chunks(loaded, records, partition, progress=progress)
        ]
        return np.concatenate(rows) if rows else np.zeros((0, sum(self.job.layer_dims.values())))

    def combine(self, results: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(results)


def sum_clipped_chunks(
    loaded,
    records: Sequence[Record],
    partition: Partition,
    heads: HeadSet,
    settings,
    reference: dict[int, np.ndarray],
    l2_clip_norms: dict[int, float],
    *,
    executor: Executor | None = None,
) -> ClippedSumAccumulator:
    """The sum of every chunk's clipped vector, ``Σ_j â_j`` per layer, by ``executor`` (default:
    this process). Un-noised: the caller takes the mean and noises it once."""
    task = ClippedSum(ChunkJob(heads, settings, reference, l2_clip_norms))
    return (executor or LocalExecutor()).run(loaded, records, partition, task, progress=settings.progress)
