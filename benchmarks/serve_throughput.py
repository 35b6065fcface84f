"""How close the HTTP path comes to in-process batched generation of the same rows (issue 25).

One run, side by side, on the embedded model serving two ε = 1 vectors (name_colour, name_shape,
built as in serve_load.py), one torch thread on both sides:

1. **In process**: the same request bodies the HTTP clients send are prepared here as the
   server prepares them (``RequestPreparer.prepare``: parsed, checked, decoded and encoded;
   untimed), then generated in batches of ``--max-batch-size`` (default ``--clients``) rows by
   the batcher's own batched call (``generate_rows``, mixed vectors in one batch): rows/s of
   generation alone, the ceiling the server works towards.
2. **HTTP**: ``dpmtv serve`` as a child process, ``--clients`` loopback clients sending
   ``--requests`` requests (serve_load.run_server: warm-up first, 0 errors expected), by default
   from the lean raw HTTP/1.1 client, which leaves the CPUs to the server (``--client httpx``:
   httpx, ~3 ms of client CPU per request on this machine).
3. In process again (the machine is shared: the ratio uses the mean of both in-process runs, and
   both are reported with the load average).

    python benchmarks/serve_throughput.py [--requests 2000] [--clients 32] [--workers N]
        [--max-batch-size B] [--work DIR] [--out benchmarks/results/serve_throughput.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_load import build_vectors, request_body, run_server, test_queries  # noqa: E402

from dpmtv.serve import ServeSettings, load_served_model  # noqa: E402
from dpmtv.serve._admission import PixelBudget  # noqa: E402
from dpmtv.serve._generation import generate_rows  # noqa: E402


def in_process_rows(served, requests: int) -> list:
    """The rows the server would queue for the benchmark's first ``requests`` request bodies."""
    try:
        from dpmtv.serve._prepare import RequestPreparer
    except ImportError:  # the code before the prepare pool (to measure it with the same command)
        return _rows_before_the_prepare_pool(served, requests)
    settings = ServeSettings()
    pixels = PixelBudget(settings.max_pixels_in_flight)
    preparer = RequestPreparer(served, settings, pixels, lambda: 1.0)
    queries = test_queries()
    rows = []
    for index in range(requests):
        name, image, _ = queries[index % len(queries)]
        prepared = preparer.prepare(json.dumps(request_body(name, image)).encode())
        pixels.release(prepared.pixels_held)
        # one row per choice since /v1 honours n (older code: one row per request)
        rows.extend(prepared.rows) if hasattr(prepared, "rows") else rows.append(prepared.row)
    preparer.close()
    return rows


def _rows_before_the_prepare_pool(served, requests: int) -> list:
    import threading

    from dpmtv.serve._requests import parse_chat_request, plan_row, row_request

    queries, rows = test_queries(), []
    for index in range(requests):
        name, image, _ = queries[index % len(queries)]
        chat = parse_chat_request(json.dumps(request_body(name, image)).encode())
        planned = plan_row(chat, served, ServeSettings())
        rows.append(row_request(planned, min_side=served.image_min_side, cancelled=threading.Event()))
    return rows


def in_process(served, rows: list, batch_size: int) -> dict:
    generate_rows(served, rows[:batch_size])  # warm-up
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(rows), batch_size):
        generate_rows(served, rows[start : start + batch_size])
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    return {
        "rows": len(rows),
        "batch_size": batch_size,
        "seconds": seconds,
        "rows_per_s": len(rows) / seconds,
        "cpu_ms_per_row": 1000 * cpu_seconds / len(rows),
    }


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--run-timeout-s", type=float, default=1200)
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw", help="the load generator")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="dpmtv serve --workers: server processes; each gets --max-batch-size clients/workers "
        "(a worker sees about that many clients: a larger batch would wait its window out)",
    )
    parser.add_argument(
        "--max-batch-size",
        type=int,
        help="the server's --max-batch-size (default: clients/workers) and the in-process batch "
        "(default: --clients)",
    )
    parser.add_argument("--work", type=Path, help="keep the records and vectors here (reused when present)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/serve_throughput.json"))
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    torch.set_num_threads(1)  # as the server runs (--threads 1)
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as temporary:
        vectors = build_vectors(args.work or Path(temporary))
        served = load_served_model("embedded", sorted(vectors.items()))
        rows = in_process_rows(served, args.requests)
        batch_size = args.max_batch_size or args.clients
        before = in_process(served, rows, batch_size)
        load.append(os.getloadavg()[0])
        http = run_server(
            vectors,
            max_batch_size=args.max_batch_size or max(1, args.clients // args.workers),
            workers=args.workers,
            requests=args.requests,
            clients=args.clients,
            threads=1,
            timeout_s=args.run_timeout_s,
            client=args.client,
        )
        load.append(os.getloadavg()[0])
        after = in_process(served, rows, batch_size)
        load.append(os.getloadavg()[0])
    ceiling = (before["rows_per_s"] + after["rows_per_s"]) / 2
    result = {
        "http": http,
        "in_process_before": before,
        "in_process_after": after,
        "ratio_http_over_in_process": http["requests_per_s"] / ceiling,
        # the ceiling is generation on one thread, one core; a server with --workers N uses up to N
        "ceiling_cores": 1,
        "server_workers": args.workers,
        "target": ">= 0.8",
        # The same ratio in CPU: the share of the server's CPU per request that is the batched
        # generation itself (wall-clock requests/s swing with what else the machine runs).
        "cpu_ratio_in_process_over_http": (before["cpu_ms_per_row"] + after["cpu_ms_per_row"])
        / 2
        / http["server_cpu_ms_per_request"],
        "command": "python " + " ".join(sys.argv),
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpus": os.cpu_count(),
            "torch_threads": 1,
            "load_average_1m_at_start_between_end": load,
            "platform": platform.platform(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
