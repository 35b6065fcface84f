"""Sensitivity audit on the embedded model: worst ‖mean(D) − mean(D')‖ / Δ per unit and relation.

Records: the embedded ``is_big`` task's private split; for user level, users are assigned
publicly (record i → user i mod 24) and one heavy user owns 24 more records. Writes
``benchmarks/results/sensitivity_audit.json`` with the command that produced it.

    PYTHONPATH=src python benchmarks/sensitivity_audit.py --records 96 --partitions 10
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from dpmtv.audit.sensitivity import audit_sensitivity
from dpmtv.embedded.generator import task_suite
from dpmtv.embedded.suite import task_records
from dpmtv.heads import parse_head_spec
from dpmtv.models.loading import load_model
from dpmtv.pipeline.build import BuildSettings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=96)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--neighbours", type=int, default=4)
    parser.add_argument("--l2-clip-norm", type=float, default=0.05)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/sensitivity_audit.json"))
    args = parser.parse_args()
    loaded = load_model("embedded")
    heads = parse_head_spec("all", loaded.adapter.geometry)
    task = next(t for t in task_suite() if t.name == "is_big")
    records = [
        dataclasses.replace(r, has_explicit_id=True)
        for r in task_records(task, args.records, seed=0, split="private")
    ]
    heavy = task_records(task, 24, seed=1, split="private")
    user_records = [dataclasses.replace(r, user_id=f"user-{i % 24}") for i, r in enumerate(records)]
    user_records += [
        dataclasses.replace(r, record_id=f"heavy-{i}", user_id="heavy") for i, r in enumerate(heavy)
    ]
    base = dict(epsilon=1.0, delta=1e-5, l2_clip_norm=(args.l2_clip_norm,), shots_per_chunk=4, progress=False)
    configs = [
        ("record", "replace-one", records, {}),
        ("record", "add-remove-one", records, {"num_chunks": args.records // 4}),
        ("user", "add-remove-one", user_records, {"num_chunks": 16, "max_records_per_user": 2}),
    ]
    rows, started = [], time.perf_counter()
    for unit, relation, data, extra in configs:
        settings = BuildSettings(**base, privacy_unit=unit, neighbouring_relation=relation, **extra)
        audit = audit_sensitivity(
            loaded,
            data,
            heads,
            settings,
            num_partitions=args.partitions,
            neighbours_per_partition=args.neighbours,
        )
        rows.extend(audit.rows())
        print(audit.to_markdown(), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "command": "PYTHONPATH=src python " + " ".join(sys.argv),
        "model": "embedded",
        "heads": "all",
        "l2_clip_norm": args.l2_clip_norm,
        "records": args.records,
        "seconds": round(time.perf_counter() - started, 1),
        "summary": rows,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
