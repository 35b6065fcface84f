"""Chunk inputs prepared in worker processes (issue 25.1): in order, errors at their item, and the
forward pass sees bitwise what the sequential loop gives it (docs/design.md §13)."""

from __future__ import annotations

import contextlib
import os
import signal

import numpy as np
import pytest

from dpmtv.data import load_records
from dpmtv.errors import RecordError
from dpmtv.forward._prefetch import PipelineTimings
from dpmtv.forward._prepare import default_prepare_workers, prepared
from dpmtv.forward.extract import extract_each_chunk
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.partition import ChunkPrompts
from dpmtv.privacy import Partition
from tests.conftest import TEST_DEVICE, write_records


def _square_with_pid(index: int) -> tuple[int, int]:
    return index * index, os.getpid()


def _fail_at_three(index: int) -> int:
    if index == 3:
        raise RecordError("records.jsonl:4: field 'image': file 'img/3.png' does not exist")
    return index


def test_items_come_in_order_from_worker_processes():
    timings = PipelineTimings()
    items = list(prepared(_square_with_pid, 9, workers=2, depth=2, timings=timings))
    assert [value for value, _ in items] == [i * i for i in range(9)]
    assert os.getpid() not in {pid for _, pid in items}
    assert timings.items == 9


def test_an_error_is_raised_at_its_item_with_its_own_one_line_message():
    got = []
    with pytest.raises(RecordError) as caught:
        for item in prepared(_fail_at_three, 8, workers=2, depth=1):
            got.append(item)
    assert got == [0, 1, 2]
    assert str(caught.value) == "records.jsonl:4: field 'image': file 'img/3.png' does not exist"


def test_zero_workers_prepare_on_the_background_thread():
    assert [v for v, pid in prepared(_square_with_pid, 4, workers=0)] == [0, 1, 4, 9]
    assert {pid for _, pid in prepared(_square_with_pid, 4, workers=0)} == {os.getpid()}


def test_default_workers_follow_the_device_and_the_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(16)))
    assert default_prepare_workers("cuda") == 8 and default_prepare_workers("cpu") == 8
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1})
    assert default_prepare_workers("cuda:0") == 1 and default_prepare_workers("cpu") == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1, 2, 3})
    assert default_prepare_workers("cpu") == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0})
    assert default_prepare_workers("cuda") == 0 and default_prepare_workers("cpu") == 0


@pytest.mark.parametrize("fixed_shape", [False, True])
@pytest.mark.parametrize("model", ["tiny_llava", "embedded"])
def test_extraction_with_workers_is_bitwise_the_sequential_one(model, fixed_shape, tiny_llava, tmp_path):
    """Also at fixed public shapes (4 rows of 256 tokens): each worker pads its chunk alone."""
    from dpmtv.forward.fixed_shapes import FixedShape, dummy_prompt

    if model == "embedded":
        from dpmtv.models.loading import load_model

        loaded = load_model("embedded", device=TEST_DEVICE)
    else:
        loaded = tiny_llava
    records = load_records(write_records(tmp_path, 15))
    partition = Partition(chunks=tuple(np.arange(i, i + 3) for i in range(0, 15, 3)), num_unused=0)
    prompts = ChunkPrompts(records, partition, shots_per_chunk=3, query="record", query_question="")
    heads = parse_head_spec("all", loaded.adapter.geometry)

    budget = 256 if fixed_shape else 4096
    shape = FixedShape(4, budget, dummy_prompt(2)) if fixed_shape else None

    def run(workers, depth):
        extract = extract_each_chunk(
            loaded.adapter, prompts, heads, max_prompt_tokens=budget, prepare_workers=workers, prefetch=depth,
            fixed_shape=shape, slots=prompts.chunk_ids,
        )  # fmt: skip
        return list(extract)

    sequential, in_workers = run(0, 0), run(2, 2)
    assert len(sequential) == 5
    for one, other in zip(sequential, in_workers, strict=True):
        assert one.keys() == other.keys()
        for layer in one:
            np.testing.assert_array_equal(one[layer], other[layer])


def test_private_votes_with_workers_are_bitwise_the_sequential_ones(tiny_llava, tmp_path):
    from dpmtv.selection.private import chunk_head_scores

    records = load_records(write_records(tmp_path, 10))
    chunks = [records[0:3], records[3:4], records[4:7], records[7:10]]  # one chunk too small to vote

    def run(workers):
        return list(chunk_head_scores(tiny_llava, chunks, progress=False, prepare_workers=workers))

    sequential, in_workers = run(0), run(2)
    assert sequential[1] is None and in_workers[1] is None
    for one, other in zip(sequential, in_workers, strict=True):
        if one is not None:
            assert one.dtype == other.dtype and bool((one == other).all())


def _cube_with_pid(index: int) -> tuple[int, int]:
    return index**3, os.getpid()


def test_passes_in_a_reusing_block_share_their_worker_processes():
    from dpmtv.forward._prepare import reusing_workers

    with reusing_workers():
        first = list(prepared(_square_with_pid, 7, workers=2, depth=1))
        second = list(prepared(_cube_with_pid, 5, workers=2, depth=3))
        third = list(prepared(lambda index: (-index, os.getpid()), 3, workers=2, depth=2))  # not picklable
    assert [value for value, _ in first] == [i * i for i in range(7)]
    assert [value for value, _ in second] == [i**3 for i in range(5)]
    assert [value for value, _ in third] == [0, -1, -2]
    assert {pid for _, pid in first} == {pid for _, pid in second} and len({pid for _, pid in first}) == 2
    assert not {pid for _, pid in third} & {pid for _, pid in first}  # its own workers (inherited)
    assert os.getpid() not in {pid for _, pid in first + second + third}


def test_a_pass_stopped_early_in_a_reusing_block_ends_its_workers_and_the_next_pass_runs():
    from dpmtv.forward._prepare import reusing_workers

    with reusing_workers():
        with pytest.raises(RecordError):
            list(prepared(_fail_at_three, 8, workers=2, depth=2))
        stopped = prepared(_square_with_pid, 9, workers=2, depth=2)
        assert next(stopped)[0] == 0
        stopped.close()
        assert [value for value, _ in prepared(_square_with_pid, 6, workers=2)] == [i * i for i in range(6)]


def _killed_at_two(index: int) -> int:
    if index == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return index


@pytest.mark.parametrize("reusing", [False, True])
def test_a_worker_killed_mid_pass_is_an_error_not_a_hang(reusing):
    from dpmtv.forward._prepare import reusing_workers

    got = []
    with reusing_workers() if reusing else contextlib.nullcontext():
        with pytest.raises(RuntimeError, match=r"prepare worker process \(pid \d+\) exited with code -9"):
            for item in prepared(_killed_at_two, 6, workers=2, depth=1):
                got.append(item)
        assert [value for value, _ in prepared(_square_with_pid, 4, workers=2)] == [0, 1, 4, 9]
    assert got == [0, 1]


class _Heavy:
    """A pass whose job pickles larger than the limit (records holding their images in memory)."""

    def __init__(self, size: int):
        self.payload = bytes(size)

    def __call__(self, index: int) -> tuple[int, int]:
        return index + len(self.payload), os.getpid()


def test_a_job_too_large_to_pickle_gets_workers_that_inherit_it(monkeypatch):
    from dpmtv.forward import _prepare

    monkeypatch.setattr(_prepare, "MAX_PICKLED_JOB", 1000)
    assert _prepare._pickled(_Heavy(10)) is not None and _prepare._pickled(_Heavy(2000)) is None
    with _prepare.reusing_workers():
        light = list(prepared(_Heavy(10), 4, workers=2))
        heavy = list(prepared(_Heavy(2000), 4, workers=2))
        again = list(prepared(_Heavy(20), 4, workers=2))
    assert [v for v, _ in heavy] == [2000, 2001, 2002, 2003]
    assert {pid for _, pid in light} == {pid for _, pid in again}  # the block's workers
    assert not {pid for _, pid in heavy} & {pid for _, pid in light}  # forked for that pass
