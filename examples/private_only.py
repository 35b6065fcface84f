"""No public data: heads and clip norms chosen from the private records inside one build.

The tutorial docs/tutorials/private-only.md as one script: one accounted (ε, δ) covers the
private clip round, the release of the whole head pool and the choice of heads on that release.

    python examples/private_only.py MODEL private/records.jsonl --out private-only-out

Writes OUT/private-only.safetensors (+ OUT/private-only.README.md) and OUT/inspect.json, the
verified metadata (the chosen heads, the clip norms, the composed guarantee).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


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
    parser.add_argument("--out", type=Path, default=Path("private-only-out"))
    parser.add_argument("--epsilon", default="2", help="the whole budget: clip round, release and choice")
    parser.add_argument("--delta", default="1e-5")
    parser.add_argument("--shots-per-chunk", default="8")
    parser.add_argument(
        "--selection-candidates",
        default="layer-groups",
        help="the PUBLIC list of head sets to choose from (layer-groups, layer-subsets, layer-blocks)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    vector = args.out / "private-only.safetensors"
    dpmtv_cli("build", "--model", args.model, "--data", str(args.records),
              "--heads-from", "private", "--private-selection", "candidates",
              "--selection-candidates", args.selection_candidates, "--l2-clip-norm", "private",
              "--epsilon", args.epsilon, "--delta", args.delta, "--shots-per-chunk", args.shots_per_chunk,
              "--force", "--out", str(vector))  # fmt: skip
    metadata = json.loads(dpmtv_cli("inspect", str(vector), "--json"))
    (args.out / "inspect.json").write_text(json.dumps(metadata, indent=1), encoding="utf-8")
    print(f"wrote {vector}, {args.out / 'inspect.json'}")


if __name__ == "__main__":
    main()
