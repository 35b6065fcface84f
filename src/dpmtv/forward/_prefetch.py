"""Input pipeline: prepare the next items on a background thread while the caller works.

A private build renders and encodes each chunk prompt (image decoding, the processor's resizing
and normalisation, tokenising) and then runs its forward pass. The preparation is mostly PIL,
numpy and the Rust tokenizer, which release the GIL, so one background thread keeps it off the
forward pass's critical path. One thread, not several: the processor and tokenizer are then never
called concurrently (a fast tokenizer refuses concurrent use of one instance), and the order of
the items and the errors they raise stay those of the sequence.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_PREFETCH = 2  # items prepared ahead: enough to absorb one slow (large-image) chunk


@dataclass
class PipelineTimings:
    """Where the consumer's time went: ``wait_s`` waiting for the next prepared item."""

    wait_s: float = 0.0
    items: int = 0


def prefetched(
    make: Callable[[int], T],
    count: int,
    *,
    depth: int = DEFAULT_PREFETCH,
    timings: PipelineTimings | None = None,
) -> Iterator[T]:
    """``make(0), make(1), …, make(count-1)`` in order, computed up to ``depth`` items ahead on one
    background thread (``depth`` 0: in the caller's thread, as a plain loop)."""
    if depth < 1:
        for index in range(count):
            started = time.perf_counter()
            item = make(index)
            _record(timings, started)
            yield item
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpmtv-prefetch") as pool:
        futures: deque[Future[Any]] = deque()
        submitted = 0
        try:
            while futures or submitted < count:
                while submitted < count and len(futures) < depth:
                    futures.append(pool.submit(make, submitted))
                    submitted += 1
                started = time.perf_counter()
                item = futures.popleft().result()
                _record(timings, started)
                yield item
        finally:  # the consumer stopped early or failed: prepare nothing more
            for future in futures:
                future.cancel()


def _record(timings: PipelineTimings | None, started: float) -> None:
    if timings is not None:
        timings.wait_s += time.perf_counter() - started
        timings.items += 1


@contextlib.contextmanager
def record_wait(timings: PipelineTimings | None) -> Iterator[None]:
    """Adds the time spent in the block to ``timings`` as one item's wait."""
    started = time.perf_counter()
    yield
    _record(timings, started)
