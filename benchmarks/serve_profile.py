"""Where a `dpmtv serve` request's time goes, between the socket and the batched forward pass.

Starts the server as serve_load.py does (embedded model, two ε = 1 vectors, one torch thread),
runs a warm-up, then samples the server with py-spy (``pip install py-spy``; it attaches to the
pid, so it needs ptrace rights: root or ``kernel.yama.ptrace_scope`` 0) while CLIENTS loopback
clients (serve_load's lean raw HTTP/1.1 client) send REQUESTS requests. Samples are of threads
running on a CPU (py-spy's default) and, in a second pass over the same load, of the thread
holding the GIL (``--gil``). Reports, per thread (event loop, prepare pool, generation), its
share of the samples, the share of each stage inside it (JSON and pydantic parsing, base64,
image header and decoding, the hop to the prepare pool, prompt rendering and the processor, the
forward passes, batch admission, the HTTP protocol) and its innermost frames.

    python benchmarks/serve_profile.py [--requests 1000] [--clients 32] [--work DIR]
        [--out benchmarks/results/serve_profile.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_load import _load, build_vectors, serve_command, test_queries, wait_healthy  # noqa: E402

# Stage → the frames (function names, as py-spy prints them) that mark it, first match wins.
STAGES = {
    "json_parse": ("parse_json_body", "loads (json/"),
    "pydantic_validate": ("model_validate",),
    "base64_decode": ("b64decode",),
    "image_header": ("encoded_image",),
    "image_decode": ("decode_image",),
    "prepare_pool_hop": ("RequestPreparer.__call__", "run_in_executor", "ThreadPoolExecutor.submit"),
    "prompt_render": ("render_text", "render_conversation"),
    "processor_tokenise": ("_run_processor", "encode_row", "merge_rows"),
    "forward_generate": ("greedy_new_tokens",),
    "batch_admission": ("_take_batch", "submit (dpmtv"),
    "http_protocol": ("h11_impl", "httptools", "starlette", "fastapi", "uvicorn"),
}


def _stage(stack: str) -> str:
    for stage, marks in STAGES.items():
        if any(mark in stack for mark in marks):
            return stage
    return "other"


def summarise(raw: Path) -> dict:
    """py-spy's raw format: ``thread (tid);frame;frame... count`` per line."""
    threads: dict[str, Counter] = {}
    leaves: dict[str, Counter] = {}
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        thread = stack.split(";", 1)[0]
        name = "event_loop" if "MainThread" in thread or "process " in thread else thread
        for prefix in ("dpmtv-decode", "dpmtv-generate", "dpmtv-prepare"):
            if prefix in thread:
                name = prefix
        threads.setdefault(name, Counter())[_stage(stack)] += int(count)
        leaves.setdefault(name, Counter())[_leaf(stack)] += int(count)
    total = sum(sum(c.values()) for c in threads.values())
    return {
        name: {
            "share_of_all_samples": round(sum(c.values()) / total, 3),
            "stages": {stage: round(n / sum(c.values()), 3) for stage, n in c.most_common()},
            "top_frames": {f: round(n / sum(c.values()), 3) for f, n in leaves[name].most_common(12)},
        }
        for name, c in sorted(threads.items(), key=lambda item: -sum(item[1].values()))
    }


def _leaf(stack: str) -> str:
    """The innermost frame, and the innermost dpmtv frame above it (where the time is spent for)."""
    frames = stack.split(";")[1:]
    ours = next((f for f in reversed(frames) if "dpmtv" in f), "")
    return f"{frames[-1] if frames else '?'} <- {ours}"


def profiled_load(url: str, pid: int, queries, requests: int, clients: int, raw: Path, gil: bool) -> dict:
    spy = ["py-spy", "record", "--pid", str(pid), "--threads", "--format", "raw", "-o", str(raw)]
    recorder = subprocess.Popen([*spy, *(["--gil"] if gil else [])], stdout=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attached
    try:
        return asyncio.run(_load(url, queries, requests, clients, "raw"))
    finally:
        recorder.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        recorder.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--work", type=Path, help="keep the records and vectors here (reused when present)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/serve_profile.json"))
    args = parser.parse_args()
    load_average = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as temporary:
        vectors = build_vectors(args.work or Path(temporary))
        url, command = serve_command(vectors, max_batch_size=args.clients, clients=args.clients, threads=1)
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_healthy(url, server)
            queries = test_queries()
            asyncio.run(_load(url, queries, 4 * args.clients, args.clients, "raw"))  # warm-up
            passes = {}
            for kind, gil in (("on_cpu", False), ("holding_gil", True)):
                raw = Path(temporary) / f"{kind}.txt"
                load = profiled_load(url, server.pid, queries, args.requests, args.clients, raw, gil)
                passes[kind] = {"load": load, "threads": summarise(raw)}
                load_average.append(os.getloadavg()[0])
        finally:
            server.terminate()
            server.wait(timeout=30)
    result = {
        **passes,
        "profiler": "py-spy 0.4 record --threads --format raw (100 Hz); the second pass with --gil",
        "command": "python " + " ".join(sys.argv),
        "load_average_1m": load_average,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
