"""Private pass throughput: fixed public shapes vs one chunk per pass, side by side in one run
(issue 25 item 2; docs/design.md §10).

Both variants run the build's own extraction, ``dpmtv.pipeline.tasks.iter_clipped_chunks``
(rendering, encoding in one background thread, the private forward passes, centring, clipping),
on the same chunks, with ``--private-batch-size 1`` and ``--private-batch-size R`` at the same
public budget: the longest chunk prompt plus a few tokens (reported). Models:

- ``embedded``: the packaged model, N = chunks x shots records of one task;
- ``smolvlm-256m``: SmolVLM-256M-Instruct's geometry (random weights, built in code by
  ``benchmarks/realsize_models.py``), images of ``--smolvlm-px`` px (stated in the result;
  512 is the published tile).

The variants alternate (ABAB...) ``--repeats`` times after one warm-up each; chunks/s is the
median, and the ratio is fixed shapes over one chunk per pass, in wall time and in the process's
CPU time (all its threads: on a shared machine the CPU-time ratio is the steadier one). Also
recorded: how far the two variants' clipped rows are apart (float rounding: they differ only by
padding and batch shape).
Usage:
    python benchmarks/private_batches.py [--out benchmarks/results/private_batches.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))

from dpmtv.data.prompts import chunk_prompt  # noqa: E402
from dpmtv.forward.prompt_budget import prompt_length  # noqa: E402
from dpmtv.heads import parse_head_spec  # noqa: E402
from dpmtv.models.loading import load_model  # noqa: E402
from dpmtv.pipeline.build import BuildSettings  # noqa: E402
from dpmtv.pipeline.private_batching import resolve_private_batch_size  # noqa: E402
from dpmtv.pipeline.tasks import iter_clipped_chunks  # noqa: E402
from dpmtv.privacy import Partition, parse_l2_clip_norms  # noqa: E402


def _records(model: str, count: int, folder: Path, px: int):
    if model == "embedded":
        from dpmtv.embedded.generator import task_suite
        from dpmtv.embedded.suite import task_records

        return task_records(task_suite()[0], count, seed=0, split="private")
    from suite import write_photo_records

    from dpmtv.data import load_records

    return load_records(write_photo_records(folder, count, px=px))


def _load(model: str, folder: Path, px: int, dtype: str, device: str):
    if model == "embedded":
        return load_model("embedded", dtype=dtype, device=device)
    from realsize_models import BUILDERS

    return load_model(BUILDERS[model](folder / model, image_px=px), dtype=dtype, device=device)


def _run(loaded, records, partition, settings) -> tuple[tuple[float, float], list[np.ndarray]]:
    heads = parse_head_spec("all", loaded.adapter.geometry)
    width = len(heads.heads_in(heads.layers[0])) * loaded.adapter.geometry.head_dim
    reference = {layer: np.zeros(width) for layer in heads.layers}
    clip = parse_l2_clip_norms([1e6], heads.layers)
    start, cpu = time.perf_counter(), time.process_time()
    rows = [
        np.concatenate([c[layer] for layer in heads.layers], axis=1)
        for c in iter_clipped_chunks(loaded, records, partition, heads, settings, reference, clip)
    ]
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - start, time.process_time() - cpu), rows


def measure(model: str, args, folder: Path) -> dict:
    chunks, shots = (
        (args.chunks, args.shots) if model == "embedded" else (args.smolvlm_chunks, args.smolvlm_shots)
    )
    loaded = _load(model, folder, args.smolvlm_px, args.dtype, args.device)
    records = _records(model, chunks * shots, folder / "data", args.smolvlm_px)
    partition = Partition(
        chunks=tuple(np.arange(c * shots, (c + 1) * shots, dtype=np.int64) for c in range(chunks)),
        num_unused=0,
    )
    lengths = [
        prompt_length(
            loaded.adapter,
            chunk_prompt(records[c * shots : (c + 1) * shots], query="record", query_question=""),
        )
        for c in range(chunks)
    ]
    budget = max(lengths) + args.budget_margin

    def settings(rows: int) -> BuildSettings:
        return BuildSettings(
            epsilon=1.0, delta=1e-6, l2_clip_norm=(1e6,), shots_per_chunk=shots, progress=False,
            max_prompt_tokens=budget, private_batch_size=rows, prepare_workers=0,
        )  # fmt: skip

    variants = {"one-chunk-per-pass": settings(1), f"fixed-shape-{args.rows}x{budget}": settings(args.rows)}
    assert resolve_private_batch_size(loaded.adapter, settings(args.rows)) == args.rows
    seconds: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}  # (wall, cpu)
    outputs = {name: _run(loaded, records, partition, s)[1] for name, s in variants.items()}  # warm-up
    for _ in range(args.repeats if model == "embedded" else args.smolvlm_repeats):
        for name, s in variants.items():
            seconds[name].append(_run(loaded, records, partition, s)[0])
        print(model, {name: v[-1] for name, v in seconds.items()}, flush=True)
    one, fixed = (np.concatenate(rows) for rows in outputs.values())
    results = {
        name: {
            "chunks_per_s_median": chunks / statistics.median(wall for wall, _ in v),
            "chunks_per_cpu_s_median": chunks / statistics.median(cpu for _, cpu in v),
            "wall_seconds": [round(wall, 3) for wall, _ in v],
            "cpu_seconds": [round(cpu, 3) for _, cpu in v],
        }
        for name, v in seconds.items()
    }
    names = list(variants)
    return {
        "chunks": chunks,
        "shots_per_chunk": shots,
        "prompt_tokens": {"min": min(lengths), "max": max(lengths)},
        "budget_tokens": budget,
        "image_px": None if model == "embedded" else args.smolvlm_px,
        "variants": results,
        "throughput_fixed_over_one_chunk": results[names[1]]["chunks_per_s_median"]
        / results[names[0]]["chunks_per_s_median"],
        "cpu_throughput_fixed_over_one_chunk": results[names[1]]["chunks_per_cpu_s_median"]
        / results[names[0]]["chunks_per_cpu_s_median"],
        "rows_max_abs_difference": float(np.abs(one - fixed).max()),
        "rows_max_abs": float(np.abs(one).max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/private_batches.json"))
    parser.add_argument("--models", default="embedded,smolvlm-256m")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--chunks", type=int, default=64)
    parser.add_argument("--shots", type=int, default=8)
    parser.add_argument("--smolvlm-chunks", type=int, default=16)
    parser.add_argument("--smolvlm-shots", type=int, default=4)
    parser.add_argument("--smolvlm-px", type=int, default=128)
    parser.add_argument("--budget-margin", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smolvlm-repeats", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    load_at_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        models = {model: measure(model, args, Path(tmp)) for model in args.models.split(",")}
    report = {
        "models": models,
        "rows": args.rows,
        "device": args.device,
        "dtype": args.dtype,
        "repeats": {"embedded": args.repeats, "smolvlm-256m": args.smolvlm_repeats},
        "command": " ".join(["python", *sys.argv]),
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
            "load_average_1min_at_start": load_at_start,
            "load_average_1min_at_end": os.getloadavg()[0],
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
