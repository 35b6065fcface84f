"""CLI start-up cost: wall time of commands that run no model (`dpmtv --help`, `dpmtv build
--help`, `dpmtv inspect ARTIFACT`, `dpmtv plan ...`), each in a fresh interpreter, median of
repeats, and whether torch/transformers were imported; two source trees side by side in one run.

Usage:  python benchmarks/bench_startup.py --src before=OLD/src --src after=src \\
            --artifact V.safetensors [--repeats 10] [--out benchmarks/results/startup.json]
The trees' runs alternate (before, after, before, …), so machine load falls on both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("torch", "transformers")
PROBE = (
    "import sys, json\nfrom dpmtv.cli import main\ntry:\n    main(sys.argv[1:], prog_name='dpmtv')\n"
    "except SystemExit:\n    pass\n"
    f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]), file=sys.stderr)\n"
)


def run_once(src: str, args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": src}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dpmtv.cli", *args], env=env, capture_output=True, check=True)
    return time.perf_counter() - started


def heavy_imports(src: str, args: list[str]) -> list[str]:
    env = {**os.environ, "PYTHONPATH": src}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True)
    return json.loads(done.stderr.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", action="append", required=True, help="LABEL=PATH, repeatable")
    parser.add_argument("--artifact", required=True)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", default="benchmarks/results/startup.json")
    options = parser.parse_args()
    trees = dict(item.split("=", 1) for item in options.src)
    commands = {
        "dpmtv --help": ["--help"],
        "dpmtv build --help": ["build", "--help"],
        "dpmtv inspect ARTIFACT": ["inspect", options.artifact],
        "dpmtv plan --model embedded": [
            "plan", "--model", "embedded", "--heads", "all", "--epsilon", "1", "--num-records", "4096",
        ],
    }  # fmt: skip
    walls = {label: {name: [] for name in commands} for label in trees}
    load_before = os.getloadavg()
    for _ in range(options.repeats):
        for name, args in commands.items():
            for label, src in trees.items():
                walls[label][name].append(run_once(src, args))
    results = {
        label: {
            name: {
                "wall_s_median": statistics.median(walls[label][name]),
                "wall_s_all": walls[label][name],
                "imports": heavy_imports(trees[label], args),
            }
            for name, args in commands.items()
        }
        for label in trees
    }
    labels = list(trees)
    ratios = {
        name: results[labels[0]][name]["wall_s_median"] / results[labels[-1]][name]["wall_s_median"]
        for name in commands
    }
    document = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "trees": trees,
        "repeats": options.repeats,
        "load_average_before_after": [load_before, os.getloadavg()],
        "cpus": os.cpu_count(),
        "results": results,
        f"speedup_{labels[0]}_over_{labels[-1]}": ratios,
    }
    Path(options.out).write_text(json.dumps(document, indent=2) + "\n")
    for name in commands:
        row = "  ".join(f"{label} {results[label][name]['wall_s_median']:.3f} s" for label in labels)
        print(f"{name:32s} {row}  imports {[results[label][name]['imports'] for label in labels]}")


if __name__ == "__main__":
    main()
