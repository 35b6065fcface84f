"""GPU check (run on a lent accelerator, never in CI): every family's tiny model on CUDA in
bfloat16 through build → artifact → apply → answer, and build throughput at batch 1 vs 8.

Usage: python benchmarks/device_check.py --out results.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from dpmtv.artifact.vector import load_task_vector
from dpmtv.data.prompts import Example
from dpmtv.data.records import load_records
from dpmtv.data.synthetic import write_colour_records
from dpmtv.heads import parse_head_spec
from dpmtv.inference import answer_queries
from dpmtv.models.loading import load_model
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from dpmtv.testing import TINY_FAMILIES, build_tiny_checkpoint


def check_family(family: str, tmp: Path, records) -> dict:
    model_dir = build_tiny_checkpoint(family, tmp / family)
    loaded = load_model(model_dir, dtype="bfloat16", device="cuda")
    heads = parse_head_spec("all", loaded.adapter.geometry)
    timings = {}
    for batch_size in (1, 8):
        settings = BuildSettings(
            epsilon=1.0,
            delta=1e-6,
            l2_clip_norm=(1.0,),
            shots_per_chunk=8,
            batch_size=batch_size,
            progress=False,
        )
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = build_task_vector(loaded, records, heads, settings, out=tmp / f"{family}.safetensors")
        torch.cuda.synchronize()
        timings[batch_size] = time.perf_counter() - start
    vector = load_task_vector(result.path)
    queries = [Example(r.load_images(), r.question) for r in records[:4]]
    answers = answer_queries(loaded, queries, vector=vector, max_new_tokens=4)
    chunks = len(records) // 8
    return {
        "chunks_per_s_batch1": chunks / timings[1],
        "chunks_per_s_batch8": chunks / timings[8],
        "epsilon_spent": vector.metadata.privacy.epsilon_spent,
        "answers": answers,
        "device": str(next(loaded.model.parameters()).device),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    report = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "families": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        records = load_records(write_colour_records(tmp / "data", 128, seed=0))
        for family in TINY_FAMILIES:
            try:
                report["families"][family] = check_family(family, tmp, records)
            except Exception as exc:  # a report of every family, failures included
                report["families"][family] = {"error": f"{type(exc).__name__}: {exc}"}
            print(family, report["families"][family], flush=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
