"""The driver's side of a distributed build, without Ray: what a worker receives, the coverage
check, and the one-line error when the ray extra is missing."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.data.records import Record
from dpmtv.distributed import BatchResult, check_coverage, split_batches
from dpmtv.errors import DistributedError
from dpmtv.privacy import ClippedSumAccumulator, Partition
from dpmtv.privacy.partition import SparseChunks


def _records(count: int) -> list[Record]:
    return [Record(f"r{i}", (), "q", "a") for i in range(count)]


def _part(batch_id: int, chunk_ids: tuple[int, ...]) -> BatchResult:
    return BatchResult(batch_id, chunk_ids, ClippedSumAccumulator({0: 2}))


def test_batches_carry_nonempty_chunk_contents_cut_to_shots_and_nothing_else():
    records = _records(10)
    empty = np.array([], np.int64)
    partition = Partition(
        chunks=(np.array([7, 2, 9]), empty, np.array([4, 0, 1]), np.array([5]), empty), num_unused=2
    )
    batches = split_batches(records, partition, shots_per_chunk=2, chunks_per_batch=2)
    assert [b.chunk_ids for b in batches] == [(0, 2), (3,)]  # empty chunks are never sent
    assert [[r.record_id for r in chunk] for b in batches for chunk in b.chunks] == [
        ["r7", "r2"],
        ["r4", "r0"],
        ["r5"],
    ]
    sent = {r.record_id for b in batches for chunk in b.chunks for r in chunk}
    assert sent == {"r7", "r2", "r4", "r0", "r5"}  # unused records and cut shots never leave
    worker_records, worker_partition = batches[0].as_partition()
    items = worker_partition.nonempty_items()
    assert [(j, [worker_records[int(i)].record_id for i in c]) for j, c in items] == [
        (0, ["r7", "r2"]),  # each chunk keeps its id: a fixed-shape pass places it by its id
        (2, ["r4", "r0"]),
    ]


def test_a_huge_sparse_m_gives_batches_of_its_nonempty_chunks_only():
    chunks = SparseChunks({3: np.array([0, 1]), 99_999_998: np.array([2])}, num_chunks=100_000_000)
    batches = split_batches(
        _records(3), Partition(chunks, num_unused=0), shots_per_chunk=2, chunks_per_batch=4
    )
    assert [b.chunk_ids for b in batches] == [(3, 99_999_998)]


def test_coverage_accepts_each_chunk_exactly_once():
    check_coverage([_part(1, (2, 5)), _part(0, (0, 1))], chunk_ids=[0, 1, 2, 5])


@pytest.mark.parametrize(
    "parts",
    [
        [_part(0, (0, 1)), _part(1, (1, 2))],  # chunk 1 twice: a retried batch counted again
        [_part(0, (0, 1))],  # chunk 2 missing
        [_part(0, (0, 1, 2, 3))],  # an id the build does not have
    ],
)
def test_coverage_refuses_duplicates_gaps_and_unknown_ids(parts):
    with pytest.raises(DistributedError):
        check_coverage(parts, chunk_ids=[0, 1, 2])


def test_ray_option_without_ray_prints_the_install_line(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    data = tmp_path / "records.jsonl"
    data.write_text('{"id": "a", "image": "x.png", "question": "q", "answer": "a"}\n')
    result = CliRunner().invoke(
        main,
        [
            "build",
            "--data",
            str(data),
            "--heads",
            "all",
            "--epsilon",
            "1",
            "--l2-clip-norm",
            "1",
            "--shots-per-chunk",
            "1",
            "--out",
            str(tmp_path / "v.safetensors"),
            "--ray",
            "auto",
        ],
    )
    assert result.exit_code == 1
    assert "pip install -e '.[ray]'" in result.output
    assert not (tmp_path / "v.safetensors").exists()
