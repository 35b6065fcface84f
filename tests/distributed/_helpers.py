"""Test helpers for distributed runs: a Ray worker that dies once, one that inflates its sums,
one torch thread (the kernel paths of a Ray actor with one CPU), a task that reports its prepare
workers' pids, and comparisons of clipped sums."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import torch

from dpmtv.distributed.ray_executor import ChunkWorker
from dpmtv.privacy.release import release_without_noise


class _DiesInItsFirstBatchOne(ChunkWorker):
    """Kills its own process in the middle of batch 1, the first time only (a marker file
    survives the restart)."""

    marker: Path

    def run(self, task, batch):
        if batch.batch_id == 1 and not self.marker.exists():
            self.marker.touch()
            os._exit(1)
        return super().run(task, batch)


class InflatesItsSums(ChunkWorker):
    """Returns, for its n chunks, a sum as long as n + 1 clipped chunks could make (a bug, or a
    tampered worker): one row per chunk, as the driver expects, but a norm no n chunks reach."""

    def run(self, task, batch):
        result = super().run(task, batch)
        rows = result.value.num_rows
        for layer, dim in result.value.layer_dims.items():
            length = (rows + 1) * task.job.l2_clip_norms[layer]
            result.value._sums[layer] = np.full(dim, length / np.sqrt(dim))  # no public setter
        return result


def dies_in_batch_one(marker: Path) -> type:
    """A worker class that dies in batch 1 once; ``marker`` exists once it has."""
    return type("Dies", (_DiesInItsFirstBatchOne,), {"marker": marker})


@contextlib.contextmanager
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def summed_values(accumulator, num_chunks: int) -> np.ndarray:
    """An accumulator's per-layer sums, concatenated in layer order (it is consumed)."""
    layers = release_without_noise(accumulator.mean(num_chunks=num_chunks), allow_non_private=True).layers
    return np.concatenate([layers[layer] for layer in sorted(layers)]) * num_chunks


def assert_close_relative(actual, expected, *, rel: float) -> None:
    """Equal up to ``rel`` of the largest magnitude compared (float32 forward passes in other
    processes or batches may take other kernel paths)."""
    scale = max(float(np.abs(expected).max()), 1.0)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=rel * scale)


class PreparePids:
    """A chunk task whose every pass prepares one item per chunk in prepare workers and returns
    the pids that prepared them."""

    shots_per_chunk = 3
    description = "prepare pids"

    def run(self, loaded, records, partition, *, progress):
        from dpmtv.forward._prepare import prepared

        return {pid for pid in prepared(_pid_of, max(len(partition.chunks), 2), workers=1, depth=1)}

    def combine(self, results):
        return results


def _pid_of(index: int) -> int:
    return os.getpid()
