"""The demo's (task, seed) runs in worker processes.

Every run is seeded by its (task, seed) alone (records, test images, ICL demonstrations, the
partition and the noise) and reads nothing another run writes, so N processes compute the rows
of one, returned in submission order. On a small CPU model one torch thread per process keeps
both cores busier than two threads in one process (measured: benchmarks/results/demo_time.json).
Workers are spawned (not forked: the parent's torch thread pool must not be copied) and each
loads the embedded model once. A worker exits when the demo's process is gone: a demo killed
(SIGKILL, or SIGTERM, which runs no cleanup) never shuts its pool down, and its idle workers
would otherwise wait on their call queue for ever, holding a model each.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from dpmtv.errors import ParameterError

MAX_DEFAULT_WORKERS = 8
_STATE: Any = None  # a worker's (model, tasks, ...) from its initializer


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def resolve_demo_workers(requested: int | None, num_runs: int) -> int:
    """``requested`` processes (0 or 1: in this process), else one per available core up to
    :data:`MAX_DEFAULT_WORKERS`; never more than there are runs."""
    if requested is not None and requested < 0:
        raise ParameterError(f"--workers must be >= 0, got {requested}")
    workers = min(available_cpus(), MAX_DEFAULT_WORKERS) if requested is None else requested
    return max(1, min(workers, num_runs))


def torch_threads_per_worker(workers: int) -> int:
    return max(1, available_cpus() // workers)


def submit_runs(
    make_state: str,
    state_args: tuple,
    run: Callable[[Any, Any], Any],
    items: Sequence[Any],
    *,
    workers: int,
) -> tuple[ProcessPoolExecutor, list[Future]]:
    """Start ``workers`` spawned processes, each with ``make_state(*state_args)`` (``make_state``
    named ``"module:function"``), and submit ``run(state, item)`` for every item. The caller
    collects the futures in order and shuts the pool down (:func:`collect`).

    A worker takes this process's logger levels before it imports anything heavy (the CLI quiets
    torchao's import-time messages), so the state and its arguments travel pickled, opened there."""
    levels = {
        name: logger.level
        for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and logger.level != logging.NOTSET
    }
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        initargs=(make_state, pickle.dumps(state_args), levels, torch_threads_per_worker(workers)),
    )
    return pool, [pool.submit(_run_in_worker, run, item) for item in items]


def collect(pool: ProcessPoolExecutor, futures: list[Future], advance: Callable[[int], None]) -> list:
    """The futures' results in order (advancing once per result); on the first error the pending
    runs are cancelled and the error is raised."""
    results = []
    try:
        for future in futures:
            results.append(future.result())
            advance(1)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return results


def _init_worker(make_state: str, state_args: bytes, levels: dict[str, int], threads: int) -> None:
    global _STATE
    threading.Thread(target=_exit_with_parent, name="dpmtv-exit-with-parent", daemon=True).start()
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    import torch

    torch.set_num_threads(threads)
    module, function = make_state.split(":")
    _STATE = getattr(importlib.import_module(module), function)(*pickle.loads(state_args))


def _exit_with_parent() -> None:
    """Waits on the parent's sentinel (ready once it has exited), then ends this worker at once:
    its call queue's pipe never reads EOF, as every worker holds a writing end of it."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)


def _run_in_worker(run: Callable[[Any, Any], Any], item: Any) -> Any:
    return run(_STATE, item)
