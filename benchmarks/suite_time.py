"""How long the test suite takes: the fast subset (``-m "not slow"``) and the full suite, each run
once in a fresh process, optionally in pytest-xdist workers.

    python benchmarks/suite_time.py [--runs fast,full] [--workers 0,2] [--out FILE]

Each run records its pytest command, wall seconds, exit status, pytest's summary line and the
load average before and after (the machine may be shared: compare runs of one file, made on a
quiet machine, not runs across files). Targets (docs: CONTRIBUTING.md): the fast subset under
3 minutes, the full suite under 10 minutes, on an idle 2-core machine. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUBSETS = {"fast": ["-m", "not slow"], "full": []}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="fast,full", help="comma-separated: fast, full")
    parser.add_argument("--workers", default="0", help="comma-separated xdist worker counts (0: no xdist)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "suite_time.json")
    return parser.parse_args(argv)


def pytest_command(subset: str, workers: int) -> list[str]:
    xdist = ["-n", str(workers)] if workers else []
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *xdist, *SUBSETS[subset]]


def run(subset: str, workers: int) -> dict:
    """One timed pytest run in a fresh process, from the repository root."""
    command = pytest_command(subset, workers)
    load_before = os.getloadavg()
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    wall_s = time.perf_counter() - start
    lines = done.stdout.strip().splitlines()
    return {
        "subset": subset,
        "workers": workers,
        "pytest": shlex.join(["python", *command[1:]]),
        "wall_s": round(wall_s, 1),
        "exit_status": done.returncode,
        "summary": lines[-1] if lines else done.stderr.strip()[-300:],
        "load_average_1_5_15_before": load_before,
        "load_average_1_5_15_after": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    runs = [
        run(subset, int(workers)) for workers in args.workers.split(",") for subset in args.runs.split(",")
    ]
    document = {
        "command": shlex.join(["python", "benchmarks/suite_time.py", *(argv or sys.argv[1:])]),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    for entry in runs:
        print(f"{entry['subset']:>5} workers={entry['workers']}: {entry['wall_s']:.0f} s  {entry['summary']}")


if __name__ == "__main__":
    main()
