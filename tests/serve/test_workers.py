"""`dpmtv serve --workers N`: real worker processes on one loopback port, started by the real
command; answers compared with a single-process server's."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.serve import ServeSettings, create_app
from dpmtv.serve.workers import WORKER_HEADER
from tests.serve._live import free_port, live_server
from tests.serve.conftest import chat_body

KEY = "workers-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
REQUEST_TIMEOUT_S = 60.0  # per request: a hung request fails the test instead of hanging it
START_TIMEOUT_S = 600.0  # a loaded CI machine imports torch slowly, in each worker too


def _command(tiny_llava_path, served_vectors, port: int) -> list[str]:
    return [
        sys.executable,
        "-c",
        "import sys; from dpmtv.cli import main; sys.exit(main())",
        "serve",
        "--model",
        str(tiny_llava_path),
        *(arg for name in ("colour", "shape") for arg in ("--vector", f"{name}={served_vectors[name]}")),
        "--port",
        str(port),
        "--workers",
        "2",
        "--threads",
        "1",
        "--log-level",
        "warning",
    ]


def _workers_answering(url: str, count: int, deadline: float) -> set[str]:
    """The worker ids seen on fresh connections, until ``count`` distinct ones have answered."""
    seen: set[str] = set()
    while len(seen) < count:
        assert time.monotonic() < deadline, f"only workers {seen} answered"
        try:
            response = httpx.get(f"{url}/healthz", headers={"Connection": "close"}, timeout=5)
            seen.add(response.headers[WORKER_HEADER])
        except httpx.HTTPError:
            time.sleep(0.2)
    return seen


@pytest.fixture(scope="module")
def workers(tiny_llava_path, served_vectors):
    """``dpmtv serve --workers 2`` with an API key: (base URL, the parent process)."""
    port = free_port()
    env = {**os.environ, "DPMTV_API_KEY": KEY, "PYTHONPATH": os.pathsep.join(sys.path)}
    server = subprocess.Popen(
        _command(tiny_llava_path, served_vectors, port),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _workers_answering(url, 2, time.monotonic() + START_TIMEOUT_S)
        yield url, server
    finally:
        server.terminate()
        server.wait(timeout=60)
        server.stderr.close()


def _body(index: int, bare: str) -> dict:
    model = ("colour", "shape", bare)[index % 3]
    return chat_body(model, image_seed=index % 5, max_tokens=4, temperature=0)


def _ask(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=AUTH, timeout=REQUEST_TIMEOUT_S)


@pytest.mark.slow
def test_two_workers_answer_as_one_process_does(workers, served):
    url, _ = workers
    bodies = [_body(index, served.name) for index in range(24)]
    with ThreadPoolExecutor(8) as pool:
        answered = list(pool.map(lambda body: _ask(url, body), bodies))
    assert [r.status_code for r in answered] == [200] * len(bodies), answered[0].text
    with live_server(create_app(served, ServeSettings(api_key=KEY))) as single:
        alone = [_ask(single, body) for body in bodies]
    answers = [[c["message"]["content"] for c in r.json()["choices"]] for r in answered]
    assert answers == [[c["message"]["content"] for c in r.json()["choices"]] for r in alone]
    assert httpx.post(f"{url}/v1/chat/completions", json=bodies[0], timeout=30).status_code == 401


@pytest.mark.slow
def test_a_killed_worker_is_replaced_and_no_request_hangs(workers, served):
    url, _ = workers
    before = _workers_answering(url, 2, time.monotonic() + 60)
    victim = int(sorted(before)[0])
    bodies = [_body(index, served.name) for index in range(48)]

    def ask(body: dict) -> int | str:
        try:
            return _ask(url, body).status_code
        except httpx.TimeoutException:
            return "hung"
        except httpx.TransportError:  # the killed worker's connections close: a clear error
            return "connection closed"

    with ThreadPoolExecutor(8) as pool:
        pending = [pool.submit(ask, body) for body in bodies]
        time.sleep(0.3)
        os.kill(victim, signal.SIGKILL)
        outcomes = [future.result() for future in pending]
    assert "hung" not in outcomes
    assert outcomes.count(200) >= len(bodies) // 2, outcomes
    after = _workers_answering(url, 2, time.monotonic() + START_TIMEOUT_S)
    assert str(victim) not in after  # a new worker took its place
    assert [_ask(url, body).status_code for body in bodies[:6]] == [200] * 6


@pytest.mark.slow
def test_sigterm_stops_the_parent_and_every_worker(tiny_llava_path, served_vectors):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    server = subprocess.Popen(
        _command(tiny_llava_path, served_vectors, port),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        ids = _workers_answering(f"http://127.0.0.1:{port}", 2, time.monotonic() + START_TIMEOUT_S)
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
        for worker in ids:
            deadline = time.monotonic() + 10
            while _alive(int(worker)):
                assert time.monotonic() < deadline, f"worker {worker} outlived its parent"
                time.sleep(0.1)
    finally:
        if server.poll() is None:
            server.kill()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_busy_port_is_refused_before_any_worker_loads(tiny_llava_path, served_vectors):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        vector = f"colour={served_vectors['colour']}"
        result = CliRunner().invoke(
            main,
            [
                "serve",
                "--model",
                str(tiny_llava_path),
                "--vector",
                vector,
                "--port",
                str(port),
                "--workers",
                "2",
            ],
        )
    assert result.exit_code != 0
    assert f"cannot listen on 127.0.0.1:{port}" in result.output


def test_workers_and_ray_exclude_each_other():
    with warnings.catch_warnings():  # Ray Serve's own pydantic deprecations, at its import
        warnings.simplefilter("ignore")
        pytest.importorskip("ray.serve")
    result = CliRunner().invoke(
        main, ["serve", "--model", "/nonexistent", "--workers", "2", "--ray", "local"]
    )
    assert result.exit_code != 0 and "--workers and --ray exclude each other" in result.output


@pytest.mark.slow
def test_workers_that_keep_failing_at_start_stop_the_server_with_an_error(tmp_path):
    from dpmtv.errors import DpmtvError
    from dpmtv.serve._copies import ReplicaSpec
    from dpmtv.serve.workers import serve_workers

    spec = ReplicaSpec(str(tmp_path / "no-model-here"), (), ServeSettings())
    with pytest.raises(DpmtvError, match=r"server workers exited \d+ times within a minute"):
        serve_workers(
            spec, workers=2, host="127.0.0.1", port=free_port(), log_level="warning", keep_alive_s=5
        )


def test_a_system_without_reuseport_is_told_so(monkeypatch):
    import dpmtv.serve.workers as workers_module
    from dpmtv.errors import ParameterError
    from dpmtv.serve._copies import ReplicaSpec

    monkeypatch.delattr(workers_module.socket, "SO_REUSEPORT")
    with pytest.raises(ParameterError, match="--workers needs SO_REUSEPORT"):
        workers_module.serve_workers(
            ReplicaSpec("m", (), ServeSettings()),
            workers=2,
            host="127.0.0.1",
            port=1,
            log_level="info",
            keep_alive_s=5,
        )
