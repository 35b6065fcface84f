"""CLI start-up cost: wall time and heavy imports of `dpmtv --help`, `dpmtv build --help` and
`dpmtv inspect ARTIFACT` (a fresh interpreter each, median of repeats), from a given source tree.

Usage:  python benchmarks/bench_startup.py --src src --artifact V.safetensors [--label after]
        [--out benchmarks/results/startup.json]
Run once with ``--src`` at the old tree and once at the new one to compare (the JSON keeps both
under their labels).
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

HEAVY = ("torch", "transformers", "scipy", "dp_accounting", "opendp", "ray", "numpy")


def measure(src: str, args: list[str], repeats: int) -> dict:
    env = {**os.environ, "PYTHONPATH": src}
    walls = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dpmtv.cli", *args], env=env, capture_output=True, check=True)
        walls.append(time.perf_counter() - started)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "dpmtv.cli", *args],
        env=env,
        capture_output=True,
        text=True,
    )
    cumulative = {}
    for line in done.stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] in HEAVY:
            cumulative[parts[2]] = int(parts[1]) / 1e6
    return {"wall_s_median": statistics.median(walls), "wall_s_all": walls, "heavy_imports_s": cumulative}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--src", required=True)
    parser.add_argument("--artifact", required=True)
    parser.add_argument("--label", default="after")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/startup.json")
    options = parser.parse_args()
    commands = {
        "dpmtv --help": ["--help"],
        "dpmtv build --help": ["build", "--help"],
        "dpmtv inspect ARTIFACT": ["inspect", options.artifact],
    }
    results = {name: measure(options.src, args, options.repeats) for name, args in commands.items()}
    out = Path(options.out)
    document = json.loads(out.read_text()) if out.exists() else {}
    document[options.label] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "load_average": os.getloadavg(),
        "results": results,
    }
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps({options.label: results}, indent=2))


if __name__ == "__main__":
    main()
