"""The input pipeline prepares chunk inputs ahead on a background thread without changing what
each chunk's forward pass sees."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dpmtv.data import load_records
from dpmtv.forward._prefetch import PipelineTimings, prefetched
from dpmtv.forward.extract import extract_each_chunk
from dpmtv.heads import parse_head_spec
from dpmtv.pipeline.partition import ChunkPrompts
from dpmtv.privacy import Partition
from tests.conftest import write_records


def test_items_come_in_order_and_are_made_off_the_callers_thread():
    threads = []

    def make(index):
        threads.append(threading.current_thread())
        return index * 10

    timings = PipelineTimings()
    assert list(prefetched(make, 7, depth=3, timings=timings)) == [0, 10, 20, 30, 40, 50, 60]
    assert threading.current_thread() not in threads
    assert timings.items == 7


def test_an_error_surfaces_at_its_item_and_nothing_after_it_is_used():
    def make(index):
        if index == 2:
            raise ValueError("bad record 2")
        return index

    got = []
    with pytest.raises(ValueError, match="bad record 2"):
        for item in prefetched(make, 5, depth=2):
            got.append(item)
    assert got == [0, 1]


def test_a_consumer_that_stops_early_stops_the_preparation():
    made = []
    items = prefetched(made.append, 100, depth=2)
    next(items)
    items.close()
    assert len(made) <= 4  # the one used, at most ``depth`` ahead, one in progress


def test_prefetched_extraction_is_bitwise_the_sequential_one(tiny_llava, tmp_path):
    records = load_records(write_records(tmp_path, 12))
    partition = Partition(chunks=tuple(np.arange(i, i + 3) for i in range(0, 12, 3)), num_unused=0)
    prompts = ChunkPrompts(records, partition, shots_per_chunk=3, query="record", query_question="")
    heads = parse_head_spec("all", tiny_llava.adapter.geometry)

    def run(depth):
        return list(
            extract_each_chunk(tiny_llava.adapter, prompts, heads, max_prompt_tokens=4096, prefetch=depth)
        )

    sequential, ahead = run(0), run(2)
    assert len(sequential) == 4
    for one, other in zip(sequential, ahead, strict=True):
        for layer in one:
            np.testing.assert_array_equal(one[layer], other[layer])
