"""`dpmtv demo` (the default) and `dpmtv demo --full` timed side by side in one run, same machine:
wall time, CPU time of the demo process and its workers, and the load average around each run.

Usage:  python benchmarks/demo_default_vs_full.py --out benchmarks/results/demo_default_vs_full.json
            [--rounds 1]

Each round runs the default, then --full (in turn reversed on odd rounds), each into a fresh
temporary folder; the ratio default / --full is reported per round (the machine's load drifts,
the ratio within a round holds better than either time).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {"default": [], "full": ["--full"]}


def run_demo(extra: list[str], out: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    command = [sys.executable, "-m", "dpmtv", "demo", *extra, "--out", str(out)]
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    load = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    return {"wall_s": round(wall_s, 1), "cpu_s": round(cpu_s, 1), "load_average_before_after": load}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=1)
    options = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(options.rounds):
            order = list(VARIANTS.items())[:: -1 if index % 2 else 1]
            runs = {name: run_demo(extra, Path(tmp) / f"{name}-{index}") for name, extra in order}
            runs["default_over_full_wall"] = round(runs["default"]["wall_s"] / runs["full"]["wall_s"], 3)
            runs["default_over_full_cpu"] = round(runs["default"]["cpu_s"] / runs["full"]["cpu_s"], 3)
            print(json.dumps(runs), flush=True)
            rounds.append(runs)
    document = {
        "what": "dpmtv demo (default: 9 tasks x 3 seeds, shots curve on 8 images) against dpmtv demo "
        "--full (35 tasks x 3 seeds, shots curve on 16), one run each per round, same machine",
        "command": " ".join(["python", "benchmarks/demo_default_vs_full.py", *sys.argv[1:]]),
        "cpus": os.cpu_count(),
        "rounds": rounds,
    }
    options.out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
