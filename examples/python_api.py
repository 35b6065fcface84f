"""Your first vector in Python: load a model and records, build, save, reload and answer.

The Python half of docs/getting-started/first-vector.md as one script.

    python examples/python_api.py MODEL private/records.jsonl --out python-out

Writes OUT/task.safetensors (+ OUT/task.README.md) and prints the answer to the first record's
question with the vector applied.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import dpmtv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="checkpoint folder or hub id")
    parser.add_argument("records", type=Path, help="PRIVATE records (.jsonl, .csv or a datasets folder)")
    parser.add_argument("--out", type=Path, default=Path("python-out"))
    parser.add_argument("--heads", default="all", help="head spec, e.g. layers:8-15 or a `dpmtv select` file")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    loaded = dpmtv.load_model(args.model)
    records = dpmtv.load_records(args.records)
    heads = dpmtv.parse_head_spec(args.heads, loaded.adapter.geometry)
    settings = dpmtv.BuildSettings(epsilon=1.0, delta=1e-5, l2_clip_norm=(5.0,), shots_per_chunk=8)
    out = args.out / "task.safetensors"
    out.unlink(missing_ok=True)  # a build never replaces a file silently
    dpmtv.build_task_vector(loaded, records, heads, settings, out=out)

    vector = dpmtv.load_task_vector(out)  # verifies the hash and re-derives the claim
    privacy = vector.metadata.privacy
    guarantee = f"({privacy.epsilon}, {privacy.delta})-DP"
    print(f"{out}: {guarantee}, {len(vector.heads)} heads, noise std {privacy.noise_std:.4g}")
    query = dpmtv.Example(images=records[0].load_images(), question=records[0].question)
    print(dpmtv.answer_queries(loaded, [query], vector=vector)[0])


if __name__ == "__main__":
    main()
