"""Distributed builds on a real local Ray cluster: the same sum, the same artifact metadata, and a
worker killed mid-build whose chunks are summed exactly once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpmtv.artifact.vector import load_task_vector
from dpmtv.cli import main
from dpmtv.data import load_records
from dpmtv.distributed import RayExecutor, split_batches
from dpmtv.distributed.network import wait_for_head
from dpmtv.errors import DistributedError
from dpmtv.forward.executor import LocalExecutor, ModelSource
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.build import BuildSettings, reference_activations
from dpmtv.pipeline.plan import plan_layout
from dpmtv.pipeline.tasks import ChunkJob, ClippedSum
from tests._tolerance import FLOAT32_REL
from tests.conftest import write_records
from tests.distributed._helpers import (
    InflatesItsSums,
    PreparePids,
    assert_close_relative,
    dies_in_batch_one,
    one_torch_thread,
    summed_values,
)

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


def _task(loaded, records):
    heads = parse_head_spec("layers:0-1", loaded.adapter.geometry)
    layout = plan_layout(loaded, records, heads, SETTINGS)
    settings = dataclasses.replace(SETTINGS, max_prompt_tokens=4096)
    job = ChunkJob(heads, settings, reference_activations(loaded, heads, settings), layout.l2_clip_norms)
    return layout.release_part, ClippedSum(job)


def _executor(path, **options) -> RayExecutor:
    return RayExecutor(ModelSource(str(path)), workers=2, chunks_per_batch=CHUNKS_PER_BATCH, **options)


def test_distributed_sum_equals_the_local_sum(ray_cluster, tiny_llava, tiny_llava_path, records):
    partition, task = _task(tiny_llava, records)
    local = LocalExecutor().run(tiny_llava, records, partition, task)
    # the local sum in the distributed order: per batch, then batches in order
    batches = split_batches(records, partition, shots_per_chunk=3, chunks_per_batch=CHUNKS_PER_BATCH)
    with one_torch_thread():  # as in a Ray actor with one CPU: the same kernel paths
        in_batch_order = task.combine(
            [task.run(tiny_llava, *batch.as_partition(), progress=False) for batch in batches]
        )
    with _executor(tiny_llava_path) as executor:
        distributed = executor.run(tiny_llava, records, partition, task)
    assert distributed.num_rows == local.num_rows
    expected_sum = summed_values(in_batch_order, partition.num_chunks)
    got = summed_values(distributed, partition.num_chunks)
    assert_close_relative(got, summed_values(local, partition.num_chunks), rel=FLOAT32_REL)
    # each chunk placed by its id in the same fixed-shape passes, one thread, the same summation order:
    # bitwise
    np.testing.assert_array_equal(got, expected_sum)


def test_a_worker_killed_mid_build_has_its_chunks_summed_exactly_once(
    ray_cluster, tiny_llava, tiny_llava_path, records, tmp_path
):
    partition, task = _task(tiny_llava, records)
    local = LocalExecutor().run(tiny_llava, records, partition, task)
    with _executor(tiny_llava_path, worker_class=dies_in_batch_one(tmp_path / "killed")) as executor:
        distributed = executor.run(tiny_llava, records, partition, task)
        attempts = dict(executor.attempts)
    assert (tmp_path / "killed").exists()  # the worker did die
    assert attempts == {0: 1, 1: 2, 2: 1, 3: 1}  # batch 1 sent again, once; the others once
    assert distributed.num_rows == local.num_rows  # no chunk counted twice
    assert_close_relative(
        summed_values(distributed, partition.num_chunks),
        summed_values(local, partition.num_chunks),
        rel=FLOAT32_REL,
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
    _assert_ray_build_is_the_local_build(common, tmp_path)


def _assert_ray_build_is_the_local_build(common: list[str], tmp_path) -> dict:
    """Build ``common`` locally and on 2 Ray workers: the same metadata but ``workers``, and the
    same seeded noise on the same sum (up to float rounding of the summation order)."""
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
    local_values = load_task_vector(tmp_path / "local.safetensors").values
    assert_close_relative(
        load_task_vector(tmp_path / "ray.safetensors").values, local_values, rel=FLOAT32_REL
    )
    return local_meta


def test_a_huge_public_m_sends_only_the_nonempty_chunks(ray_cluster, tiny_llava, tiny_llava_path, records):
    """``--num-chunks 100000000`` with 21 records: the workers get the non-empty chunks only (as a
    local build visits only those), and the sum is the local one."""
    huge = dataclasses.replace(SETTINGS, num_chunks=100_000_000)
    heads = parse_head_spec("layers:0-1", tiny_llava.adapter.geometry)
    layout = plan_layout(tiny_llava, records, heads, huge)
    settings = dataclasses.replace(huge, max_prompt_tokens=4096)
    reference = reference_activations(tiny_llava, heads, settings)
    task = ClippedSum(ChunkJob(heads, settings, reference, layout.l2_clip_norms))
    partition = layout.release_part
    nonempty = len(partition.nonempty_chunks())
    local = LocalExecutor().run(tiny_llava, records, partition, task)
    with _executor(tiny_llava_path) as executor:
        distributed = executor.run(tiny_llava, records, partition, task)
        batches_sent = len(executor.attempts)
    assert partition.num_chunks == 100_000_000 and distributed.num_rows == local.num_rows == nonempty
    assert batches_sent == -(-nonempty // CHUNKS_PER_BATCH)
    assert_close_relative(
        summed_values(distributed, partition.num_chunks),
        summed_values(local, partition.num_chunks),
        rel=FLOAT32_REL,
    )


def test_a_worker_that_inflates_its_sum_is_refused_before_the_noise(
    ray_cluster, tiny_llava, tiny_llava_path, records
):
    """On the old code the inflated sums were merged and released (3x the signal, Δ broken)."""
    partition, task = _task(tiny_llava, records)
    with _executor(tiny_llava_path, worker_class=InflatesItsSums) as executor:
        with pytest.raises(
            DistributedError, match=r"batch \d+: .* L2 norm above 2·C = .* refused before the noise"
        ):
            executor.run(tiny_llava, records, partition, task)


def test_the_running_head_answers_the_connect_check(ray_cluster):
    wait_for_head(ray_cluster.get_runtime_context().gcs_address, connect_timeout_s=10)


def test_a_ray_build_with_a_private_clip_norm_is_the_local_build(ray_cluster, tiny_llava_path, tmp_path):
    """The centered rows come back from the workers (checked by ``CenteredRows.check_batch``); the
    seeded round then picks the same multiplier from the same norms, and the release is the local one."""
    data = write_records(tmp_path / "data", 21, seed=3)
    common = ["build", "--model", str(tiny_llava_path), "--data", str(data), "--heads", "layers:0-1"]
    common += ["--epsilon", "4", "--l2-clip-norm", "private", "--clip-epsilon-fraction", "0.3"]
    common += ["--shots-per-chunk", "3", "--insecure-seeded-noise", "5", "--quiet"]
    local_meta = _assert_ray_build_is_the_local_build(common, tmp_path)
    assert local_meta["privacy"]["clip_norm_selection"]["multiplier"] > 0


def test_an_actor_keeps_its_prepare_workers_across_batches(ray_cluster, tiny_llava, tiny_llava_path, records):
    partition = plan_layout(
        tiny_llava, records, parse_head_spec("layers:0", tiny_llava.adapter.geometry), SETTINGS
    )
    with RayExecutor(ModelSource(str(tiny_llava_path)), workers=1, chunks_per_batch=1) as executor:
        pids = executor.run(tiny_llava, records, partition.release_part, PreparePids())
    assert len(pids) == partition.release_part.num_chunks > 2  # one batch per chunk
    assert len(set().union(*pids)) == 1  # forked once, in the actor's first batch
