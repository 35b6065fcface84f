"""The build a user runs first, timed: ``dpmtv build`` with its defaults (embedded model, s = 8,
every head of its four layers, ε = 1) on ``--records`` records of 384 px noisy PNGs (decoding
costs what a photo's does), run as a fresh process through the CLI's entry point so start-up, validation,
extraction and writing all count.

Usage:  python benchmarks/first_build.py --records 2048 --out result.json [--data-dir DIR]
Side by side with an older version (alternating runs, one machine):
    python benchmarks/side_by_side.py --old-src /tmp/old42/src --rounds 5 \\
        --out benchmarks/results/first_build_side_by_side.json -- benchmarks/first_build.py --records 2048
The records are written once into ``--data-dir`` and reused, so both versions read the same files.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))


# the CLI's entry point as both versions have it (older ones have no ``python -m dpmtv``)
ENTRY = "import sys; from dpmtv.cli import main; sys.exit(main(prog_name='dpmtv'))"


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def records_file(folder: Path, count: int) -> Path:
    """``count`` photo records under ``folder`` (written on first use, then reused)."""
    from suite import write_photo_records

    path = folder / f"photos-{count}" / "records.jsonl"
    if not path.exists():
        write_photo_records(path.parent, count)
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2048)
    parser.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "dpmtv-first-build")
    parser.add_argument("--out", type=Path, required=True)
    options = parser.parse_args()
    data = records_file(options.data_dir, options.records)
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-c", ENTRY, "build", "--data", str(data), "--epsilon", "1",
                   "--heads", "all", "--out", str(Path(tmp) / "task.safetensors"), "--quiet"]  # fmt: skip
        cpu_before = _children_cpu_s()
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds = time.perf_counter() - started
    result = {"build_s": seconds, "build_cpu_s": _children_cpu_s() - cpu_before, "records": options.records,
              "image_px": 384, "shots_per_chunk": 8,
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
              # as the benchmark got it; unset, the newer CLI sets PASSIVE for its own process
              "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}  # fmt: skip
    document = {
        "command": " ".join(["python", "benchmarks/first_build.py", *sys.argv[1:]]),
        "cpus": os.cpu_count(),
        "result": result,
    }
    options.out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
