"""Two versions of dpmtv side by side in one run: a benchmark script run alternately (A B A B …)
with ``PYTHONPATH`` set to each version's ``src``, its JSON results collected per round, so a
comparison holds while the machine's load drifts.

Usage:  python benchmarks/side_by_side.py --old-src /tmp/old/src [--rounds 3]
            [--out benchmarks/results/x_side_by_side.json] -- benchmarks/prepare_workers.py --chunks 16

``--old-src`` is a checkout's ``src`` (e.g. ``git archive <commit> src | tar -x -C /tmp/old``);
the new version is this checkout's ``src``. The benchmark must take ``--out PATH`` and write JSON
there. The load average is recorded before and after every run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(src: str, benchmark: list[str], out: Path) -> dict:
    environment = {**os.environ, "PYTHONPATH": src}
    load_before = os.getloadavg()
    subprocess.run([sys.executable, *benchmark, "--out", str(out)], env=environment, check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return {"load_average_before_after": [load_before, os.getloadavg()], **json.loads(out.read_text())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old-src", required=True)
    parser.add_argument("--old-label", default="old")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", required=True)
    parser.add_argument("benchmark", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    benchmark = [arg for arg in options.benchmark if arg != "--"]
    versions = {options.old_label: str(Path(options.old_src).resolve()), "new": str(ROOT / "src")}
    rounds: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(options.rounds):
            versions_in_turn = list(versions.items())
            if round_index % 2:
                versions_in_turn.reverse()  # A B, B A, A B, …: neither always runs first
            out = Path(tmp) / "run.json"
            rounds.append({label: run_once(src, benchmark, out) for label, src in versions_in_turn})
            for label, run in rounds[-1].items():
                summary = run.get("result", run)  # a benchmark's own summary, else its top-level figures
                scalars = (int, float, str)
                figures = {k: v for k, v in summary.items() if k != "all_runs" and isinstance(v, scalars)}
                print(label, [round(x[0], 1) for x in run["load_average_before_after"]], json.dumps(figures))
    document = {
        "command": " ".join(["python", "benchmarks/side_by_side.py", *sys.argv[1:]]),
        "versions": versions, "cpus": os.cpu_count(), "rounds": rounds,
    }  # fmt: skip
    Path(options.out).write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
