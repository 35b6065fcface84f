"""Input pipeline in worker processes: chunk inputs prepared in parallel, in order, ahead of the
forward pass (docs/design.md §13, input pipeline).

Preparing a chunk (decoding its images, the processor's resizing and normalisation, tokenising)
costs more than its forward pass on a GPU, and one background thread cannot keep up. Here
``workers`` forked processes run ``prepare(index)`` (:mod:`dpmtv.forward._prepare_pool`): each worker
holds its own copy of the processor (a fast tokenizer refuses concurrent use of one instance, so
threads would have to share one), items come back in index order, at most ``depth`` items per
worker are prepared ahead, and on CUDA they arrive in pinned memory so the copy to the device
overlaps. An error raised while preparing an item is returned as a value and re-raised by the
consumer when it reaches that item: the message is the error's own (one line naming the record).
``workers`` 0 keeps the one background thread of :mod:`dpmtv.forward._prefetch`.

Privacy: a worker computes ``prepare(index)`` — a function of item ``index`` alone — exactly as
the caller's thread would (same processor, same inputs, CPU tensors), and its tensors' bytes are
received unchanged, so a chunk's tensors still depend on that chunk alone and the forward pass
sees bitwise what the sequential loop gives it (tested). Workers see chunk contents only, like the
forward pass, and return nothing else.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import os
import pickle
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from dpmtv.forward._prefetch import DEFAULT_PREFETCH, PipelineTimings, prefetched, record_wait
from dpmtv.forward._prepare_pool import Failed, WorkerPool

T = TypeVar("T")

__all__ = [
    "ReusedWorkers",
    "default_prepare_workers",
    "prepared",
    "resolve_prepare_workers",
    "reusing_workers",
]

MAX_DEFAULT_WORKERS = 8  # beyond this a single forward pass is rarely the slower side


def default_prepare_workers(device: str) -> int:
    """Workers when ``--prepare-workers`` is not given: on a GPU the forward pass leaves the CPUs
    to preparation (all cores but the driver's); on the CPU it needs them itself, so half the
    cores, yet at least 2 on a machine of 2 or 3: a worker prepares at most ``depth`` items ahead,
    so behind a slow forward pass it waits instead of taking the cores, and behind a fast one (a
    small model, photo-sized images) two decode while the pass runs (the first build on 2 cores,
    docs/design.md §13). One core: none (the background thread)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if str(device).startswith(("cuda", "map")):
        return min(MAX_DEFAULT_WORKERS, max(cores - 1, 0))
    return min(MAX_DEFAULT_WORKERS, max(cores // 2, 2)) if cores >= 2 else 0


def resolve_prepare_workers(adapter: Any, workers: int | None) -> int:
    """``workers``, else the default for the device the model takes its inputs on."""
    return default_prepare_workers(adapter.input_device.type) if workers is None else workers


def prepared(
    prepare: Callable[[int], T],
    count: int,
    *,
    workers: int,
    depth: int = DEFAULT_PREFETCH,
    pin_memory: bool = False,
    timings: PipelineTimings | None = None,
) -> Iterator[T]:
    """``prepare(0), …, prepare(count-1)`` in order, made by ``workers`` processes up to ``depth``
    items each ahead (``workers`` 0: one background thread; ``depth`` 0 as well: inline). Inside
    :func:`reusing_workers` the processes are those of the block's earlier passes."""
    if workers < 1 or count < 2 or depth < 1:
        yield from prefetched(prepare, count, depth=depth, timings=timings)
        return
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one thread per worker process
    scope = _SCOPE.get()
    job = _pickled((prepare, count, depth)) if scope is not None else None
    if scope is None or job is None:
        pool = WorkerPool(min(workers, count), inherited=(prepare, count, depth))
    else:
        pool = scope.take(workers)
        pool.start(job, count, depth)
    finished = False
    try:
        for index in range(count):
            with record_wait(timings):
                item = pool.receive(index, pin_memory)
            if isinstance(item, Failed):
                raise item.error
            yield item
        finished = True
    finally:  # the consumer stopped early or failed: the workers are ended at once
        if finished and scope is not None and job is not None:
            scope.give_back(pool)
        else:
            pool.close(finished=finished)


@contextlib.contextmanager
def reusing_workers() -> Iterator[None]:
    """Passes inside the block reuse their prepare workers: forked at the first pass and ended
    when the block ends, not once per pass (a build's selection, clip and release passes). Each
    pass's ``prepare`` then reaches the workers pickled (one that cannot be pickled gets its own
    workers, as outside the block); a pass stopped early ends its workers."""
    scope = ReusedWorkers()
    try:
        with scope.active():
            yield
    finally:
        scope.close()


class ReusedWorkers:
    """Idle prepare pools, by worker count, kept for the passes run inside :meth:`active` — by
    :func:`reusing_workers` for one block, or by a long-lived owner across calls (a Ray actor
    across its batches), which ends them with :meth:`close`."""

    def __init__(self) -> None:
        self._idle: dict[int, WorkerPool] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Passes inside the block take their workers from here and give them back."""
        token = _SCOPE.set(self)
        try:
            yield
        finally:
            _SCOPE.reset(token)

    def take(self, workers: int) -> WorkerPool:
        with self._lock:
            pool = self._idle.pop(workers, None)
        if pool is not None and not pool.alive():
            pool.close()
            pool = None
        return WorkerPool(workers) if pool is None else pool

    def give_back(self, pool: WorkerPool) -> None:
        with self._lock:
            spare = self._idle.get(pool.workers)
            if spare is None:
                self._idle[pool.workers] = pool
        if spare is not None:  # a concurrent pass made a second pool of this size
            pool.close(finished=True)

    def close(self) -> None:
        with self._lock:
            pools, self._idle = list(self._idle.values()), {}
        for pool in pools:
            pool.close(finished=True)


_SCOPE: contextvars.ContextVar[ReusedWorkers | None] = contextvars.ContextVar(
    "dpmtv_prepare_scope", default=None
)


MAX_PICKLED_JOB = 64 << 20  # bytes: a pass whose records hold their images in memory forks instead


def _pickled(job: Any) -> bytes | None:
    """``job`` pickled, or None when it cannot be or would exceed :data:`MAX_PICKLED_JOB` (the
    pickling stops there): such a pass gets workers that inherit it."""
    out = _Bounded(MAX_PICKLED_JOB)
    try:
        pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(job)
    except (pickle.PicklingError, TypeError, AttributeError, _TooLarge):
        return None
    return out.getvalue()


class _TooLarge(Exception):
    pass


class _Bounded(io.BytesIO):
    def __init__(self, limit: int):
        super().__init__()
        self._limit = limit

    def write(self, data: Any) -> int:
        if self.tell() + len(memoryview(data)) > self._limit:
            raise _TooLarge
        return super().write(data)
