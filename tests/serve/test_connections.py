"""Slow and vanishing clients against a real uvicorn on 127.0.0.1, configured as `dpmtv serve`
is (bounded: a handful of sockets, timeouts of about a second)."""

from __future__ import annotations

import base64
import io
import json
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from PIL import Image

from dpmtv.serve import ServeSettings, _requests, create_app
from dpmtv.serve._connections import PROTOCOLS, RateLimitFilter
from tests.serve._live import live_server
from tests.serve.conftest import chat_body
from tests.serve.test_api import metric_values

WAIT_S = 20.0  # generous bound for a busy machine; the server's own timeouts are 1 s


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
    return sock


def _read_until(sock: socket.socket, marker: bytes) -> bytes:
    sock.settimeout(WAIT_S)
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _closed_by_server(sock: socket.socket) -> bool:
    """True when the server closes the socket within WAIT_S (recv sees EOF or a reset)."""
    sock.settimeout(WAIT_S)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.fixture(scope="module", params=sorted(PROTOCOLS))
def guarded_app(served, request):
    """The guards on each protocol this install has (httptools, what `dpmtv serve` runs, and
    h11, its fallback)."""
    settings = ServeSettings(
        header_timeout_s=1.0, body_timeout_s=1.0, max_connections=6, batch_window_ms=1000
    )
    app = create_app(served, settings)
    with live_server(app, http=request.param) as url:
        yield url, app


@pytest.fixture
def guarded(guarded_app):
    return guarded_app[0]


def test_connections_that_send_nothing_are_closed_and_the_server_still_answers(guarded):
    idle = [_connect(guarded) for _ in range(4)]
    try:
        assert all(_closed_by_server(sock) for sock in idle)
    finally:
        for sock in idle:
            sock.close()
    assert httpx.get(f"{guarded}/healthz", timeout=WAIT_S).status_code == 200


def test_slowloris_headers_are_cut_off_at_the_header_timeout(guarded):
    sockets = [_connect(guarded) for _ in range(4)]
    started = time.monotonic()
    closed = [False] * len(sockets)
    try:
        for sock in sockets:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            sock.setblocking(False)
        while not all(closed) and time.monotonic() - started < WAIT_S:
            for i, sock in enumerate(sockets):  # one header byte per socket every 0.1 s
                if closed[i]:
                    continue
                try:
                    sock.sendall(b"X")
                    if sock.recv(1) == b"":
                        closed[i] = True
                except BlockingIOError:
                    pass
                except (BrokenPipeError, ConnectionResetError):
                    closed[i] = True
            time.sleep(0.1)
    finally:
        for sock in sockets:
            sock.close()
    assert all(closed), "slow-header connections stayed open"


def test_a_stalled_body_gets_408(guarded):
    sock = _connect(guarded)
    try:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"model": '
        )
        reply = _read_until(sock, b"}}").decode()
    finally:
        sock.close()
    assert reply.startswith("HTTP/1.1 408") and "--body-timeout-s" in reply


def _raw_post(url: str, body: dict) -> socket.socket:
    sock = _connect(url)
    payload = json.dumps(body).encode()
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    return sock


def _metrics(url: str) -> dict:
    return metric_values(httpx.get(f"{url}/metrics", timeout=WAIT_S).text)


def _wait_for(url: str, key: tuple, value: float) -> dict:
    deadline = time.monotonic() + WAIT_S
    while (metrics := _metrics(url)).get(key) != value:
        assert time.monotonic() < deadline, (key, {k: v for k, v in metrics.items() if "cancel" in k[0]})
        time.sleep(0.2)
    return metrics


def test_a_request_abandoned_in_the_queue_is_never_generated(guarded):
    sock = _raw_post(guarded, chat_body("colour", max_tokens=50))
    time.sleep(0.2)  # inside the 1 s batch window
    sock.close()
    key = ("dpmtv_cancelled_requests_total", (("model", "colour"), ("started", "false")))
    metrics = _wait_for(guarded, key, 1)
    assert metrics.get(("dpmtv_generated_tokens_total", (("model", "colour"),)), 0) == 0


def test_a_stream_abandoned_mid_answer_stops_generating(guarded_app, served):
    """Ordered, not timed: a forward pre-hook lets the model take one step per permit until the
    client has its first text, and after the client has gone, holds the next step until the
    server has seen the disconnect (the stream's pixels released, after its job was cancelled).
    Unpaced, a fast machine could generate all 200 tokens before the disconnect was read."""
    url, app = guarded_app
    body = chat_body("shape", image_seed=5, max_tokens=200, stream=True)
    # The random-weight model never ends an answer here (its end tokens' logits set to -inf):
    # without this, near-tied logits ended it early on some loads (42 tokens once, in CI)
    eos = served.loaded.adapter.eos_token_ids

    def no_end_token(_module, _args, output) -> None:
        output.logits[..., eos] = -1e9

    never_end = served.loaded.model.register_forward_hook(no_end_token)
    try:
        whole = httpx.post(f"{url}/v1/chat/completions", json={**body, "stream": False}, timeout=300).json()
        assert whole["choices"][0]["finish_reason"] == "length"  # all 200 tokens when no one leaves
        _abandon_a_stream(url, app, served, body)
    finally:
        never_end.remove()


def _abandon_a_stream(url, app, served, body) -> None:
    before = _metrics(url).get(("dpmtv_generated_tokens_total", (("model", "shape"),)), 0)
    steps, closed, pixels = threading.Semaphore(0), threading.Event(), app.state.chat.pixels

    def pace(module, args) -> None:
        if not closed.is_set():
            steps.acquire(timeout=WAIT_S)
            return
        deadline = time.monotonic() + WAIT_S
        while pixels.held and time.monotonic() < deadline:
            time.sleep(0.01)

    hook = served.loaded.model.register_forward_pre_hook(pace)
    try:
        sock = _raw_post(url, body)
        sock.settimeout(0.5)
        head, deadline = b"", time.monotonic() + WAIT_S
        while head.count(b"data:") < 2:  # the role chunk, then the first text
            assert time.monotonic() < deadline, head
            steps.release()
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue  # that step decoded no visible text yet: allow another
            assert chunk, head  # the server closed the connection: not a stream
            head += chunk
        sock.close()
        closed.set()
        steps.release()  # the step waiting for a permit goes on; the next waits for the disconnect
        key = ("dpmtv_cancelled_requests_total", (("model", "shape"), ("started", "true")))
        metrics = _wait_for(url, key, 1)
    finally:
        hook.remove()
    assert metrics[("dpmtv_generated_tokens_total", (("model", "shape"),))] - before < 200


def test_repeated_log_lines_are_rate_limited():
    now = [0.0]
    limit = RateLimitFilter(per_minute=3, clock=lambda: now[0])

    def record(fd: int = 0) -> logging.LogRecord:  # asyncio's message, its socket line varying
        message = f"socket.accept() out of system resource\nsocket: <socket fd={fd}>"
        return logging.LogRecord("asyncio", logging.ERROR, "x", 1, message, None, None)

    passed = [limit.filter(record(fd)) for fd in range(1000)]
    assert sum(passed) == 3
    now[0] = 61.0
    last = record()
    assert limit.filter(last) and "997 repeated log lines dropped" in last.msg


def _jpeg_data_url(side: int) -> str:
    ramp = np.linspace(0, 255, side, dtype=np.uint8)
    pixels = np.stack(
        [np.tile(ramp, (side, 1)), np.tile(ramp[:, None], (1, side)), np.full((side, side), 99, np.uint8)], -1
    )
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_health_checks_are_answered_while_a_large_body_is_parsed(guarded, served, monkeypatch):
    """Ordering, not timing: the large request's JSON parsing is held until /healthz has
    answered. Parsing on the event loop (the old code) holds the loop too, so /healthz could not
    answer and its bounded wait fails."""
    entered, released = threading.Event(), threading.Event()
    parse = _requests.parse_json_body

    def held_parse(body: bytes):
        entered.set()
        released.wait(WAIT_S)
        return parse(body)

    monkeypatch.setattr(_requests, "parse_json_body", held_parse)
    body = chat_body(served.name, max_tokens=1)  # the bare model: the vectors' counts stay as they were
    body["messages"][0]["content"][1]["image_url"]["url"] = _jpeg_data_url(2048)
    with ThreadPoolExecutor(1) as pool:
        large = pool.submit(httpx.post, f"{guarded}/v1/chat/completions", json=body, timeout=3 * WAIT_S)
        assert entered.wait(WAIT_S), "the large request never reached its JSON parsing"
        try:
            health = httpx.get(f"{guarded}/healthz", timeout=WAIT_S / 4)
            answered_while_parsing = not released.is_set()
        finally:
            released.set()
        assert health.status_code == 200 and answered_while_parsing
        assert large.result().status_code == 200
