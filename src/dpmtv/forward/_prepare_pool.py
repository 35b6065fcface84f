"""The worker processes of the input pipeline (:mod:`dpmtv.forward._prepare`): forked processes, each
computing its share of a pass's ``prepare(0), …, prepare(count-1)`` and sending it back on a pipe.

Why not torch's ``DataLoader``: on a 2-core machine its start-up and shut-down (about 0.1 s per
pass) and its per-item cost (an index queue, a result queue with a feeder thread, and every
tensor moved as a shared-memory file descriptor through a resource-sharer socket, about 2 ms) were
a large part of a pass of 16 chunks. Here:

- worker ``w`` of ``n`` prepares items ``w, w+n, w+2n, …`` (a static round-robin: no index queue,
  and the consumer knows which pipe holds item ``i``);
- a worker prepares at most ``depth`` items ahead of the consumer (credits: the consumer sends one
  when it takes an item, on the worker's command pipe);
- an item that is a dict of contiguous CPU tensors travels as a small pickled header (keys,
  dtypes, shapes) and then each tensor's raw bytes, received straight into a fresh tensor (in
  pinned memory when asked, so no second copy); any other item (``None``, an error, a tuple) is
  pickled whole. The bytes are the worker's bytes: the consumer gets bitwise what ``prepare``
  returned;
- a pool serves several passes (:func:`dpmtv.forward._prepare.reusing_workers`): a pass's ``prepare``
  reaches the workers pickled, and they drop it when the pass ends; a pool forked for one pass
  inherits its ``prepare`` instead (nothing pickled).

Workers run one torch thread, ignore SIGINT (the consumer handles it and ends them), exit when
told, or when the consumer's process is gone (their command pipe reads EOF), and are terminated
when the consumer stops a pass early.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Failed", "WorkerPool"]

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
    """``workers`` forked processes, each preparing its share of the items of one pass at a time.

    A pass's ``prepare`` reaches the workers pickled (:meth:`start`), so a pool can serve several
    passes; one that cannot be pickled is inherited instead, by a pool forked for that pass
    (``inherited``). Between passes the workers hold nothing of the last one."""

    def __init__(self, workers: int, inherited: tuple[Callable[[int], Any], int, int] | None = None):
        context = multiprocessing.get_context("fork")
        self.workers = workers
        self._commands: list[Any] = []
        self._results: list[Any] = []
        self._processes: list[Any] = []
        self._count, self._depth = (inherited[1], inherited[2]) if inherited is not None else (0, 0)
        try:
            for worker in range(workers):
                commands, command_writer = context.Pipe(duplex=False)
                result_reader, results = context.Pipe(duplex=False)
                theirs = [*self._commands, *self._results, command_writer, result_reader]
                process = context.Process(
                    target=_serve, args=(worker, workers, commands, results, theirs, inherited),
                    name=f"dpmtv-prepare-{worker}", daemon=True,
                )  # fmt: skip
                process.start()
                commands.close()  # the worker holds the only reading/writing ends: its exit reads as EOF
                results.close()
                self._commands.append(command_writer)
                self._results.append(result_reader)
                self._processes.append(process)
        except BaseException:
            self.close()
            raise

    def start(self, job: bytes, count: int, depth: int) -> None:
        """Begins a pass: ``job`` is ``pickle.dumps((prepare, count, depth))``."""
        self._count, self._depth = count, depth
        for worker in range(self.workers):
            self._send(worker, _JOB_TAG + job)

    def receive(self, index: int, pin_memory: bool = False) -> Any:
        """Item ``index`` (items must be received in order), its worker given one more credit."""
        worker = index % self.workers
        try:
            item = _receive(self._results[worker], pin_memory)
        except (EOFError, OSError) as exc:
            raise self._died(worker) from exc
        if index + self._depth * self.workers < self._count:  # the worker's item `depth` later
            self._send(worker, _CREDIT)
        return item

    def _send(self, worker: int, message: bytes) -> None:
        try:
            self._commands[worker].send_bytes(message)
        except OSError as exc:
            raise self._died(worker) from exc

    def _died(self, worker: int) -> RuntimeError:
        process = self._processes[worker]
        process.join(timeout=_JOIN_S)
        return RuntimeError(
            f"a prepare worker process (pid {process.pid}) exited with code {process.exitcode} "
            "during the pass (killed, or out of memory?); rerun with --prepare-workers 0 to "
            "prepare the inputs in this process"
        )

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self._processes]

    def alive(self) -> bool:
        return bool(self._processes) and all(process.is_alive() for process in self._processes)

    def close(self, finished: bool = False) -> None:
        """Ends the workers: asks idle ones to exit (``finished``), else terminates them."""
        for worker, process in enumerate(self._processes):
            if finished:
                with contextlib.suppress(OSError):
                    self._commands[worker].send_bytes(_EXIT)
                process.join(timeout=_JOIN_S)
            if process.is_alive():
                process.terminate()
            process.join()
        for pipe in (*self._commands, *self._results):
            pipe.close()
        self._processes, self._commands, self._results = [], [], []


_CREDIT, _EXIT, _JOB_TAG = b"C", b"X", b"J"


def _serve(
    first: int,
    step: int,
    commands: Any,
    results: Any,
    theirs: list[Any],
    inherited: tuple[Callable[[int], Any], int, int] | None,
) -> None:
    """A worker: passes until told to exit, or until the consumer's process is gone (EOF)."""
    for pipe in theirs:  # the consumer's ends of this and earlier workers' pipes
        pipe.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the consumer's to handle
    _one_torch_thread()
    job = inherited
    try:
        while True:
            if job is None:
                message = commands.recv_bytes()
                if message[:1] != _JOB_TAG:
                    return
                job = pickle.loads(message[1:])
            if not _one_pass(job, first, step, commands, results):
                return
            job = None  # nothing of the pass is kept
    except (BrokenPipeError, EOFError):
        return  # the consumer stopped reading, or its process is gone
    finally:
        results.close()


def _one_pass(
    job: tuple[Callable[[int], Any], int, int], first: int, step: int, commands: Any, results: Any
) -> bool:
    prepare, count, depth = job
    indices = range(first, count, step)
    credits = min(depth, len(indices))
    for index in indices:
        if credits == 0:
            if commands.recv_bytes() != _CREDIT:
                return False
            credits = 1
        credits -= 1
        try:
            item = prepare(index)
        except Exception as exc:  # noqa: BLE001 (re-raised by the consumer at this item)
            item = Failed(exc)
        _send(results, item)
    return True


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
