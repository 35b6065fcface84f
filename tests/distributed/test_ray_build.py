"""Distributed builds on a real local Ray cluster: the same sum, the same artifact metadata, and a
worker killed mid-build whose chunks are summed exactly once."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from dpmtv.build import BuildSettings, plan_layout, reference_activations
from dpmtv.cli import main
from dpmtv.data import load_records
from dpmtv.distributed import ChunkJob, LocalExecutor, ModelSource, RayExecutor, split_batches
from dpmtv.distributed.batches import merge_in_batch_order
from dpmtv.distributed.executor import sum_batch
from dpmtv.distributed.ray_executor import ChunkWorker
from dpmtv.heads import parse_head_spec
from dpmtv.privacy.release import release_without_noise
from dpmtv.vector import load_task_vector
from tests._tolerance import FLOAT32_REL
from tests.conftest import write_records

pytestmark = pytest.mark.slow

CHUNKS_PER_BATCH = 2
SETTINGS = BuildSettings(
    epsilon=4.0,
    delta=1e-5,
    l2_clip_norm=(50.0,),  # large: most chunks unclipped, so the sums carry real activations
    shots_per_chunk=3,
    neighbouring_relation="add-remove-one",
    num_chunks=7,
    insecure_seed=5,
    allow_insecure_seed=True,
    progress=False,
)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return load_records(write_records(tmp_path_factory.mktemp("ray-data"), 21, seed=3))


def _job(loaded, records):
    heads = parse_head_spec("layers:0-1", loaded.adapter.geometry)
    layout = plan_layout(loaded, records, heads, SETTINGS)
    settings = dataclasses.replace(SETTINGS, max_prompt_tokens=4096)
    job = ChunkJob(heads, settings, reference_activations(loaded, heads, settings), layout.l2_clip_norms)
    return layout.release_part, job


def _values(accumulator, num_chunks: int) -> np.ndarray:
    layers = release_without_noise(accumulator.mean(num_chunks=num_chunks), allow_non_private=True).layers
    return np.concatenate([layers[layer] for layer in sorted(layers)]) * num_chunks  # the sum


def assert_close_relative(actual, expected, *, rel: float) -> None:
    """Equal up to ``rel`` of the largest magnitude compared (float32 forward passes in other
    processes may take other kernel paths)."""
    scale = max(float(np.abs(expected).max()), 1.0)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=rel * scale)


def _executor(path, **options) -> RayExecutor:
    return RayExecutor(ModelSource(str(path)), workers=2, chunks_per_batch=CHUNKS_PER_BATCH, **options)


def test_distributed_sum_equals_the_local_sum(ray_cluster, tiny_llava, tiny_llava_path, records):
    partition, job = _job(tiny_llava, records)
    local = LocalExecutor().sum_clipped(tiny_llava, records, partition, job)
    # the local sum in the distributed order: per batch, then batches in order
    batches = split_batches(records, partition, shots_per_chunk=3, chunks_per_batch=CHUNKS_PER_BATCH)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a Ray actor with one CPU: the same kernel paths
    try:
        in_batch_order = merge_in_batch_order(
            [_partial(b, sum_batch(tiny_llava, job, b)) for b in batches], job.layer_dims
        )
    finally:
        torch.set_num_threads(threads)
    with _executor(tiny_llava_path) as executor:
        distributed = executor.sum_clipped(tiny_llava, records, partition, job)
    assert distributed.num_rows == local.num_rows
    expected_sum = _values(in_batch_order, partition.num_chunks)
    got = _values(distributed, partition.num_chunks)
    assert_close_relative(got, _values(local, partition.num_chunks), rel=FLOAT32_REL)
    # fixed per-chunk shapes (one chunk per forward pass), one thread, the same summation order:
    # bitwise
    np.testing.assert_array_equal(got, expected_sum)


def _partial(batch, accumulator):
    from dpmtv.distributed import PartialSum

    return PartialSum(batch.batch_id, batch.chunk_ids, accumulator)


class DiesInItsFirstBatchOne(ChunkWorker):
    """Kills its own process in the middle of batch 1, the first time only (a marker file
    survives the restart)."""

    marker: Path

    def sum_chunks(self, job, batch):
        if batch.batch_id == 1 and not self.marker.exists():
            self.marker.touch()
            os._exit(1)
        return super().sum_chunks(job, batch)


def test_a_worker_killed_mid_build_has_its_chunks_summed_exactly_once(
    ray_cluster, tiny_llava, tiny_llava_path, records, tmp_path
):
    partition, job = _job(tiny_llava, records)
    local = LocalExecutor().sum_clipped(tiny_llava, records, partition, job)
    worker = type("Dies", (DiesInItsFirstBatchOne,), {"marker": tmp_path / "killed"})
    with _executor(tiny_llava_path, worker_class=worker) as executor:
        distributed = executor.sum_clipped(tiny_llava, records, partition, job)
        attempts = dict(executor.attempts)
    assert (tmp_path / "killed").exists()  # the worker did die
    assert attempts == {0: 1, 1: 2, 2: 1, 3: 1}  # batch 1 sent again, once; the others once
    assert distributed.num_rows == local.num_rows  # no chunk counted twice
    assert_close_relative(
        _values(distributed, partition.num_chunks), _values(local, partition.num_chunks), rel=FLOAT32_REL
    )


def _metadata(path: Path) -> dict:
    metadata = load_task_vector(path).metadata.model_dump(mode="json")
    return {k: v for k, v in metadata.items() if k not in ("created_at", "tensors_sha256")}


def test_ray_cli_build_has_the_local_artifact_and_metadata_plus_workers(
    ray_cluster, tiny_llava_path, records, tmp_path
):
    data = write_records(tmp_path / "data", 21, seed=3)
    common = [
        "build",
        "--model",
        str(tiny_llava_path),
        "--data",
        str(data),
        "--heads",
        "layers:0-1",
        "--epsilon",
        "4",
        "--l2-clip-norm",
        "50",
        "--shots-per-chunk",
        "3",
        "--neighbouring-relation",
        "add-remove-one",
        "--num-chunks",
        "7",
        "--insecure-seeded-noise",
        "5",
        "--quiet",
    ]
    runner = CliRunner()
    local = runner.invoke(main, [*common, "--out", str(tmp_path / "local.safetensors")])
    ray = runner.invoke(
        main, [*common, "--out", str(tmp_path / "ray.safetensors"), "--ray", "auto", "--workers", "2"]
    )
    assert local.exit_code == 0, local.output
    assert ray.exit_code == 0, ray.output
    local_meta, ray_meta = _metadata(tmp_path / "local.safetensors"), _metadata(tmp_path / "ray.safetensors")
    assert (local_meta.pop("workers"), ray_meta.pop("workers")) == (1, 2)
    assert ray_meta == local_meta
    # the same seeded noise on the same sum (up to float rounding of the summation order)
    local_values = load_task_vector(tmp_path / "local.safetensors").values
    assert_close_relative(
        load_task_vector(tmp_path / "ray.safetensors").values, local_values, rel=FLOAT32_REL
    )
