"""Input pipeline in worker processes: chunk-preparation throughput with 2 prepare workers over 1
(target >= 1.7x), and the share of wall time a forward pass stubbed to GPU-like speed waits for its
inputs with 2 workers (target <= 0.10), side by side in one run, embedded model.

Usage:  python benchmarks/prepare_workers.py [--chunks 24] [--px 384] [--forward-ms 20]
            [--repeats 2] [--out benchmarks/results/prepare_workers.json]

A chunk is 8 records with px × px noisy PNG images (decoding costs what a photo costs); preparing
it is rendering the prompt, decoding the images, the processor and the tokenizer, exactly what
the build's private passes do (dpmtv.extract.prepared_inputs). The stubbed forward pass sleeps
``--forward-ms`` per chunk, leaving the CPUs to the workers as a GPU forward pass would
(``--forward-ms 0``: the real forward pass, e.g. on a GPU with ``--device cuda``). Runs
alternate (1 worker, 2 workers, ...) and the best of ``--repeats`` counts; the load average is
recorded, since other processes share the CPUs.
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


def prepare_rate(adapter, prompts, workers: int) -> float:
    """Chunks prepared per second (nothing else runs)."""
    from dpmtv.extract import prepared_inputs

    started = time.perf_counter()
    for _ in prepared_inputs(adapter, prompts, max_prompt_tokens=4096, workers=workers):
        pass
    return len(prompts) / (time.perf_counter() - started)


def wait_share(adapter, prompts, workers: int, forward_s: float) -> dict:
    """The forward pass's waiting share of wall time (``forward_s`` 0: the real forward pass)."""
    from dpmtv._prefetch import PipelineTimings
    from dpmtv.extract import prepared_inputs, selected_heads_of, to_device
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=24)
    parser.add_argument("--px", type=int, default=384)
    parser.add_argument("--forward-ms", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="benchmarks/results/prepare_workers.json")
    options = parser.parse_args()
    from dpmtv.models.loading import load_model

    loaded = load_model("embedded", device=options.device)
    load_before = os.getloadavg()
    rates: dict[int, list[float]] = {1: [], 2: []}
    shares: dict[int, list[dict]] = {0: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        prompts = chunk_prompts(Path(tmp), options.chunks, options.px)
        for _ in range(options.repeats):
            for workers in rates:
                rates[workers].append(prepare_rate(loaded.adapter, prompts, workers))
            for workers in shares:
                shares[workers].append(wait_share(loaded.adapter, prompts, workers, options.forward_ms / 1e3))
    best = {w: min(runs, key=lambda r: r["forward_waits_fraction"]) for w, runs in shares.items()}
    result = {
        "prepare_chunks_per_s": {f"workers_{w}": max(r) for w, r in rates.items()},
        "speedup_prepare_2_workers_over_1": max(rates[2]) / max(rates[1]),
        "stubbed_forward_ms": options.forward_ms,
        "workers_2": best[2],
        "background_thread": best[0],
        "all_runs": {"prepare_chunks_per_s": rates, "wait_share": shares},
    }
    document = {
        "command": " ".join(["python", "benchmarks/prepare_workers.py", *sys.argv[1:]]),
        "model": "embedded", "chunks": options.chunks, "shots": 8, "image_px": options.px,
        "device": options.device, "cpus": os.cpu_count(),
        "load_average_before_after": [load_before, os.getloadavg()],
        "result": result,
    }  # fmt: skip
    Path(options.out).write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
