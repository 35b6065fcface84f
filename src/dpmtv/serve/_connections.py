"""Connection-level limits uvicorn lacks, and the uvicorn configuration `dpmtv serve` runs.

`dpmtv serve` runs uvicorn's httptools protocol (its C parser) where httptools is installed, and
its pure-Python h11 protocol otherwise, each with the same guards. uvicorn closes idle keep-alive
connections but never a connection that sends nothing, or its headers one byte at a time
(slowloris), and it accepts sockets until the process runs out of file descriptors — then
asyncio logs one traceback per failed ``accept()``. Here:

- **header timeout**: from the connection's start, or a new request's first byte, the request
  line and headers must all arrive within ``header_timeout_s`` or the connection is closed;
- **body timeout**: ``body_timeout_s``, in the app (``_read_body``, a 408);
- **connection limit**: at ``max_connections`` open sockets (keep it below ``ulimit -n``), a new
  one first closes the longest-idle connection (no request in progress: it never sent a byte,
  or is kept alive after its response), so one client holding idle sockets cannot lock the
  others out; when every connection has a request in progress, the new one is answered ``503``
  with ``Retry-After`` and ``Connection: close``, then closed (a closed socket with no answer
  reads to a client as a network fault);
- **log rate limit**: a message repeated more than a few times a minute is dropped, with a count
  of what was dropped on the next line that passes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any, cast

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from dpmtv.errors import ParameterError
from dpmtv.serve._settings import ServeSettings

logger = logging.getLogger("dpmtv.serve")


_REFUSED_LINGER_S = 1.0  # a refused socket reads (and drops) what the client sends, then closes
_RETRY_AFTER_S = 1


class ConnectionGuard(asyncio.Protocol):
    """A header deadline and a cap on open connections, over either of uvicorn's HTTP/1.1
    protocols (they share what this reads: ``cycle``, set once a request's headers are in,
    ``connections``, ``loop`` and ``transport``)."""

    header_timeout_s: float = 10.0
    max_connections: int = 512
    cycle: Any
    connections: set[Any]
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_deadline: asyncio.TimerHandle | None = None
        # not loop.time(): uvloop's is cached per loop iteration, in ms, so sockets accepted together tie
        self._last_active_s, self._refused = time.monotonic(), False
        if (
            len(self.connections) > self.max_connections
            and _open_count(self.connections) > self.max_connections
        ):
            if not self._close_longest_idle():
                self._refuse()
                return
        self._arm_header_deadline()

    def _idle(self) -> bool:
        """No request in progress: nothing lost when the server closes it."""
        in_request = self.cycle is not None and not self.cycle.response_complete
        return not (in_request or self._refused or self.transport.is_closing())

    def _close_longest_idle(self) -> bool:
        idle = [c for c in self.connections if isinstance(c, ConnectionGuard) and c is not self and c._idle()]
        if not idle:
            return False
        victim = min(idle, key=lambda connection: connection._last_active_s)
        logger.warning(
            "closed an idle connection for a new one: %d are open (--max-connections)", self.max_connections
        )
        victim._disarm_header_deadline()
        victim.transport.close()
        return True

    def _refuse(self) -> None:
        """503 before the request is read (a server may answer early), then close: the client's
        request is read and dropped until then, so closing does not reset the answer away."""
        self._refused = True
        logger.warning(
            "answered 503 to a new connection: all %d have a request in progress (--max-connections)",
            self.max_connections,
        )
        message = (
            f"the server has {self.max_connections} connections with a request in progress "
            f"(--max-connections); retry in {_RETRY_AFTER_S} s"
        )
        body = json.dumps(
            {
                "error": {
                    "message": message,
                    "type": "server_error",
                    "param": None,
                    "code": "too_many_connections",
                }
            }
        ).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            f"retry-after: {_RETRY_AFTER_S}\r\nconnection: close\r\ncontent-length: {len(body)}\r\n\r\n"
        )
        self.transport.write(head.encode("ascii") + body)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(_REFUSED_LINGER_S, self.transport.close)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # answered already
        self._last_active_s = time.monotonic()
        if self._header_deadline is None and (self.cycle is None or self.cycle.response_complete):
            self._arm_header_deadline()  # the first byte of a new request on a kept-alive connection
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:
            self._disarm_header_deadline()  # the request line and headers have arrived

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        if self.header_timeout_s > 0:
            self._header_deadline = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm_header_deadline(self) -> None:
        deadline: asyncio.TimerHandle | None = getattr(self, "_header_deadline", None)
        if deadline is not None:
            deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if not self.transport.is_closing():
            logger.info("closed a connection whose request headers took over %g s", self.header_timeout_s)
            self.transport.close()


class GuardedH11Protocol(ConnectionGuard, H11Protocol):
    """uvicorn's h11 protocol (pure Python), guarded: where httptools is not installed."""


def _open_count(connections: set[Any]) -> int:
    """Connections not already closing (a closed idle one leaves the set a moment later)."""
    return sum(not connection.transport.is_closing() for connection in connections)


def default_max_connections() -> int:
    """512, or fewer where ``ulimit -n`` is low: 100 descriptors stay free for the model's files,
    the log and the sockets being refused."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 512
    return max(8, min(512, soft - 100))


def available_protocols() -> dict[str, type[ConnectionGuard]]:
    """The guarded protocols this install can run, the preferred first: httptools (a C parser;
    the event loop's CPU per request was most of the HTTP path's) where installed, then h11."""
    protocols: dict[str, type[ConnectionGuard]] = {}
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        pass
    else:

        class GuardedHttpToolsProtocol(ConnectionGuard, HttpToolsProtocol):
            """uvicorn's httptools protocol, guarded: what `dpmtv serve` runs."""

        protocols["httptools"] = GuardedHttpToolsProtocol
    protocols["h11"] = GuardedH11Protocol
    return protocols


PROTOCOLS = available_protocols()


def guarded_protocol(settings: ServeSettings, http: str = "auto") -> type[ConnectionGuard]:
    """The protocol class with this server's limits (uvicorn builds one instance per connection):
    ``auto`` is the first of :func:`available_protocols`."""
    protocols = PROTOCOLS
    name = next(iter(protocols)) if http == "auto" else http
    if name not in protocols:
        raise ParameterError(
            f"http protocol '{http}' is not available here; choose one of: auto, {', '.join(protocols)}"
        )
    return type(
        f"Dpmtv{protocols[name].__name__}",
        (protocols[name],),
        {"header_timeout_s": settings.header_timeout_s, "max_connections": settings.max_connections},
    )


class RateLimitFilter(logging.Filter):
    """At most ``per_minute`` records per minute of one message (its template's first line); the
    next record that passes says how many were dropped."""

    def __init__(self, per_minute: int = 10, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.per_minute, self.clock = per_minute, clock
        self._windows: dict[tuple[str, str], list[float]] = {}
        self._dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        # The first line: asyncio's accept() failures differ only in the lines that follow.
        key = (record.name, str(record.msg).split("\n", 1)[0][:200])
        window, count = self._windows.setdefault(key, [now, 0])
        if now - window >= 60:
            self._windows[key] = [now, 0]
            count = 0
        self._windows[key][1] = count + 1
        if count >= self.per_minute:
            self._dropped += 1
            return False
        if self._dropped:
            record.msg = f"{record.msg} [{self._dropped} repeated log lines dropped before this one]"
            self._dropped = 0
        if len(self._windows) > 10_000:  # templates are few; formatted messages could be many
            self._windows.clear()
        return True


_RATE_LIMITED = ("uvicorn.error", "asyncio", "dpmtv.serve")


def install_log_rate_limit(per_minute: int = 10) -> RateLimitFilter:
    """One filter on the loggers a flood of bad connections writes to (idempotent)."""
    rate_limit = RateLimitFilter(per_minute)
    for name in _RATE_LIMITED:
        target = logging.getLogger(name)
        for old in [f for f in target.filters if isinstance(f, RateLimitFilter)]:
            target.removeFilter(old)
        target.addFilter(rate_limit)
    return rate_limit


def uvicorn_config(
    app: Any,
    settings: ServeSettings,
    *,
    host: str,
    port: int,
    log_level: str = "info",
    keep_alive_s: float = 30.0,
    http: str = "auto",
) -> uvicorn.Config:
    """What `dpmtv serve` runs (and what the tests run on loopback); ``http`` picks the guarded
    protocol (:func:`guarded_protocol`)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=guarded_protocol(settings, http),
        timeout_keep_alive=cast(int, keep_alive_s),  # uvicorn annotates int; call_later takes a float
        backlog=min(2048, settings.max_connections),
        timeout_graceful_shutdown=30,
    )
