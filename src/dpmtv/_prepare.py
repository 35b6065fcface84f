"""Input pipeline in worker processes: chunk inputs prepared in parallel, in order, ahead of the
forward pass (docs/design.md §13, input pipeline).

Preparing a chunk (decoding its images, the processor's resizing and normalisation, tokenising)
costs more than its forward pass on a GPU, and one background thread cannot keep up. Here a torch
``DataLoader`` runs ``prepare(index)`` in ``workers`` processes: each worker holds its own copy of
the processor (a fast tokenizer refuses concurrent use of one instance, so threads would have to
share one), items come back in index order (``in_order``), at most ``depth`` items per worker are
prepared ahead, and on CUDA they arrive in pinned memory so the copy to the device overlaps. An
error raised while preparing an item is returned as a value and re-raised by the consumer when it
reaches that item: the message is the error's own (one line naming the record), not the loader's
traceback. ``workers`` 0 keeps the one background thread of :mod:`dpmtv._prefetch`.

Privacy: a worker computes ``prepare(index)`` — a function of item ``index`` alone — exactly as
the caller's thread would (same processor, same inputs, CPU tensors), so a chunk's tensors still
depend on that chunk alone and the forward pass sees bitwise what the sequential loop gives it
(tested). Workers see chunk contents only, like the forward pass, and return nothing else.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from dpmtv._prefetch import DEFAULT_PREFETCH, PipelineTimings, prefetched, record_wait

T = TypeVar("T")

__all__ = ["default_prepare_workers", "prepared", "resolve_prepare_workers"]

MAX_DEFAULT_WORKERS = 8  # beyond this a single forward pass is rarely the slower side


def default_prepare_workers(device: str) -> int:
    """Workers when ``--prepare-workers`` is not given: on a GPU the forward pass leaves the CPUs
    to preparation (all cores but the driver's); on the CPU it needs them itself, so half the
    cores, and none (the background thread) on a machine of fewer than 4."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if str(device).startswith(("cuda", "map")):
        return min(MAX_DEFAULT_WORKERS, max(cores - 1, 0))
    return min(MAX_DEFAULT_WORKERS, cores // 2) if cores >= 4 else 0


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
    items each ahead (``workers`` 0: one background thread; ``depth`` 0 as well: inline)."""
    if workers < 1 or count < 2 or depth < 1:
        yield from prefetched(prepare, count, depth=depth, timings=timings)
        return
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one thread per worker process
    with warnings.catch_warnings():  # the count is the caller's choice, above the loader's advice or not
        warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
        iterator = iter(_loader(prepare, count, workers, depth, pin_memory))
    try:
        for _ in range(count):
            with record_wait(timings):
                item = next(iterator)
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:  # the consumer stopped early or failed: the workers are shut down at once
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


def _loader(prepare: Callable[[int], Any], count: int, workers: int, depth: int, pin_memory: bool) -> Any:
    from torch.utils.data import DataLoader

    return DataLoader(
        _Items(prepare, count),
        batch_size=None,  # one item per index, as prepared (no collation)
        num_workers=min(workers, count),
        prefetch_factor=depth,
        pin_memory=pin_memory,
        in_order=True,
    )


@dataclass(frozen=True)
class _Failed:
    error: BaseException


class _Items:
    """Map-style dataset over ``range(count)`` whose items are ``prepare(index)`` (errors as values)."""

    def __init__(self, prepare: Callable[[int], Any], count: int):
        self._prepare, self._count = prepare, count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> Any:
        try:
            return self._prepare(index)
        except Exception as exc:  # noqa: BLE001 (re-raised by the consumer at this item)
            return _Failed(exc)
