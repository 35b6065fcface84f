"""Scaling out with Ray: the chunks' forward passes on Ray workers, noise once in this process.

The tutorial docs/tutorials/ray.md as one script: the same build twice, locally and with
`--ray auto --workers N`, with the same insecure seed so that the two can be compared (a seeded
vector has NO guarantee: drop the seed for a real build). Needs the ray extra
(`pip install -e '.[ray]'`).

    python examples/ray_build.py MODEL private/records.jsonl --out ray-out [--workers 2]

Writes OUT/local.safetensors and OUT/ray.safetensors, and OUT/compare.json: the largest
difference between their values (float rounding of the summation order only) and their workers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import dpmtv


def dpmtv_cli(*args: str) -> str:
    """Run one `dpmtv` command as a user would, echoing it; stop on its error line."""
    print("$ dpmtv", " ".join(args), flush=True)
    result = subprocess.run([sys.executable, "-m", "dpmtv", *args], stdout=subprocess.PIPE, text=True)
    print(result.stdout, end="", flush=True)
    if result.returncode:
        sys.exit(result.returncode)
    return result.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="checkpoint folder or hub id (the same path on every Ray node)")
    parser.add_argument("records", type=Path, help="PRIVATE records (.jsonl, .csv or a datasets folder)")
    parser.add_argument("--out", type=Path, default=Path("ray-out"))
    parser.add_argument("--heads", default="all", help="head spec, e.g. layers:8-15 or a `dpmtv select` file")
    parser.add_argument("--workers", default="2", help="Ray workers, each loading the model once")
    parser.add_argument("--ray", default="auto", help="'auto' (a local cluster) or a cluster address")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    build = ["build", "--model", args.model, "--data", str(args.records), "--heads", args.heads,
             "--epsilon", "1", "--delta", "1e-5", "--l2-clip-norm", "5", "--shots-per-chunk", "8",
             "--insecure-seeded-noise", "7", "--force", "--quiet"]  # fmt: skip
    local, distributed = args.out / "local.safetensors", args.out / "ray.safetensors"
    dpmtv_cli(*build, "--out", str(local))
    dpmtv_cli(*build, "--ray", args.ray, "--workers", args.workers, "--out", str(distributed))
    a, b = dpmtv.load_task_vector(local), dpmtv.load_task_vector(distributed)
    compare = {
        "max_abs_difference": float(np.max(np.abs(a.values - b.values))),
        "max_abs_value": float(np.max(np.abs(a.values))),
        "workers": [a.metadata.workers, b.metadata.workers],
    }
    (args.out / "compare.json").write_text(json.dumps(compare, indent=1), encoding="utf-8")
    print(json.dumps(compare))


if __name__ == "__main__":
    main()
