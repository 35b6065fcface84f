"""Does batched generation overlap the server's other Python work, or share one interpreter lock?

The server's HTTP / in-process ratio (serve_throughput.py) assumes the generation thread can run
on one core while the event loop and the prepare pool use the other. On the embedded model a
batch is many small torch calls with Python between them, so this measures, in one process with
one torch thread, the rows the server would queue (prepared as ``serve_throughput.py`` does):

1. generation alone (batches of ``--batch-size``, ``generate_rows``) for ``--seconds``;
2. request preparation alone (``RequestPreparer.prepare``: JSON, schema, base64, PNG decode —
   the Python work a request costs off the generation thread) for ``--seconds``;
3. both at once, on two threads, for ``--seconds``.

``overlap`` = rows/s together over alone + prepares/s together over alone: 2.0 means the two ran
in parallel (two cores), 1.0 means they took turns (one interpreter lock, one core's worth).

``--switch-interval-ms`` sets ``sys.setswitchinterval`` first (CPython's default: 5 ms), the
longest a thread holding the lock runs before one waiting for it gets it.

    python benchmarks/serve_gil.py [--seconds 5] [--switch-interval-ms 5] [--work DIR]
        [--out benchmarks/results/serve_gil.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_load import build_vectors, request_body, test_queries  # noqa: E402
from serve_throughput import in_process_rows  # noqa: E402

from dpmtv.serve import ServeSettings, load_served_model  # noqa: E402
from dpmtv.serve._admission import PixelBudget  # noqa: E402
from dpmtv.serve._generation import generate_rows  # noqa: E402
from dpmtv.serve._prepare import RequestPreparer  # noqa: E402


def _generate_for(served, rows: list, batch_size: int, seconds: float, stop: threading.Event) -> float:
    """Rows per second of batched generation until ``seconds`` pass (or ``stop`` is set)."""
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds and not stop.is_set():
        first = (done // batch_size * batch_size) % (len(rows) - batch_size)
        generate_rows(served, rows[first : first + batch_size])
        done += batch_size
    return done / (time.perf_counter() - start)


def _prepare_for(
    preparer: RequestPreparer, bodies: list[bytes], seconds: float, stop: threading.Event
) -> float:
    """Requests per second prepared until ``seconds`` pass (or ``stop`` is set)."""
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds and not stop.is_set():
        prepared = preparer.prepare(bodies[done % len(bodies)])
        preparer.pixels.release(prepared.pixels_held)
        done += 1
    return done / (time.perf_counter() - start)


def measure(served, seconds: float, batch_size: int) -> dict:
    rows = in_process_rows(served, 512)
    preparer = RequestPreparer(
        served, ServeSettings(), PixelBudget(ServeSettings().max_pixels_in_flight), lambda: 1.0
    )
    bodies = [json.dumps(request_body(name, image)).encode() for name, image, _ in test_queries()]
    never = threading.Event()
    _generate_for(served, rows, batch_size, 1.0, never)  # warm-up
    generation_alone = _generate_for(served, rows, batch_size, seconds, never)
    prepare_alone = _prepare_for(preparer, bodies, seconds, never)
    together: dict[str, float] = {}
    stop = threading.Event()
    other = threading.Thread(
        target=lambda: together.update(prepare=_prepare_for(preparer, bodies, 1e9, stop))
    )
    other.start()
    together["generate"] = _generate_for(served, rows, batch_size, seconds, never)
    stop.set()
    other.join()
    preparer.close()
    return {
        "batch_size": batch_size,
        "seconds_each": seconds,
        "generation_rows_per_s_alone": generation_alone,
        "prepare_requests_per_s_alone": prepare_alone,
        "generation_rows_per_s_together": together["generate"],
        "prepare_requests_per_s_together": together["prepare"],
        "overlap": together["generate"] / generation_alone + together["prepare"] / prepare_alone,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--switch-interval-ms", type=float, help="sys.setswitchinterval (default: CPython's)")
    parser.add_argument("--work", type=Path, help="keep the records and vectors here (reused when present)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/serve_gil.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the server runs (--threads 1)
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1000)
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as temporary:
        vectors = build_vectors(args.work or Path(temporary))
        served = load_served_model("embedded", sorted(vectors.items()))
        result = measure(served, args.seconds, args.batch_size)
    load.append(os.getloadavg()[0])
    result |= {
        "switch_interval_ms": 1000 * sys.getswitchinterval(),
        "command": "python " + " ".join(sys.argv),
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpus": os.cpu_count(),
            "torch_threads": 1,
            "load_average_1m_at_start_end": load,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
