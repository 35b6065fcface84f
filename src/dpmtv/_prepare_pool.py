"""The worker processes of the input pipeline (:mod:`dpmtv._prepare`): forked once per pass,
each computing its share of ``prepare(0), …, prepare(count-1)`` and sending it back on a pipe.

Why not torch's ``DataLoader``: on a 2-core machine its start-up and shut-down (about 0.1 s per
pass) and its per-item cost (an index queue, a result queue with a feeder thread, and every
tensor moved as a shared-memory file descriptor through a resource-sharer socket, about 2 ms) were
a large part of a pass of 16 chunks. Here:

- worker ``w`` of ``n`` prepares items ``w, w+n, w+2n, …`` (a static round-robin: no index queue,
  and the consumer knows which pipe holds item ``i``);
- a worker prepares at most ``depth`` items ahead of the consumer (a semaphore of credits per
  worker, released when the consumer takes an item);
- an item that is a dict of contiguous CPU tensors travels as a small pickled header (keys,
  dtypes, shapes) and then each tensor's raw bytes, received straight into a fresh tensor (in
  pinned memory when asked, so no second copy); any other item (``None``, an error, a tuple) is
  pickled whole. The bytes are the worker's bytes: the consumer gets bitwise what ``prepare``
  returned.

Workers are forked (they inherit ``prepare``, nothing is pickled to them), run one torch thread,
ignore SIGINT (the consumer handles it and ends them), exit after their last item or when the
consumer's process is gone, and are terminated when the consumer stops early.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Failed", "WorkerPool"]

_PARENT_CHECK_S = 1.0  # how often a worker waiting for a credit checks its consumer is alive
_JOIN_S = 5.0  # how long a finished worker is given to exit before it is terminated


@dataclass(frozen=True)
class Failed:
    """``prepare(index)`` raised ``error``: re-raised by the consumer when it reaches the item."""

    error: BaseException


@dataclass(frozen=True)
class _Tensors:
    """Header of a dict of tensors: its keys, and each tensor's dtype and shape, in order."""

    keys: tuple[str, ...]
    specs: tuple[tuple[Any, tuple[int, ...]], ...]


class WorkerPool:
    """``workers`` forked processes preparing ``prepare(index)`` for ``index < count``."""

    def __init__(self, prepare: Callable[[int], Any], count: int, workers: int, depth: int):
        context = multiprocessing.get_context("fork")
        self._count, self._workers = count, workers
        self._pipes: list[Any] = []
        self._credits: list[Any] = []
        self._processes: list[Any] = []
        parent = os.getpid()
        try:
            for worker in range(workers):
                reader, writer = context.Pipe(duplex=False)
                credits = context.Semaphore(depth)
                process = context.Process(
                    target=_work, args=(prepare, worker, workers, count, writer, credits, parent),
                    name=f"dpmtv-prepare-{worker}", daemon=True,
                )  # fmt: skip
                process.start()
                writer.close()  # the worker holds the only writing end: its exit reads as EOF here
                self._pipes.append(reader)
                self._credits.append(credits)
                self._processes.append(process)
        except BaseException:
            self.close()
            raise

    def receive(self, index: int, pin_memory: bool = False) -> Any:
        """Item ``index`` (items must be received in order), its worker given one more credit."""
        worker = index % self._workers
        try:
            item = _receive(self._pipes[worker], pin_memory)
        except (EOFError, OSError) as exc:
            process = self._processes[worker]
            process.join(timeout=_JOIN_S)
            raise RuntimeError(
                f"a prepare worker process (pid {process.pid}) exited with code {process.exitcode} "
                "during the pass (killed, or out of memory?); rerun with --prepare-workers 0 to "
                "prepare the inputs in this process"
            ) from exc
        if index + self._workers < self._count:
            self._credits[worker].release()
        return item

    def close(self, finished: bool = False) -> None:
        """Ends the workers: lets finished ones exit (``finished``), else terminates them."""
        for process in self._processes:
            if finished:
                process.join(timeout=_JOIN_S)
            if process.is_alive():
                process.terminate()
            process.join()
        for pipe in self._pipes:
            pipe.close()
        self._processes, self._pipes = [], []


def _work(
    prepare: Callable[[int], Any], first: int, step: int, count: int, conn: Any, credits: Any, parent: int
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the consumer's to handle
    _one_torch_thread()
    try:
        for index in range(first, count, step):
            while not credits.acquire(timeout=_PARENT_CHECK_S):
                if os.getppid() != parent:
                    return  # the consumer's process is gone: nobody reads what follows
            try:
                item = prepare(index)
            except Exception as exc:  # noqa: BLE001 (re-raised by the consumer at this item)
                item = Failed(exc)
            _send(conn, item)
    except (BrokenPipeError, EOFError):
        return  # the consumer stopped reading
    finally:
        conn.close()


def _one_torch_thread() -> None:
    """One intra-op thread in a worker, as the DataLoader's workers do: the workers are the
    parallelism, and a forked child must not rely on the parent's thread pool."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _send(conn: Any, item: Any) -> None:
    tensors = _tensor_values(item)
    if tensors is None:
        conn.send_bytes(_pickled(item))
        return
    header = _Tensors(tuple(item), tuple((t.dtype, tuple(t.shape)) for t in tensors))
    conn.send_bytes(_pickled(header))
    for tensor in tensors:
        if tensor.numel():
            conn.send_bytes(_raw(tensor))


def _pickled(item: Any) -> bytes:
    try:
        return pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 (an unpicklable error: its type and message travel)
        if isinstance(item, Failed):
            error = RuntimeError(f"{type(item.error).__name__}: {item.error}")
            return pickle.dumps(Failed(error), protocol=pickle.HIGHEST_PROTOCOL)
        raise RuntimeError(f"a prepared item of type {type(item).__name__} cannot be sent: {exc}") from exc


def _tensor_values(item: Any) -> list[Any] | None:
    """The values of ``item`` when it is a non-empty dict of contiguous CPU tensors, else None."""
    if type(item) is not dict or not item:
        return None
    import torch

    values = list(item.values())
    for value in values:
        if not (isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.is_contiguous()):
            return None
        if value.requires_grad or value.is_quantized or value.is_sparse:
            return None
    return values


def _raw(tensor: Any) -> memoryview:
    import torch

    return memoryview(tensor.reshape(-1).view(torch.uint8).numpy())


def _receive(conn: Any, pin_memory: bool) -> Any:
    import torch

    item = pickle.loads(conn.recv_bytes())
    if not isinstance(item, _Tensors):
        return item
    out = {}
    for key, (dtype, shape) in zip(item.keys, item.specs, strict=True):
        tensor = torch.empty(shape, dtype=dtype, pin_memory=pin_memory)
        if tensor.numel():
            buffer = tensor.reshape(-1).view(torch.uint8).numpy()
            received = conn.recv_bytes_into(buffer)
            if received != buffer.nbytes:
                raise EOFError(f"'{key}': {received} bytes received, {buffer.nbytes} expected")
        out[key] = tensor
    return out
