"""The ``--max-connections`` cap against a real uvicorn on 127.0.0.1 (a handful of sockets,
bounded waits): at the cap, a new connection first closes the longest-idle connection (one with
no request in progress: never sent a byte, or kept alive after its response); only when every
connection has a request in progress is the new one answered ``503`` with ``Retry-After``.

On the old code (a41db9d) a connection beyond the cap was closed at once with no HTTP response:
one client holding idle sockets locked every other client out until its sockets timed out."""

from __future__ import annotations

import json
import socket
import sys
import time

import httpx
import pytest

from dpmtv.serve import ServeSettings, create_app
from dpmtv.serve._connections import PROTOCOLS
from tests.serve._live import live_server

WAIT_S = 20.0  # a bound for a busy machine; nothing here waits on a server timeout
CAP = 4


@pytest.fixture(params=sorted(PROTOCOLS))
def capped(served, request):
    """Timeouts far beyond the test's length: only the cap closes anything here (on each guarded
    protocol this install has). A server per test: sockets a previous test left closing or
    lingering (a refused one reads for a second) would count against the cap."""
    settings = ServeSettings(header_timeout_s=120.0, body_timeout_s=120.0, max_connections=CAP)
    with live_server(create_app(served, settings), http=request.param) as url:
        yield url


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=WAIT_S)


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(WAIT_S)
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _stalled_request(url: str) -> socket.socket:
    """A connection with a request in progress: headers sent, the body never finished."""
    sock = _connect(url)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b'Content-Length: 1000\r\n\r\n{"model": '
    )
    return sock


def _until_healthy(url: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:  # the closed sockets are released as the server sees them go
        try:
            if httpx.get(f"{url}/healthz", timeout=WAIT_S).status_code == 200:
                return
        except httpx.HTTPError:
            assert time.monotonic() < deadline
            time.sleep(0.2)


def test_idle_sockets_at_the_cap_give_way_to_a_new_client_oldest_first(capped):
    idle = [_connect(capped) for _ in range(CAP)]
    time.sleep(0.2)  # the server has accepted them all (they are older than the new client)
    try:
        with httpx.Client(timeout=WAIT_S) as client:
            assert client.get(f"{capped}/healthz").status_code == 200  # answered, not dropped
        assert _closed_by_server(idle[0])  # the longest idle went first
    finally:
        for sock in idle:
            sock.close()
    _until_healthy(capped)


def test_a_kept_alive_connection_is_idle_too(capped):
    with httpx.Client(timeout=WAIT_S) as kept:
        assert kept.get(f"{capped}/healthz").status_code == 200  # now idle, kept alive
        others = [_connect(capped) for _ in range(CAP)]
        try:
            assert not any(_closed_quickly(sock) for sock in others)  # the kept-alive one went
        finally:
            for sock in others:
                sock.close()
    _until_healthy(capped)


def _closed_quickly(sock: socket.socket) -> bool:
    sock.settimeout(0.3)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


def test_when_every_connection_is_busy_a_new_one_gets_503_with_retry_after(capped):
    busy = [_stalled_request(capped) for _ in range(CAP)]
    time.sleep(0.2)
    try:
        extra = _connect(capped)
        extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        extra.settimeout(WAIT_S)
        reply = b""
        while chunk := extra.recv(65536):
            reply += chunk
        extra.close()
        head, _, body = reply.decode().partition("\r\n\r\n")
        assert head.startswith("HTTP/1.1 503"), reply
        assert "retry-after: 1" in head.lower() and "connection: close" in head.lower()
        error = json.loads(body)["error"]
        assert error["code"] == "too_many_connections" and "--max-connections" in error["message"]
        assert not any(_closed_quickly(sock) for sock in busy)  # requests in progress are kept
    finally:
        for sock in busy:
            sock.close()
    _until_healthy(capped)


def test_without_httptools_the_server_runs_the_guarded_h11_protocol(monkeypatch):
    """httptools is the preferred parser; an install without it falls back to h11 with the same
    guards, and naming a protocol this install lacks is a clear error."""
    from dpmtv.errors import ParameterError
    from dpmtv.serve import _connections

    monkeypatch.setitem(sys.modules, "httptools", None)  # import httptools raises ImportError
    monkeypatch.delitem(sys.modules, "uvicorn.protocols.http.httptools_impl", raising=False)
    monkeypatch.setattr(_connections, "PROTOCOLS", _connections.available_protocols())
    assert list(_connections.PROTOCOLS) == ["h11"]
    settings = ServeSettings(max_connections=CAP)
    protocol = _connections.guarded_protocol(settings)
    assert issubclass(protocol, _connections.GuardedH11Protocol) and protocol.max_connections == CAP
    with pytest.raises(ParameterError, match="'httptools' is not available here"):
        _connections.guarded_protocol(settings, "httptools")


@pytest.mark.skipif("httptools" not in PROTOCOLS, reason="httptools is not installed")
def test_with_httptools_the_server_runs_the_guarded_httptools_protocol():
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from dpmtv.serve._connections import ConnectionGuard, guarded_protocol

    protocol = guarded_protocol(ServeSettings(header_timeout_s=3.0))
    assert issubclass(protocol, HttpToolsProtocol) and issubclass(protocol, ConnectionGuard)
    assert protocol.header_timeout_s == 3.0
