"""Sensitivity audit on the embedded model: worst ‖mean(D) − mean(D')‖ / Δ per unit and relation,
and for the private-only build (heads and C chosen from the private chunks, issue 28) each private
round's worst ``max|u(D) − u(D')| / Δ∞`` next to the release's.

Records: the embedded ``is_big`` task's private split; for user level, users are assigned
publicly (record i → user i mod 24) and one heavy user owns 24 more records. Writes
``benchmarks/results/sensitivity_audit.json`` with the command that produced it.

    PYTHONPATH=src python benchmarks/sensitivity_audit.py --records 96 --partitions 10
    PYTHONPATH=src python benchmarks/sensitivity_audit.py --configs private-only --partitions 3 \
        --out benchmarks/results/sensitivity_audit_private_only.json

``private-only`` is the configuration of ``benchmarks/results/private_only_held_out_final.json``
(``--private-selection candidates`` by probability at 0.3 ε, ``--l2-clip-norm private`` log-loss at
0.2 ε, record level, replace-one); ``private-only-votes`` the same with the head votes (k = 8);
``private-only-released`` with the choice on the release (``released-probability`` at 0.1 ε over
layer-groups).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from dpmtv.audit.sensitivity import audit_sensitivity
from dpmtv.embedded.generator import task_suite
from dpmtv.embedded.suite import task_records
from dpmtv.heads import parse_head_spec
from dpmtv.models.loading import load_model
from dpmtv.pipeline.build import BuildSettings
from dpmtv.pipeline.settings import PrivateClipSettings, PrivateSelectionSettings

CONFIGS = (
    "record-replace-one", "record-add-remove-one", "user", "private-only", "private-only-votes",
    "private-only-released",
)  # fmt: skip


def audit_configs(args: argparse.Namespace) -> dict[str, tuple]:
    """Each audited configuration: (privacy unit, relation, records, settings over the base)."""
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
    clip = PrivateClipSettings(epsilon_fraction=0.2, utility="log-loss")
    candidates = PrivateSelectionSettings(
        k=8, method="candidates", utility="probability", selection_fraction=0.3
    )
    votes = PrivateSelectionSettings(k=8)
    released = PrivateSelectionSettings(
        k=1, method="candidates", utility="released-probability", selection_fraction=0.1
    )
    return {
        "record-replace-one": ("record", "replace-one", records, {}),
        "record-add-remove-one": ("record", "add-remove-one", records, {"num_chunks": args.records // 4}),
        "user": ("user", "add-remove-one", user_records, {"num_chunks": 16, "max_records_per_user": 2}),
        "private-only": (
            "record", "replace-one", records,
            {"private_selection": candidates, "private_clip": clip, "l2_clip_norm": (1.0,)},
        ),
        "private-only-votes": (
            "record", "replace-one", records,
            {"private_selection": votes, "private_clip": clip, "l2_clip_norm": (1.0,)},
        ),
        "private-only-released": (
            "record", "replace-one", records,
            {"private_selection": released, "private_clip": clip, "l2_clip_norm": (1.0,)},
        ),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=96)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--neighbours", type=int, default=4)
    parser.add_argument("--l2-clip-norm", type=float, default=0.05)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/sensitivity_audit.json"))
    parser.add_argument("--configs", default=",".join(CONFIGS[:3]), help=f"comma-separated, of {CONFIGS}")
    args = parser.parse_args()
    loaded = load_model("embedded")
    heads = parse_head_spec("all", loaded.adapter.geometry)
    configs = audit_configs(args)
    base = dict(epsilon=1.0, delta=1e-5, l2_clip_norm=(args.l2_clip_norm,), shots_per_chunk=4, progress=False)
    rows, rounds, chosen, started = [], [], {}, time.perf_counter()
    for name in args.configs.split(","):
        unit, relation, data, extra = configs[name]
        settings = BuildSettings(**{**base, **extra}, privacy_unit=unit, neighbouring_relation=relation)
        audit = audit_sensitivity(
            loaded,
            data,
            None if settings.private_selection is not None else heads,
            settings,
            num_partitions=args.partitions,
            neighbours_per_partition=args.neighbours,
        )
        rows.extend({"config": name, **row} for row in audit.rows())
        rounds.extend({"config": name, **row} for row in audit.round_rows())
        if audit.chosen_on_d:
            chosen[name] = list(audit.chosen_on_d)
        print(audit.to_markdown(), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "command": "PYTHONPATH=src python " + " ".join(sys.argv),
        "model": "embedded",
        "heads": "all (private-only: chosen on each D)",
        "l2_clip_norm": args.l2_clip_norm,
        "records": args.records,
        "seconds": round(time.perf_counter() - started, 1),
        "load_average": list(os.getloadavg()),
        "summary": rows,
        "rounds": rounds,
        "release_at": "private-only: the heads and C each partition's rounds chose on D (seeded)",
        "chosen_on_d": chosen,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
