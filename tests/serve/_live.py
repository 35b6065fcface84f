"""A real uvicorn server on a free loopback port, in a background thread, configured exactly as
`dpmtv serve` configures it (``uvicorn_config``: the guarded protocol, its timeouts and limits)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from dpmtv.serve._connections import uvicorn_config


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def live_server(app, *, timeout_s: float = 30.0, http: str = "auto") -> Iterator[str]:
    """Yields the base URL (``http``: the guarded protocol, as ``uvicorn_config`` takes it);
    shuts the server down (and joins its thread) on exit."""
    port = free_port()
    settings = app.state.settings
    config = uvicorn_config(app, settings, host="127.0.0.1", port=port, log_level="warning", http=http)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on 127.0.0.1:{port}")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=timeout_s)
