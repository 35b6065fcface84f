"""`dpmtv serve --workers N`: N server processes answering on one port.

One process runs its event loop, its request preparation and its generation under one
interpreter lock, so it uses about one core however many it has (``benchmarks/serve_gil.py``:
batched generation alone 1,636 rows/s, beside one thread preparing requests 76). N processes use
N cores. The parent checks that the port can be bound and starts N workers (spawned, not forked:
a forked torch can hang on its parent's thread pools); each loads and checks the model and
vectors itself (:func:`dpmtv.serve._copies.load_copy`, as a Ray replica does) and listens on the
port with its own socket (``SO_REUSEPORT``), with the same uvicorn configuration and guards as
one process. The kernel spreads new connections over the workers' sockets by their addresses: one
shared socket let the worker that accepted first take most (27 of 32 keep-alive connections,
measured). Linux lets only processes of the same user join the port. A worker that dies is
replaced; one that keeps dying stops the server.

Every limit (queue, connections, pixels in flight, batch size) is per worker, so memory bounds
are N times one process's. Every response names its worker in ``x-dpmtv-worker`` (its process
id). Queries are post-processing of released vectors: no privacy cost.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import time
from collections import deque
from multiprocessing.process import BaseProcess

from dpmtv.errors import DpmtvError, ParameterError
from dpmtv.serve._copies import CopyHeader, ReplicaSpec, load_copy

__all__ = ["WORKER_HEADER", "serve_workers"]

WORKER_HEADER = "x-dpmtv-worker"
_RESTARTS_PER_MINUTE = 5  # beyond this a worker is failing at start, not dying by accident
_STOP_TIMEOUT_S = 35.0  # uvicorn's graceful shutdown (30 s) and a margin

logger = logging.getLogger("dpmtv.serve")


def serve_workers(
    spec: ReplicaSpec, *, workers: int, host: str, port: int, log_level: str, keep_alive_s: float
) -> None:
    """Serve on ``host:port`` with ``workers`` processes until interrupted (Ctrl-C, SIGTERM).

    Raises:
        ParameterError: ``workers`` below 1, or the port cannot be bound.
        DpmtvError: workers kept dying (more than a few restarts within a minute).
    """
    if workers < 1:
        raise ParameterError(f"--workers must be at least 1, got {workers}")
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ParameterError("--workers needs SO_REUSEPORT (Linux, macOS), which this system lacks")
    reserved = _bind(host, port)  # bound, never listening: refuses a busy port before any worker loads
    context = multiprocessing.get_context("spawn")
    # a spawned process starts with logging's defaults: give it the levels set here (the CLI
    # quiets libraries that log at import, such as torchao's optional kernels)
    levels = {name: logging.getLogger(name).level for name in logging.root.manager.loggerDict}
    arguments = (spec, host, port, log_level, keep_alive_s, levels)

    def start() -> BaseProcess:
        process = context.Process(target=_worker_main, args=arguments, name="dpmtv-serve-worker")
        process.start()
        return process

    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    processes = [start() for _ in range(workers)]
    restarts: deque[float] = deque()
    try:
        while True:
            time.sleep(0.5)
            for index, process in enumerate(processes):
                if process.is_alive():
                    continue
                restarts.append(time.monotonic())
                while restarts and restarts[0] < time.monotonic() - 60:
                    restarts.popleft()
                if len(restarts) > _RESTARTS_PER_MINUTE:
                    raise DpmtvError(
                        f"server workers exited {len(restarts)} times within a minute (the last with "
                        f"code {process.exitcode}): see the lines above"
                    )
                logger.warning(
                    "worker %s exited with code %s; starting another", process.pid, process.exitcode
                )
                processes[index] = start()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        _stop(processes)
        reserved.close()


def _bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` in the port's ``SO_REUSEPORT`` group."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY on accepted sockets only then, and without
    # it Nagle's algorithm and delayed ACKs held each answer ~40 ms (452 req/s against 1,251)
    bound = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        bound.bind((host, port))
    except OSError as exc:
        bound.close()
        raise ParameterError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return bound


def _stop(processes: list[BaseProcess]) -> None:
    """SIGTERM to every worker (uvicorn finishes the requests in flight), then SIGKILL to any
    that outlives the graceful shutdown."""
    for process in processes:
        if process.is_alive() and process.pid is not None:
            os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_TIMEOUT_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


def _worker_main(
    spec: ReplicaSpec,
    host: str,
    port: int,
    log_level: str,
    keep_alive_s: float,
    logger_levels: dict[str, int],
) -> None:
    """One worker: load and check its copy, then listen on the port with a socket of its own
    until SIGTERM."""
    import uvicorn

    from dpmtv.serve import create_app
    from dpmtv.serve._connections import install_log_rate_limit, uvicorn_config

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group: the parent stops us
    for name, level in logger_levels.items():  # what the command set in its own process
        logging.getLogger(name).setLevel(level)
    served = load_copy(spec)
    install_log_rate_limit()
    app = create_app(served, spec.settings)
    app.add_middleware(CopyHeader, replica=str(os.getpid()), header=WORKER_HEADER)
    config = uvicorn_config(
        app, spec.settings, host=host, port=port, log_level=log_level, keep_alive_s=keep_alive_s
    )
    uvicorn.Server(config).run(sockets=[_bind(host, port)])
