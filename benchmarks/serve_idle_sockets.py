"""One client holds idle sockets against `dpmtv serve` (the embedded model, default
`--max-connections` 512): can other clients still connect? Opens IDLE loopback sockets that never
send a byte, then makes REQUESTS fresh-connection `GET /healthz` calls one after another and
reports how many were answered (200 or 503) and how many were dropped without a response, with
the time from the first call until the first answer. Each `--src` folder (a `src/` of dpmtv, e.g.
an older commit's from `git archive`) serves in turn, so the runs compare side by side. Writes
benchmarks/results/serve_idle_sockets.json with the command line.

    python benchmarks/serve_idle_sockets.py --idle 1000 --requests 20 --src src --src /tmp/old/src
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

CLI = [sys.executable, "-c", "import sys; from dpmtv.cli import main; sys.exit(main())"]


def _start(src: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(src.resolve())}
    server = subprocess.Popen([*CLI, "serve", "--model", "embedded", "--port", str(port), "--threads", "1",
                               "--log-level", "error"], env=env)  # fmt: skip
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).raise_for_status()
            return server
        except httpx.HTTPError:
            assert server.poll() is None, "dpmtv serve exited"
            time.sleep(0.5)


def _calls(url: str, requests: int) -> dict:
    statuses, dropped, latencies_ms, first_answer_s = [], 0, [], None
    started = time.monotonic()
    for _ in range(requests):
        began = time.monotonic()
        try:
            with httpx.Client(timeout=30) as client:  # a fresh connection per call
                statuses.append(client.get(f"{url}/healthz").status_code)
            latencies_ms.append((time.monotonic() - began) * 1000)
            first_answer_s = first_answer_s if first_answer_s is not None else time.monotonic() - started
        except httpx.HTTPError:
            dropped += 1
            time.sleep(0.1)
    return {
        "answered_200": statuses.count(200),
        "answered_503": statuses.count(503),
        "dropped_without_response": dropped,
        "first_answer_after_s": None if first_answer_s is None else round(first_answer_s, 3),
        "answer_p50_ms": round(float(np.median(latencies_ms)), 1) if latencies_ms else None,
    }


def _run(src: Path, idle: int, requests: int) -> dict:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = _start(src, port)
    held = []
    try:
        for _ in range(idle):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        time.sleep(1.0)  # the server has accepted them
        return {"src": str(src), "idle_sockets": idle, **_calls(f"http://127.0.0.1:{port}", requests)}
    finally:
        for sock in held:
            sock.close()
        server.terminate()
        server.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--src", type=Path, action="append", required=True)
    default_out = Path(__file__).parent / "results" / "serve_idle_sockets.json"
    parser.add_argument("--out", type=Path, default=default_out)
    args = parser.parse_args()
    runs = [_run(src, args.idle, args.requests) for src in args.src]
    result = {
        "command": " ".join(["python", "benchmarks/serve_idle_sockets.py", *sys.argv[1:]]),
        "machine": "2 shared cores, loaded by other jobs",
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
