"""Your checkpoint, end to end: plan → select → build → inspect → answer (→ eval).

The tutorial docs/tutorials/own-checkpoint.md as one script. Heads are chosen on PUBLIC records
(no privacy cost); only the build reads the private ones.

    python examples/own_checkpoint.py MODEL private/records.jsonl --public public/records.jsonl \
        [--test test/records.jsonl] --out own-checkpoint-out

Writes OUT/heads.json, OUT/task.safetensors (+ its card OUT/task.README.md), OUT/answer.txt, and
with --test the comparison in OUT/eval/.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

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
    parser.add_argument("model", help="checkpoint folder or hub id")
    parser.add_argument("records", type=Path, help="PRIVATE records (.jsonl, .csv or a datasets folder)")
    parser.add_argument("--public", type=Path, required=True, help="PUBLIC records of the same task")
    parser.add_argument("--test", type=Path, help="labelled test records for `dpmtv eval` (optional)")
    parser.add_argument("--out", type=Path, default=Path("own-checkpoint-out"))
    parser.add_argument("--epsilon", default="1")
    parser.add_argument("--delta", default="1e-5")
    parser.add_argument("--l2-clip-norm", default="5")
    parser.add_argument("--shots-per-chunk", default="8")
    parser.add_argument("--k", default="8", help="heads `dpmtv select --method scored` keeps")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    heads, vector = args.out / "heads.json", args.out / "task.safetensors"
    privacy = [
        "--epsilon",
        args.epsilon,
        "--l2-clip-norm",
        args.l2_clip_norm,
        "--shots-per-chunk",
        args.shots_per_chunk,
    ]

    # 1. heads on public records (free); 2. the plan at the private N (public settings only)
    dpmtv_cli("select", "--model", args.model, "--public-data", str(args.public), "--method", "scored",
              "--k", args.k, "--out", str(heads))  # fmt: skip
    num_records = len(dpmtv.load_records(args.records))  # N is public under the default relation
    dpmtv_cli(
        "plan", "--model", args.model, "--heads", str(heads), "--num-records", str(num_records), *privacy
    )
    # 3. the private build: the only step that reads the private records
    dpmtv_cli("build", "--model", args.model, "--data", str(args.records), "--heads", str(heads),
              "--delta", args.delta, *privacy, "--force", "--out", str(vector))  # fmt: skip
    dpmtv_cli("inspect", str(vector))
    # 4. answer one public query with the vector (post-processing: no further privacy cost)
    query = dpmtv.load_records(args.test or args.public)[0]
    image = args.out / "query.png"
    query.load_images()[0].save(image)
    answer = dpmtv_cli("answer", "--model", args.model, "--vector", str(vector), "--image", str(image),
                       "--question", query.question)  # fmt: skip
    (args.out / "answer.txt").write_text(answer, encoding="utf-8")
    if args.test:  # an experiment on labelled test records, not a private release
        dpmtv_cli("eval", "--model", args.model, "--data", str(args.records), "--eval-data", str(args.test),
                  "--heads", str(heads), "--methods", "zero-shot,dp-mtv", "--epsilons", args.epsilon,
                  "--delta", args.delta, "--l2-clip-norm", args.l2_clip_norm,
                  "--shots-per-chunk", args.shots_per_chunk, "--seeds", "1", "--quiet",
                  "--out", str(args.out / "eval"))  # fmt: skip
    print(f"wrote {heads}, {vector}, {args.out / 'answer.txt'}")


if __name__ == "__main__":
    main()
