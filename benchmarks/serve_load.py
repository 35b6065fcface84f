"""Load test of `dpmtv serve` on the embedded model with two task vectors (loopback only).

1. Writes two private record sets of the embedded suite (name_colour, name_shape) as JSONL + PNG
   and builds one vector from each with the `dpmtv build` command (ε = 1, each task's public heads).
2. Starts `dpmtv serve --model embedded --vector colour=... --vector shape=...` on a free
   127.0.0.1 port as a child process, once with dynamic batching (--max-batch-size 32) and once
   without (--max-batch-size 1).
3. Per run: a warm-up, the server's RSS, then REQUESTS requests (alternating the two vectors,
   held-out test images) from CLIENTS concurrent clients, then the RSS again. Reports throughput,
   p50/p99 latency, errors (must be 0), answer accuracy against the images' true labels, and the
   batch sizes the server saw (its /metrics).

Bounded: each request times out after 120 s, each run after --run-timeout-s, and the server is
stopped at the end in every case. Usage (from the repository root):

    python benchmarks/serve_load.py [--requests 2000] [--clients 32]
        [--out benchmarks/results/serve_load.json]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import torch

from dpmtv.embedded.generator import get_task
from dpmtv.embedded.suite import task_records
from dpmtv.models.loading import load_model

TASKS = {"colour": "name_colour", "shape": "name_shape"}
CLI = [sys.executable, "-c", "import sys; from dpmtv.cli import main; sys.exit(main())"]
MAX_TOKENS = 4


def build_vectors(work: Path) -> dict[str, Path]:
    if all((work / f"{name}.safetensors").is_file() for name in TASKS):
        return {name: work / f"{name}.safetensors" for name in TASKS}
    defaults = load_model("embedded").defaults["per_task"]
    paths = {}
    for name, task in TASKS.items():
        data = _write_records(work / name, task)
        heads = work / f"{name}-heads.json"
        heads.write_text(json.dumps(defaults[task]["heads"]))
        out = work / f"{name}.safetensors"
        clip = ",".join(str(c) for c in defaults[task]["l2_clip_norm"])
        subprocess.run(
            [
                *CLI,
                "build",
                "--model",
                "embedded",
                "--data",
                str(data),
                "--heads",
                str(heads),
                "--epsilon",
                "1",
                "--delta",
                "1e-5",
                "--l2-clip-norm",
                clip,
                "--shots-per-chunk",
                "8",
                "--out",
                str(out),
                "--quiet",
            ],
            check=True,
            timeout=900,
            stdout=subprocess.DEVNULL,
        )
        paths[name] = out
    return paths


def _write_records(folder: Path, task: str, n: int = 512) -> Path:
    (folder / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for index, record in enumerate(task_records(get_task(task), n, seed=0, split="private")):
        record.images[0].save(folder / "img" / f"{index}.png")
        rows.append(
            {
                "id": record.record_id,
                "image": f"img/{index}.png",
                "question": record.question,
                "answer": record.answer,
            }
        )
    path = folder / "records.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_queries(per_task: int = 100) -> list[tuple[str, str, str]]:
    """(vector name, image data URL, true answer), alternating the two vectors."""
    columns = []
    for name, task in TASKS.items():
        column = []
        for record in task_records(get_task(task), per_task, seed=1, split="test"):
            buffer = io.BytesIO()
            record.images[0].save(buffer, format="PNG")
            column.append(
                (name, "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode(), record.answer)
            )
        columns.append(column)
    return [query for pair in zip(*columns) for query in pair]


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all threads (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1)) / 1024


def process_tree(pid: int) -> list[int]:
    """``pid`` and its children (a server with --workers: the parent and its worker processes)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(stat.parent.name))
        except (OSError, ValueError):
            continue  # a process that ended while listed
    return [pid, *children]


def tree_cpu_s(pid: int) -> float:
    return sum(cpu_s(each) for each in process_tree(pid))


def tree_rss_mib(pid: int) -> float:
    return sum(rss_mib(each) for each in process_tree(pid))


def wait_workers(url: str, workers: int, timeout_s: float = 300) -> None:
    """Until ``workers`` distinct worker processes have answered (each loads its model first)."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while len(seen) < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(seen)} of {workers} workers answered within {timeout_s:g} s")
        response = httpx.get(f"{url}/healthz", headers={"Connection": "close"})
        seen.add(response.headers.get("x-dpmtv-worker", ""))
        time.sleep(0.02)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def request_body(name: str, image: str) -> dict:
    """One chat completion: a vector, a short question and one image (the same rows in every run)."""
    return {
        "model": name,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "?"},
                    {"type": "image_url", "image_url": {"url": image}},
                ],
            }
        ],
    }


class _Tally:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.correct = 0

    def answer(self, started: float, status: int, text: str, answer: str) -> None:
        self.latencies.append(time.perf_counter() - started)
        if status != 200:
            self.errors.append(f"{status}: {text[:200]}")
        elif json.loads(text)["choices"][0]["message"]["content"] == answer:
            self.correct += 1


async def _httpx_clients(url: str, queries, counter, clients: int, tally: _Tally) -> None:
    async def client(http: httpx.AsyncClient) -> None:
        for index in counter:
            name, image, answer = queries[index % len(queries)]
            started = time.perf_counter()
            try:
                response = await http.post(f"{url}/v1/chat/completions", json=request_body(name, image))
            except httpx.HTTPError as exc:
                tally.errors.append(f"{type(exc).__name__}: {exc}")
                continue
            tally.answer(started, response.status_code, response.text, answer)

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))


async def _raw_clients(url: str, queries, counter, clients: int, tally: _Tally) -> None:
    """A lean HTTP/1.1 keep-alive client (pre-serialised requests, Content-Length answers), so
    that the load generator costs the shared CPUs little next to the server (httpx spent ~3 ms
    of CPU per request here, more than the server's batched generation of a row)."""
    host, port = url.removeprefix("http://").split(":")
    requests = []
    for name, image, answer in queries:
        body = json.dumps(request_body(name, image)).encode()
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        requests.append((head.encode() + body, answer))

    async def client() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for index in counter:
                payload, answer = requests[index % len(requests)]
                started = time.perf_counter()
                try:
                    writer.write(payload)
                    status, text = await asyncio.wait_for(_raw_response(reader), 120)
                except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
                    tally.errors.append(f"{type(exc).__name__}: {exc}")
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, int(port))
                    continue
                tally.answer(started, status, text, answer)
        finally:
            writer.close()

    await asyncio.gather(*(client() for _ in range(clients)))


async def _raw_response(reader: asyncio.StreamReader) -> tuple[int, str]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = next(int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:"))
    return status, (await reader.readexactly(length)).decode()


CLIENTS = {"httpx": _httpx_clients, "raw": _raw_clients}


async def _load(url: str, queries, requests: int, clients: int, client: str = "httpx") -> dict:
    tally = _Tally()
    started = time.perf_counter()
    await CLIENTS[client](url, queries, iter(range(requests)), clients, tally)
    seconds = time.perf_counter() - started
    latencies_ms = np.array(tally.latencies) * 1000
    return {
        "requests": requests,
        "clients": clients,
        "client": client,
        "seconds": seconds,
        "requests_per_s": requests / seconds,
        "latency_p50_ms": float(np.percentile(latencies_ms, 50)),
        "latency_p99_ms": float(np.percentile(latencies_ms, 99)),
        "errors": len(tally.errors),
        "first_errors": tally.errors[:5],
        "accuracy": tally.correct / requests,
    }


def serve_command(
    vectors: dict[str, Path], *, max_batch_size: int, clients: int, threads: int, workers: int = 1
):
    """(base URL, `dpmtv serve` command line) on a free loopback port."""
    port = _free_port()
    command = [
        *CLI,
        "serve",
        "--model",
        "embedded",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-batch-size",
        str(max_batch_size),
        "--max-queue",
        str(4 * clients),
        "--log-level",
        "warning",
        "--threads",
        str(threads),
        *(("--workers", str(workers)) if workers > 1 else ()),
        *(arg for name, path in vectors.items() for arg in ("--vector", f"{name}={path}")),
    ]
    return f"http://127.0.0.1:{port}", command


def run_server(
    vectors: dict[str, Path],
    *,
    max_batch_size: int,
    requests: int,
    clients: int,
    threads: int,
    timeout_s: float,
    client: str = "httpx",
    workers: int = 1,
) -> dict:
    url, command = serve_command(
        vectors, max_batch_size=max_batch_size, clients=clients, threads=threads, workers=workers
    )
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_healthy(url, server)
        if workers > 1:
            wait_workers(url, workers)
        queries = test_queries()
        warm_up = _load(url, queries, 4 * clients, clients, client)
        asyncio.run(asyncio.wait_for(warm_up, timeout_s))
        rss_before, cpu_before = tree_rss_mib(server.pid), tree_cpu_s(server.pid)
        result = asyncio.run(asyncio.wait_for(_load(url, queries, requests, clients, client), timeout_s))
        rss_after, cpu_seconds = tree_rss_mib(server.pid), tree_cpu_s(server.pid) - cpu_before
        metrics = httpx.get(f"{url}/metrics").text
        total, count = (
            float(re.search(rf"dpmtv_batch_size_{k} (\S+)", metrics).group(1)) for k in ("sum", "count")
        )
        result.update(
            {
                "max_batch_size": max_batch_size,
                "server_rss_mib_before": rss_before,
                "server_rss_mib_after": rss_after,
                "server_rss_growth": rss_after / rss_before - 1,
                # CPU the server spent per request: steadier than requests/s on a shared machine
                "server_cpu_ms_per_request": 1000 * cpu_seconds / requests,
                "mean_batch_size_incl_warmup": total / count,  # of the worker that answered /metrics
                "workers": workers,
                "server_command": " ".join(command[3:]),
            }
        )
        return result
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def wait_healthy(url: str, server: subprocess.Popen, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"server exited: {server.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server did not become healthy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--run-timeout-s", type=float, default=1200)
    parser.add_argument("--threads", type=int, default=1, help="the server's torch threads")
    parser.add_argument(
        "--client", choices=sorted(CLIENTS), default="httpx", help="the load generator (raw: lean HTTP/1.1)"
    )
    parser.add_argument("--work", type=Path, help="keep the records and vectors here (reused when present)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/serve_load.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as temporary:
        vectors = build_vectors(args.work or Path(temporary))
        runs = {
            "batching_on": run_server(
                vectors,
                max_batch_size=args.clients,
                requests=args.requests,
                clients=args.clients,
                threads=args.threads,
                timeout_s=args.run_timeout_s,
                client=args.client,
            ),
            "batching_off": run_server(
                vectors,
                max_batch_size=1,
                requests=args.requests,
                clients=args.clients,
                threads=args.threads,
                timeout_s=args.run_timeout_s,
                client=args.client,
            ),
        }
    result = {
        **runs,
        "throughput_ratio_on_over_off": runs["batching_on"]["requests_per_s"]
        / runs["batching_off"]["requests_per_s"],
        "errors_total": sum(run["errors"] for run in runs.values()),
        "max_server_rss_growth": max(run["server_rss_growth"] for run in runs.values()),
        "command": "python " + " ".join(sys.argv),
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpus": os.cpu_count(),
            "server_torch_threads": args.threads,
            "load_average_1m_before_after": [load_before[0], os.getloadavg()[0]],
            "platform": platform.platform(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
