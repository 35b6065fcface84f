"""Input pipeline in worker processes: chunk-preparation throughput with 2 prepare workers over 1
(target >= 1.7x), and the share of wall time a forward pass stubbed to GPU-like speed waits for its
inputs with 2 workers (target <= 0.10), side by side in one run, embedded model.

Usage:  python benchmarks/prepare_workers.py [--chunks 24] [--px 384] [--forward-ms 20]
            [--repeats 2] [--out benchmarks/results/prepare_workers.json]

A chunk is 8 records with px × px noisy PNG images (decoding costs what a photo costs); preparing
it is rendering the prompt, decoding the images, the processor and the tokenizer, exactly what
the build's private passes do (dpmtv.forward.extract.prepared_inputs). The stubbed forward pass sleeps
``--forward-ms`` per chunk, leaving the CPUs to the workers as a GPU forward pass would
(``--forward-ms 0``: the real forward pass, e.g. on a GPU with ``--device cuda``). Runs
alternate (1 worker, 2 workers, ...) and the best of ``--repeats`` counts; the load average is
recorded, since other processes share the CPUs.

Within a build the private passes share their prepare workers (``dpmtv.forward._prepare.reusing_workers``):
the figures are for such a pass (one warm-up pass of each kind first, not counted), and
``fresh_workers`` repeats the prepare throughput with workers forked for the pass (a build's first
pass). ``cpu_ms_per_chunk`` is the CPU time of this process and its workers per chunk prepared,
which the machine's load changes far less than wall time. ``--forward-ms-sweep`` adds the wait
share with 2 workers at other stub times (e.g. the stub time at which it falls to 0.10).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def chunk_prompts(folder: Path, chunks: int, px: int):
    from suite import write_photo_records

    from dpmtv.data import load_records
    from dpmtv.pipeline.partition import ChunkPrompts
    from dpmtv.privacy import Partition

    shots = 8
    records = load_records(write_photo_records(folder, shots * chunks, px=px))
    partition = Partition(
        chunks=tuple(np.arange(c * shots, (c + 1) * shots) for c in range(chunks)), num_unused=0
    )
    return ChunkPrompts(records, partition, shots_per_chunk=shots, query="record", query_question="")


def reusing_workers():
    """The build's block of passes sharing prepare workers (nothing, in versions without it)."""
    import contextlib

    from dpmtv.forward import _prepare

    return getattr(_prepare, "reusing_workers", contextlib.nullcontext)()


def cpu_seconds() -> float:
    """CPU seconds of this process, its reaped children and its live ones (prepare workers)."""
    import multiprocessing
    import resource

    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    for child in multiprocessing.active_children():
        try:
            fields = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def prepare_rate(adapter, prompts, workers: int) -> dict:
    """Chunks prepared per second (nothing else runs), and CPU ms per chunk."""
    from dpmtv.forward.extract import prepared_inputs

    cpu, started = cpu_seconds(), time.perf_counter()
    for _ in prepared_inputs(adapter, prompts, max_prompt_tokens=4096, workers=workers):
        pass
    wall = time.perf_counter() - started
    cpu_ms = 1e3 * (cpu_seconds() - cpu) / len(prompts)
    return {"chunks_per_s": len(prompts) / wall, "cpu_ms_per_chunk": cpu_ms}


def wait_share(adapter, prompts, workers: int, forward_s: float) -> dict:
    """The forward pass's waiting share of wall time (``forward_s`` 0: the real forward pass)."""
    from dpmtv.forward._prefetch import PipelineTimings
    from dpmtv.forward.extract import prepared_inputs, selected_heads_of, to_device
    from dpmtv.heads import parse_head_spec

    heads = parse_head_spec("all", adapter.geometry)
    timings = PipelineTimings()
    started = time.perf_counter()
    for inputs in prepared_inputs(adapter, prompts, max_prompt_tokens=4096, workers=workers, timings=timings):
        on_device = to_device(inputs, adapter.input_device)
        if forward_s > 0:
            time.sleep(forward_s)  # a GPU forward pass: the CPUs stay free for the workers
        else:
            selected_heads_of(adapter, on_device, heads)
    wall = time.perf_counter() - started
    return {"forward_waits_fraction": timings.wait_s / wall, "chunks_per_s": len(prompts) / wall}


def measure(adapter, prompts, options) -> dict:
    """All runs, alternating: prepare rates (in a block, and with fresh workers), wait shares."""
    rates: dict[int, list[dict]] = {1: [], 2: []}
    fresh: dict[int, list[dict]] = {1: [], 2: []}
    shares: dict[int, list[dict]] = {0: [], 2: []}
    sweep: dict[float, list[dict]] = {ms: [] for ms in options.forward_ms_sweep}
    forward_s = options.forward_ms / 1e3
    for _ in range(options.repeats):
        for workers in fresh:
            fresh[workers].append(prepare_rate(adapter, prompts, workers))
    with reusing_workers():
        for workers in rates:  # warm-up: the block's workers are forked here
            prepare_rate(adapter, prompts, workers)
        for _ in range(options.repeats):
            for workers in rates:
                rates[workers].append(prepare_rate(adapter, prompts, workers))
            for workers in shares:
                shares[workers].append(wait_share(adapter, prompts, workers, forward_s))
            for ms in sweep:
                sweep[ms].append(wait_share(adapter, prompts, 2, ms / 1e3))
    return {"prepare": rates, "prepare_fresh_workers": fresh, "wait_share": shares, "wait_share_sweep": sweep}


def milliseconds(text: str) -> list[float]:
    return [float(value) for value in text.split(",") if value]


def summary(runs: dict, forward_ms: float) -> dict:
    """The best run of each kind (prepare: the fastest; wait share: the smallest)."""

    def rates(kind: str) -> dict:
        best = {w: max(r["chunks_per_s"] for r in runs[kind][w]) for w in (1, 2)}
        return {"prepare_chunks_per_s": {f"workers_{w}": rate for w, rate in best.items()},
                "speedup_prepare_2_workers_over_1": best[2] / best[1]}  # fmt: skip

    def best_share(share_runs: list[dict]) -> dict:
        return min(share_runs, key=lambda r: r["forward_waits_fraction"])

    cpu = {f"workers_{w}": min(r["cpu_ms_per_chunk"] for r in runs["prepare"][w]) for w in (1, 2)}
    sweep = {str(ms): best_share(share_runs) for ms, share_runs in runs["wait_share_sweep"].items()}
    return {
        **rates("prepare"),
        "cpu_ms_per_chunk": cpu,
        "fresh_workers": rates("prepare_fresh_workers"),
        "stubbed_forward_ms": forward_ms,
        "workers_2": best_share(runs["wait_share"][2]),
        "background_thread": best_share(runs["wait_share"][0]),
        "workers_2_by_stubbed_forward_ms": sweep,
        "all_runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=24)
    parser.add_argument("--px", type=int, default=384)
    parser.add_argument("--forward-ms", type=float, default=20.0)
    parser.add_argument("--forward-ms-sweep", type=milliseconds, default=[], help="e.g. 30,40,60")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="benchmarks/results/prepare_workers.json")
    options = parser.parse_args()
    from dpmtv.models.loading import load_model

    loaded = load_model("embedded", device=options.device)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        runs = measure(loaded.adapter, chunk_prompts(Path(tmp), options.chunks, options.px), options)

    result = summary(runs, options.forward_ms)
    document = {
        "command": " ".join(["python", "benchmarks/prepare_workers.py", *sys.argv[1:]]),
        "model": "embedded", "chunks": options.chunks, "shots": 8, "image_px": options.px,
        "device": options.device, "cpus": os.cpu_count(),
        "load_average_before_after": [load_before, os.getloadavg()],
        "result": result,
    }  # fmt: skip
    Path(options.out).write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "all_runs"}, indent=2))


if __name__ == "__main__":
    main()
