"""Memory of `dpmtv serve` under large images (issue 27's case): N requests of four 4096×4096
JPEGs from C concurrent loopback clients against the embedded model, zero-shot.

Reports the server's peak RSS (VmHWM) against its RSS before the load, the 429s (admission by
decoded pixels; a client waits the Retry-After and retries), errors, p50/p99 latency, and the
slowest `/healthz` answer polled every 0.1 s during the load. Writes
benchmarks/results/serve_memory.json with the command line.

    python benchmarks/serve_memory.py --requests 32 --clients 32
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
from PIL import Image

CLI = [sys.executable, "-c", "import sys; from dpmtv.cli import main; sys.exit(main())"]
SIDE = 4096


def jpeg_data_url(seed: int) -> str:
    """A smooth 4096² JPEG (a gradient with a little noise, ~0.3 MB, like a photo)."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 255, SIDE, dtype=np.float32)
    pixels = np.stack(
        [ramp[None, :].repeat(SIDE, 0), ramp[:, None].repeat(SIDE, 1), np.full((SIDE, SIDE), 128.0)], -1
    )
    pixels += rng.normal(0, 2, (SIDE // 8, SIDE // 8, 3)).repeat(8, 0).repeat(8, 1)
    buffer = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buffer, format="JPEG", quality=80)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


def _memory_mib(pid: int, field: str) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+) kB", text).group(1)) / 1024


async def _load(url: str, body: dict, requests: int, clients: int) -> dict:
    latencies, errors, refused = [], [], 0
    counter = iter(range(requests))
    health_ms: list[float] = []
    done = asyncio.Event()

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal refused
        for _ in counter:
            started = time.perf_counter()
            while True:
                response = await http.post(f"{url}/v1/chat/completions", json=body)
                if response.status_code != 429:
                    break
                refused += 1
                await asyncio.sleep(float(response.headers.get("retry-after", "1")))
            latencies.append(time.perf_counter() - started)
            if response.status_code != 200:
                errors.append(f"{response.status_code}: {response.text[:200]}")

    async def health(http: httpx.AsyncClient) -> None:
        while not done.is_set():
            started = time.perf_counter()
            await http.get(f"{url}/healthz")
            health_ms.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.1)

    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=clients + 1)) as http:
        probe = asyncio.ensure_future(health(http))
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        seconds = time.perf_counter() - started
        done.set()
        await probe
    latencies_ms = np.array(latencies) * 1000
    return {
        "requests": requests,
        "clients": clients,
        "seconds": round(seconds, 2),
        "errors": len(errors),
        "first_errors": errors[:3],
        "refused_429_then_retried": refused,
        "latency_p50_ms": round(float(np.percentile(latencies_ms, 50)), 1),
        "latency_p99_ms": round(float(np.percentile(latencies_ms, 99)), 1),
        "healthz_max_ms": round(max(health_ms), 1),
        "healthz_p50_ms": round(float(np.median(health_ms)), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "serve_memory.json")
    args = parser.parse_args()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    content = [{"type": "text", "text": "What is the answer?"}]
    content += [{"type": "image_url", "image_url": {"url": jpeg_data_url(seed)}} for seed in range(4)]
    body = {"model": "embedded", "max_tokens": 4, "messages": [{"role": "user", "content": content}]}
    body_mb = len(json.dumps(body)) / 1e6
    server = subprocess.Popen([*CLI, "serve", "--model", "embedded", "--port", str(port), "--threads", "1",
                               "--log-level", "warning"])  # fmt: skip
    try:
        while True:
            try:
                httpx.get(f"{url}/healthz", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                assert server.poll() is None, "dpmtv serve exited"
                time.sleep(0.5)
        rss_before = _memory_mib(server.pid, "VmRSS")
        result = asyncio.run(_load(url, body, args.requests, args.clients))
        peak = _memory_mib(server.pid, "VmHWM")
    finally:
        server.terminate()
        server.wait(timeout=60)
    result.update(
        {
            "command": " ".join(["python", "benchmarks/serve_memory.py", *sys.argv[1:]]),
            "images_per_request": 4,
            "image_side_px": SIDE,
            "body_mb": round(body_mb, 2),
            "server_rss_before_mib": round(rss_before, 1),
            "server_peak_rss_mib": round(peak, 1),
        }
    )
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
