"""Peak RSS of a build over a saved ``datasets`` folder of N records at fixed public m (N = 256 and
4096 by default): with images decoded when a chunk is prepared, memory does not grow with N.

Usage:  python benchmarks/datasets_memory.py --src before=OLD/src --src after=src \\
            [--sizes 256,4096] [--px 128] [--out benchmarks/results/datasets_memory.json]
Each (tree, N) runs in a fresh interpreter (``ru_maxrss``); the trees alternate.
The build: tiny LLaVA, add-remove-one, m = 16 chunks of 8 shots, all heads (compute is constant,
only the records scale).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CODE = """
import resource
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from dpmtv.data.records import load_records
from dpmtv.heads import parse_head_spec
from dpmtv.models.loading import load_model
loaded = load_model({model!r})
records = load_records({data!r})
settings = BuildSettings(epsilon=1.0, delta=1e-6, l2_clip_norm=(1.0,), shots_per_chunk=8,
    neighbouring_relation="add-remove-one", num_chunks=16, progress=False)
build_task_vector(loaded, records, parse_head_spec("all", loaded.adapter.geometry), settings)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def write_dataset(folder: Path, count: int, px: int, seed: int) -> Path:
    """A ``save_to_disk`` folder of ``count`` records with px × px noisy photo-like PNG images."""
    import datasets
    from PIL import Image

    rng = np.random.default_rng(seed)

    def rows():
        for index in range(count):
            base = rng.integers(0, 256, 3)
            pixels = np.clip(base + rng.normal(0, 30, (px, px, 3)), 0, 255).astype(np.uint8)
            yield {"image": Image.fromarray(pixels), "question": "What colour is it?",
                   "answer": f"colour {int(base[0]) % 5}", "id": f"r{index}"}  # fmt: skip

    text = datasets.Value("string")
    features = datasets.Features({"image": datasets.Image(), "question": text, "answer": text, "id": text})
    datasets.Dataset.from_generator(rows, features=features, cache_dir=str(folder / "cache")).save_to_disk(
        str(folder / "ds")
    )
    return folder / "ds"


def peak_rss_mib(src: str, model: Path, data: Path) -> float:
    env = {**os.environ, "PYTHONPATH": src}
    code = CODE.format(model=str(model), data=str(data))
    done = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return int(done.stdout.strip().splitlines()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", action="append", required=True, help="LABEL=PATH, repeatable")
    parser.add_argument("--sizes", default="256,4096")
    parser.add_argument("--px", type=int, default=128)
    parser.add_argument("--out", default="benchmarks/results/datasets_memory.json")
    options = parser.parse_args()
    trees = dict(item.split("=", 1) for item in options.src)
    sizes = [int(n) for n in options.sizes.split(",")]
    from dpmtv.testing import build_tiny_checkpoint

    load_before = os.getloadavg()
    results: dict = {label: {} for label in trees}
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_checkpoint("llava", Path(tmp) / "model")
        folders = {n: write_dataset(Path(tmp) / f"n{n}", n, options.px, seed=n) for n in sizes}
        for n in sizes:
            for label, src in trees.items():
                results[label][f"n{n}_peak_rss_mib"] = peak_rss_mib(src, model, folders[n])
    for label in trees:
        results[label]["ratio_peak_rss_largest_over_smallest"] = (
            results[label][f"n{sizes[-1]}_peak_rss_mib"] / results[label][f"n{sizes[0]}_peak_rss_mib"]
        )
    document = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "trees": trees,
        "image_px": options.px,
        "build": "tiny llava, add-remove-one, m = 16 chunks of 8 shots, all heads",
        "load_average_before_after": [load_before, os.getloadavg()],
        "cpus": os.cpu_count(),
        "results": results,
    }
    Path(options.out).write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
