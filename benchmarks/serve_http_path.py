"""The server's CPU per request on its HTTP path alone: generation replaced by a constant answer.

``dpmtv serve`` runs as ``serve_throughput.py`` runs it (embedded model, two vectors, one torch
thread), except that the batcher's ``generate_rows`` returns a fixed answer after 2 ms without the
interpreter lock (a stand-in batch). What remains is the event loop, the request preparation and
the answer: the server process's CPU seconds per request (``/proc``, through psutil) while
``--clients`` raw loopback clients send ``--requests`` requests, ``--repeats`` times after a
warm-up. Steadier than requests/s on a shared machine, and what a change to the HTTP path moves.

    python benchmarks/serve_http_path.py [--requests 3000] [--clients 32] [--repeats 3] [--work DIR]
        [--out benchmarks/results/serve_http_path.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

STAND_IN_BATCH_S = 0.002


def _serve_with_constant_answers() -> None:
    """This script as the server: ``dpmtv serve`` with the stand-in generation."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI sets it, before torch loads
    from dpmtv.cli import main
    from dpmtv.serve import _batcher
    from dpmtv.serve._generation import RowResult

    def constant(served, rows, on_text=None, on_first_token=None):
        time.sleep(STAND_IN_BATCH_S)
        return [RowResult("red", "stop", 20, 2) for _ in rows]

    _batcher.generate_rows = constant  # type: ignore[assignment]
    main(sys.argv[2:])


def measure(requests: int, clients: int, repeats: int, work: Path) -> dict:
    import psutil
    from serve_load import _load, build_vectors, serve_command, test_queries, wait_healthy

    vectors = build_vectors(work)
    url, command = serve_command(vectors, max_batch_size=clients, clients=clients, threads=1)
    server_command = [sys.executable, __file__, "--as-server", *command[3:]]
    server = subprocess.Popen(server_command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_healthy(url, server)
        queries = test_queries()
        asyncio.run(_load(url, queries, 4 * clients, clients, "raw"))  # warm-up
        process, runs = psutil.Process(server.pid), []
        for _ in range(repeats):
            before = sum(process.cpu_times()[:2])
            load = asyncio.run(_load(url, queries, requests, clients, "raw"))
            cpu_s = sum(process.cpu_times()[:2]) - before
            runs.append(
                {
                    "requests_per_s": load["requests_per_s"],
                    "server_cpu_ms_per_request": 1000 * cpu_s / requests,
                    "errors": load["errors"],
                }
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
    return {
        "server_cpu_ms_per_request_median": statistics.median(r["server_cpu_ms_per_request"] for r in runs),
        "runs": runs,
        "server_command": " ".join(server_command[2:]),
    }


def main() -> None:
    if sys.argv[1:2] == ["--as-server"]:
        _serve_with_constant_answers()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, help="keep the records and vectors here (reused when present)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/serve_http_path.json"))
    args = parser.parse_args()
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as temporary:
        result = measure(args.requests, args.clients, args.repeats, args.work or Path(temporary))
    load.append(os.getloadavg()[0])
    result |= {
        "stand_in_batch_s": STAND_IN_BATCH_S,
        "command": "python " + " ".join(sys.argv),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_1m_at_start_end": load,
            "platform": platform.platform(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
