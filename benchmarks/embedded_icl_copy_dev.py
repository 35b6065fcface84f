"""How much of ICL's accuracy on deciding cells is copying (issue 24, item 1: "a rule that differs
from a trained one only where demonstrations rarely look measures luck, not learning").

On the DEV set of ``benchmarks/embedded_selection_dev.py`` (its untrained predicate tables and
seeds 200-201; never the suite's held-out tasks or the demo's seeds), every deciding-cell test
query is split by whether its own attribute combination is among its ``--shots`` ICL
demonstrations (the demo's ``icl:K`` draw), and zero-shot and ICL accuracy are reported on each
part. A learner that copies a shown cell's label and otherwise answers like the closest trained
rule would score 1 on the first part and 0 on the second; ICL's accuracy where the cell is NOT
shown is what the demonstrations taught beyond copying. The dev label maps are split the same
way (all their queries are deciding cells): where the query's own combination is not shown, the
word of its value still is in nearly every prompt, so only matching on the mapped attribute
answers it.

Usage: .venv/bin/python benchmarks/embedded_icl_copy_dev.py --out FILE [--checkpoint DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from embedded_selection_dev import DEV_SEEDS, dev_tasks

from dpmtv._atomic import write_text_atomically
from dpmtv.demo.recognition import icl_cells, run_ceiling
from dpmtv.eval.benchmarks.embedded import embedded_benchmark
from dpmtv.eval.methods import EvalSettings, parse_methods
from dpmtv.eval.runner import run_evaluation
from dpmtv.models.loading import load_model

NUM_TRAIN = 2048


def split_rows(loaded, task, ceiling, seed: int, shots: int, test_queries: int) -> list[dict]:
    """One row per deciding-cell test query of ``task`` at ``seed`` (``ceiling`` pooled over the
    dev seeds' test queries, as the demo's): shown or not, and whether zero-shot and ICL answered
    it right."""
    benchmark = embedded_benchmark(
        task, seed=seed, num_train=NUM_TRAIN, num_test=test_queries, ceiling=ceiling
    )
    demo_rows, test_rows = icl_cells(task, seed, NUM_TRAIN, test_queries, shots)
    settings = EvalSettings(
        methods=parse_methods(f"zero-shot,icl:{shots}"), seeds=(seed,), max_new_tokens=1,
        batch_size=32, allow_non_private=True, progress=False,
    )  # fmt: skip
    runs = {
        r.method: r for r in run_evaluation(loaded, benchmark, settings, heads=None, model_name="dev").runs
    }
    scorer = benchmark.scorer
    rows = []
    for i, record in enumerate(benchmark.test):
        if record.record_id not in scorer.deciding_ids:
            continue
        rows.append({
            "task": task.name,
            "seed": seed,
            "shown": bool(np.isin(test_rows[i], demo_rows[i])),
            **{m: scorer.score(record, r.predictions[i])["accuracy"] for m, r in runs.items()},
        })  # fmt: skip
    return rows


def summarise(rows: list[dict], methods: list[str]) -> dict:
    out = {}
    for label, keep in (("shown", True), ("not_shown", False)):
        part = [r for r in rows if r["shown"] is keep]
        out[label] = {
            "count": len(part),
            **{m: float(np.mean([r[m] for r in part])) if part else None for m in methods},
        }
    out["all_deciding"] = {"count": len(rows), **{m: float(np.mean([r[m] for r in rows])) for m in methods}}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", default="embedded")
    parser.add_argument("--shots", type=int, default=16)
    parser.add_argument("--test-queries", type=int, default=128, help="per task and seed")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(args.checkpoint)
    started = time.time()
    tasks = dev_tasks()  # the label maps too: every query of a nonce map is a deciding cell
    ceilings = {t.name: run_ceiling(t, DEV_SEEDS, args.test_queries) for t in tasks}
    rows = [
        row
        for seed in DEV_SEEDS
        for t in tasks
        for row in split_rows(loaded, t, ceilings[t.name], seed, args.shots, args.test_queries)
    ]
    methods = ["zero-shot", f"icl:{args.shots}"]
    predicates = {t.name for t in tasks if t.is_predicate}
    record = {
        "command": "python " + " ".join(sys.argv),
        "dev_tasks": [t.name for t in tasks],
        "dev_seeds": list(DEV_SEEDS),
        "settings": f"N = {NUM_TRAIN}, {args.test_queries} queries per task and seed; deciding cells",
        "seconds": round(time.time() - started, 1),
        "pooled": summarise([r for r in rows if r["task"] in predicates], methods),
        "pooled_label_maps": summarise([r for r in rows if r["task"] not in predicates], methods),
        "per_task": {t.name: summarise([r for r in rows if r["task"] == t.name], methods) for t in tasks},
    }
    write_text_atomically(args.out, json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: record[k] for k in ("pooled", "pooled_label_maps")}, indent=1))


if __name__ == "__main__":
    main()
