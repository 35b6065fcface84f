"""Where a build's clipped chunk vectors are summed: in this process (:class:`LocalExecutor`) or
on Ray workers (:class:`dpmtv.distributed.ray.RayExecutor`); both return one
:class:`~dpmtv.privacy.ClippedSumAccumulator`, and the build takes its mean and adds noise once.

Both run the build's own extraction, :func:`dpmtv.build.iter_clipped_chunks` (prompt rendering,
one forward pass per chunk, centring, per-layer clipping), so a distributed sum is the local sum
computed in pieces.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dpmtv.data.records import Record
from dpmtv.heads import HeadSet
from dpmtv.privacy import ClippedSumAccumulator, Partition

__all__ = ["ChunkJob", "Executor", "LocalExecutor", "ModelSource", "sum_batch", "sum_clipped_chunks"]


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


@dataclass(frozen=True)
class ChunkJob:
    """What every chunk of one extraction shares, all public: the heads, the build settings
    (prompt format, token budget), the centring reference and the clip norms."""

    heads: HeadSet
    settings: Any  # dpmtv.settings.BuildSettings, progress off
    reference: dict[int, np.ndarray]  # layer -> (k_l*d,)
    l2_clip_norms: dict[int, float]

    @property
    def layer_dims(self) -> dict[int, int]:
        return {layer: int(np.size(self.reference[layer])) for layer in self.heads.layers}


class Executor(Protocol):
    workers: int

    def sum_clipped(
        self, loaded, records: Sequence[Record], partition: Partition, job: ChunkJob
    ) -> ClippedSumAccumulator: ...


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
    job = ChunkJob(heads, settings, reference, l2_clip_norms)
    return (executor or LocalExecutor()).sum_clipped(loaded, records, partition, job)


class LocalExecutor:
    """Sums in this process, chunk after chunk (the build's default)."""

    workers = 1

    def sum_clipped(self, loaded, records, partition, job: ChunkJob) -> ClippedSumAccumulator:
        from dpmtv.build import iter_clipped_chunks  # build imports this module

        accumulator = ClippedSumAccumulator(job.layer_dims)
        for clipped in iter_clipped_chunks(
            loaded, records, partition, job.heads, job.settings, job.reference, job.l2_clip_norms
        ):
            accumulator.add(clipped)
        return accumulator


def sum_batch(loaded, job: ChunkJob, batch) -> ClippedSumAccumulator:
    """One batch's sum, by the same extraction as a local build (what a worker runs)."""
    records, partition = batch.as_partition()
    quiet = dataclasses.replace(job, settings=dataclasses.replace(job.settings, progress=False))
    return LocalExecutor().sum_clipped(loaded, records, partition, quiet)
