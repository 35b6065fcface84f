"""The chunk tasks that executors run (the build's clipped sum, the audit's chunk vectors,
private selection's votes), without Ray: computed batch by batch, as workers compute them, and
combined in batch order, they equal the task run on all chunks at once."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.data import load_records
from dpmtv.distributed import split_batches
from dpmtv.distributed.batches import chunks_as_partition
from dpmtv.errors import DistributedError
from dpmtv.forward.executor import LocalExecutor
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.build import BuildSettings, reference_activations
from dpmtv.pipeline.plan import plan_layout
from dpmtv.pipeline.tasks import ChunkJob, ClippedRows, ClippedSum
from dpmtv.privacy import ClippedSumAccumulator, Partition
from dpmtv.selection.private import HeadVotes
from tests._tolerance import FLOAT32_REL
from tests.conftest import write_records
from tests.distributed._helpers import PreparePids, assert_close_relative, summed_values

SETTINGS = BuildSettings(
    epsilon=1.0, delta=1e-5, l2_clip_norm=(50.0,), shots_per_chunk=3, neighbouring_relation="add-remove-one",
    num_chunks=7, insecure_seed=1, allow_insecure_seed=True, progress=False, max_prompt_tokens=4096,
)  # fmt: skip


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return load_records(write_records(tmp_path_factory.mktemp("task-data"), 20, seed=8))


def _job(loaded, records):
    heads = parse_head_spec("layers:0-1", loaded.adapter.geometry)
    layout = plan_layout(loaded, records, heads, SETTINGS)
    job = ChunkJob(heads, SETTINGS, reference_activations(loaded, heads, SETTINGS), layout.l2_clip_norms)
    return layout.release_part, job


def _in_batches(loaded, records, partition, task):
    batches = split_batches(records, partition, shots_per_chunk=task.shots_per_chunk, chunks_per_batch=2)
    assert len(batches) > 1
    return task.combine([task.run(loaded, *batch.as_partition(), progress=False) for batch in batches])


def test_clipped_sum_and_rows_in_batches_equal_the_whole(tiny_llava, records):
    partition, job = _job(tiny_llava, records)
    rows = LocalExecutor().run(tiny_llava, records, partition, ClippedRows(job))
    assert rows.shape == (sum(len(c) > 0 for c in partition.chunks), sum(job.layer_dims.values()))
    assert_close_relative(
        _in_batches(tiny_llava, records, partition, ClippedRows(job)), rows, rel=FLOAT32_REL
    )
    total = LocalExecutor().run(tiny_llava, records, partition, ClippedSum(job))
    batched = _in_batches(tiny_llava, records, partition, ClippedSum(job))
    assert batched.num_rows == total.num_rows == len(rows)
    for accumulator in (total, batched):  # the sum is the sum of the rows, however it is cut
        summed = summed_values(accumulator, partition.num_chunks)
        assert_close_relative(summed, rows.sum(axis=0), rel=FLOAT32_REL)


def test_head_votes_in_batches_equal_the_whole(tiny_llava, records):
    chunks = [records[start : start + 3] for start in range(0, 18, 3)] + [records[18:19]]
    task = HeadVotes(max_votes_per_chunk=2, pool=None, max_prompt_tokens=None, shots_per_chunk=3)
    whole = LocalExecutor().run(tiny_llava, *chunks_as_partition(chunks), task)
    assert len(whole) == len(chunks) and whole[-1] == ()  # one vote per chunk, in chunk order
    assert _in_batches(tiny_llava, *chunks_as_partition(chunks), task) == whole


def test_ray_options_are_for_the_sensitivity_audit_only(tmp_path):
    result = CliRunner().invoke(main, ["audit", "--out", str(tmp_path), "--ray", "auto", "--quiet"])
    assert result.exit_code == 2 and "--ray is for --sensitivity" in result.output


def test_audit_ray_option_without_ray_prints_the_install_line(monkeypatch, tmp_path, tiny_llava_path):
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # `import ray` raises ImportError
    args = ["audit", "--sensitivity", "--model", str(tiny_llava_path), "--data", str(tmp_path / "x.jsonl")]
    args += ["--heads", "all", "--l2-clip-norm", "1", "--shots-per-chunk", "2", "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(main, [*args, "--ray", "auto"])
    assert result.exit_code == 1 and "pip install -e '.[ray]'" in result.output


def test_the_driver_refuses_a_batch_sum_that_clipped_chunks_cannot_have(tiny_llava, records):
    """The check a Ray executor runs on every answer (tests/distributed/test_ray_build.py runs
    it on a real cluster with a worker that inflates its sum)."""
    partition, job = _job(tiny_llava, records)
    task = ClippedSum(job)
    batch = split_batches(records, partition, shots_per_chunk=task.shots_per_chunk, chunks_per_batch=2)[0]
    honest = task.run(tiny_llava, *batch.as_partition(), progress=False)
    task.check_batch(honest, batch_id=0, num_chunks=2)
    with pytest.raises(DistributedError, match="not a sum of 3 chunk"):
        task.check_batch(honest, batch_id=0, num_chunks=3)
    dims = job.layer_dims
    inflated = ClippedSumAccumulator.of(
        {
            layer: np.tile(np.full(dim, 2 * job.l2_clip_norms[layer] / np.sqrt(dim)), (2, 1))
            for layer, dim in dims.items()
        }
    )
    with pytest.raises(
        DistributedError, match=r"batch 0: .* L2 norm above 2·C = .* refused before the noise"
    ):
        task.check_batch(inflated, batch_id=0, num_chunks=2)


def test_an_actor_reuses_its_prepare_workers_across_batches(tiny_llava_path, records):
    """A Ray actor's code (run here in-process) forks its prepare workers at its first batch and
    keeps them for the next ones, as a local build's passes share theirs (issue 25.1)."""
    import os

    from dpmtv.distributed.ray_executor import ChunkWorker
    from dpmtv.forward.executor import ModelSource

    worker = ChunkWorker(ModelSource(str(tiny_llava_path)))
    partition = Partition(chunks=tuple((3 * i, 3 * i + 1, 3 * i + 2) for i in range(4)), num_unused=8)
    batches = split_batches(records, partition, shots_per_chunk=3, chunks_per_batch=1)
    try:
        pids = [worker.run(PreparePids(), batch).value for batch in batches]
    finally:
        worker.close()
    assert len(batches) == 4 and all(len(p) == 1 for p in pids)
    assert len(set().union(*pids)) == 1 and os.getpid() not in pids[0]  # one forked worker, four batches
