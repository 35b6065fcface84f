"""Requests/s through `dpmtv serve --ray local --replicas 2` beside the single-process HTTP server
and in-process batched generation, in one run, with the same load (issue 43, item 5).

The same embedded model, vectors, request bodies and load generator as serve_throughput.py, one
torch thread per server process (each replica too):

1. **In process**: batched generation of the prepared rows (serve_throughput.in_process).
2. **HTTP, one process**: `dpmtv serve` as a child process (serve_load.run_server).
3. **Ray Serve, 2 replicas**: `dpmtv serve --ray local --replicas 2` as a child process, which
   starts a local Ray cluster (all of this machine's CPUs), Serve's HTTP proxy on the port, and
   two replicas of the app, each reserving one CPU; the same warm-up and load, then SIGINT (the
   command deletes the app and stops Ray).
4. In process again. The load average is recorded before, between and after the runs.

The replicas' CPU is not counted (they are Ray's processes, not the command's): the Ray side
reports wall-clock requests/s and latencies only.

    python benchmarks/serve_throughput_ray.py [--requests 1000] [--clients 32] [--work DIR]
        [--out benchmarks/results/serve_throughput_ray.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_load import _load, build_vectors, run_server, serve_command, test_queries, wait_healthy  # noqa: E402
from serve_throughput import in_process, in_process_rows  # noqa: E402

from dpmtv.serve import load_served_model  # noqa: E402

REPLICAS = 2
_STOP_TIMEOUT_S = 120


def run_ray_server(vectors: dict[str, Path], *, requests: int, clients: int, timeout_s: float) -> dict:
    url, command = serve_command(vectors, max_batch_size=clients, clients=clients, threads=1)
    command += ["--ray", "local", "--replicas", str(REPLICAS), "--cpus-per-replica", "1"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_healthy(url, server, timeout_s=600)
        queries = test_queries()
        asyncio.run(asyncio.wait_for(_load(url, queries, 4 * clients, clients, "raw"), timeout_s))
        result = asyncio.run(asyncio.wait_for(_load(url, queries, requests, clients, "raw"), timeout_s))
        result.update({"replicas": REPLICAS, "server_command": " ".join(command[3:])})
        return result
    finally:
        server.send_signal(signal.SIGINT)  # the command deletes its app and stops its Ray
        try:
            server.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            server.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--run-timeout-s", type=float, default=1200)
    parser.add_argument("--work", type=Path, help="keep the records and vectors here (reused when present)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/serve_throughput_ray.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as temporary:
        vectors = build_vectors(args.work or Path(temporary))
        served = load_served_model("embedded", sorted(vectors.items()))
        rows = in_process_rows(served, args.requests)
        before = in_process(served, rows, args.clients)
        load.append(os.getloadavg()[0])
        http = run_server(
            vectors,
            max_batch_size=args.clients,
            requests=args.requests,
            clients=args.clients,
            threads=1,
            timeout_s=args.run_timeout_s,
            client="raw",
        )
        load.append(os.getloadavg()[0])
        ray = run_ray_server(
            vectors, requests=args.requests, clients=args.clients, timeout_s=args.run_timeout_s
        )
        load.append(os.getloadavg()[0])
        after = in_process(served, rows, args.clients)
        load.append(os.getloadavg()[0])
    ceiling = (before["rows_per_s"] + after["rows_per_s"]) / 2
    result = {
        "http_one_process": http,
        "ray_serve_2_replicas": ray,
        "in_process_before": before,
        "in_process_after": after,
        "ratio_http_over_in_process": http["requests_per_s"] / ceiling,
        "ratio_ray_over_in_process": ray["requests_per_s"] / ceiling,
        "ratio_ray_over_http": ray["requests_per_s"] / http["requests_per_s"],
        "command": "python " + " ".join(sys.argv),
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "ray": _ray_version(),
            "cpus": os.cpu_count(),
            "torch_threads_per_server_process": 1,
            "load_average_1m_start_after_in_process_after_http_after_ray_end": load,
            "platform": platform.platform(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


def _ray_version() -> str:
    import ray

    return ray.__version__


if __name__ == "__main__":
    main()
