"""Core benchmarks (issue 2 §9), side by side in one run so ratios are meaningful.

- build throughput (chunks/s) at batch size 1 vs 8;
- peak memory for a build over N = 256 vs N = 4096 records (max RSS of a fresh process, and
  the tracemalloc peak of Python/numpy allocations during the build) — flat if it streams;
- answer latency with the vector applied vs without (ratio).

Runs on the tiny random-weight LLaVA (the pipeline's cost structure, not a real model's speed).
Usage:  .venv/bin/python benchmarks/bench_core.py [--out benchmarks/results/core.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import torch

from dpmtv.data.prompts import Example
from dpmtv.data.records import load_records
from dpmtv.data.synthetic import write_colour_records
from dpmtv.heads import parse_head_spec
from dpmtv.models.loading import load_model
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from dpmtv.testing import build_tiny_checkpoint

SHOTS = 8
NEW_TOKENS = 8


def settings(batch_size: int) -> BuildSettings:
    return BuildSettings(
        epsilon=1.0,
        delta=1e-6,
        l2_clip_norm=(1.0,),
        shots_per_chunk=SHOTS,
        batch_size=batch_size,
        progress=False,
    )


def build_once(model_dir: Path, data: Path, batch_size: int, *, trace: bool = False) -> float:
    loaded = load_model(model_dir)
    if trace:
        tracemalloc.start()  # Python and numpy allocations from here on: records + the build
    records = load_records(data)
    heads = parse_head_spec("all", loaded.adapter.geometry)
    start = time.perf_counter()
    build_task_vector(loaded, records, heads, settings(batch_size))
    return time.perf_counter() - start


def throughput(model_dir: Path, data: Path, num_chunks: int) -> dict:
    seconds = {bs: build_once(model_dir, data, bs) for bs in (1, 8)}
    rates = {bs: num_chunks / s for bs, s in seconds.items()}
    return {
        "chunks": num_chunks,
        "chunks_per_s_batch1": rates[1],
        "chunks_per_s_batch8": rates[8],
        "speedup_batch8_over_batch1": rates[8] / rates[1],
    }


def peak_memory_mib(model_dir: Path, data: Path) -> dict:
    """Peak RSS of a fresh child that loads the model and builds over ``data``, and the peak of
    Python/numpy allocations after the model is loaded (tracemalloc)."""
    code = (
        "import sys, resource, pathlib, tracemalloc; sys.path.insert(0, 'benchmarks'); "
        "from bench_core import build_once; "
        f"build_once(pathlib.Path({str(model_dir)!r}), pathlib.Path({str(data)!r}), 8, trace=True); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, tracemalloc.get_traced_memory()[1])"
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    rss_kib, traced_bytes = done.stdout.strip().splitlines()[-1].split()
    return {"peak_rss_mib": int(rss_kib) / 1024, "peak_traced_mib": int(traced_bytes) / 2**20}


def answer_latency(model_dir: Path, data: Path, vector_path: Path, repeats: int = 7) -> dict:
    """Greedy generation of exactly ``NEW_TOKENS`` tokens for 8 queries, with vs without the vector
    (min_new_tokens pins the length, so both sides do the same work)."""
    from dpmtv.artifact.vector import load_task_vector
    from dpmtv.data.prompts import zero_shot
    from dpmtv.inference import apply

    loaded = load_model(model_dir)
    vector = load_task_vector(vector_path)
    prompts = [zero_shot(Example(r.load_images(), r.question)) for r in load_records(data)[:8]]
    inputs = loaded.adapter.encode(prompts)

    def generate() -> None:
        with torch.no_grad():
            loaded.model.generate(
                **inputs,
                do_sample=False,
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                pad_token_id=loaded.adapter.tokenizer.pad_token_id,
            )

    timings: dict[str, list[float]] = {"without": [], "with": []}
    generate()  # warm-up
    for _ in range(repeats):  # interleaved so machine noise hits both alike
        start = time.perf_counter()
        generate()
        timings["without"].append(time.perf_counter() - start)
        with apply(loaded, vector):
            start = time.perf_counter()
            generate()
            timings["with"].append(time.perf_counter() - start)
    best = {label: min(values) for label, values in timings.items()}
    return {
        "queries": len(prompts),
        "new_tokens": NEW_TOKENS,
        "seconds_without": best["without"],
        "seconds_with": best["with"],
        "ratio_with_over_without": best["with"] / best["without"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/core.json"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model_dir = build_tiny_checkpoint("llava", tmp / "model")
        small = write_colour_records(tmp / "small", 256, seed=0)
        large = write_colour_records(tmp / "large", 4096, seed=1)
        result = {"throughput": throughput(model_dir, small, 256 // SHOTS)}
        memory = {"n256": peak_memory_mib(model_dir, small), "n4096": peak_memory_mib(model_dir, large)}
        for key in ("peak_rss_mib", "peak_traced_mib"):
            memory[f"ratio_{key}_4096_over_256"] = memory["n4096"][key] / memory["n256"][key]
        result["memory"] = memory
        loaded = load_model(model_dir)
        heads = parse_head_spec("all", loaded.adapter.geometry)
        vector_path = tmp / "task.safetensors"
        build_task_vector(loaded, load_records(small), heads, settings(8), out=vector_path)
        result["answer_latency"] = answer_latency(model_dir, small, vector_path)
    result["command"] = "python benchmarks/bench_core.py"
    result["machine"] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": torch.get_num_threads(),
        "platform": platform.platform(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
