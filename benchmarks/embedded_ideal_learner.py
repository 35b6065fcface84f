"""What 16 demonstrations can teach at all, split by whether the query's own cell is shown (issue
24, targets). No model is run and nothing here is chosen, so it reads the demo's held-out tasks
and seeds (a reference for the targets, like the recognition ceiling) as well as the DEV set.

For every held-out predicate and test query, the Bayes-optimal learners of
:mod:`dpmtv.embedded.bayes` (a uniform prior over the trained tables, over every table of the rule
grammar, or over the held-out tables only) see exactly the ``--shots`` demonstrations the demo's
``icl:K`` method shows that query and answer with their posterior predictive; the demo reports
the same learners on all and deciding-cell queries. Here deciding-cell queries are further split
by whether the query's own attribute combination is among its demonstrations ("shown"), as
``embedded_icl_copy_dev.py`` splits the model's ICL. For the label maps it reports the share of
test queries whose own mapped value is among their demonstrations: what copying can reach.

Usage: .venv/bin/python benchmarks/embedded_ideal_learner.py --set demo \
           --out benchmarks/results/embedded_ideal_learner.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from dpmtv._atomic import write_text_atomically
from dpmtv.demo.config import default_config
from dpmtv.demo.recognition import icl_cells, run_ceiling
from dpmtv.embedded import bayes
from dpmtv.embedded.generator import HELD_OUT_TASKS, get_task, task_suite

NUM_TRAIN = 2048
LEARNERS = bayes.LEARNERS


def task_rows(task, seed: int, shots: int, test_queries: int, ceiling) -> list[dict]:
    """One row per test query: deciding or not, shown or not, and every learner's score."""
    demo_rows, test_rows = icl_cells(task, seed, NUM_TRAIN, test_queries, shots)
    scores = {
        learner: bayes.correct(learner, demo_rows, task.truth[demo_rows], test_rows, task.truth[test_rows])
        for learner in LEARNERS
    }
    return [
        {
            "task": task.name,
            "seed": seed,
            "deciding": bool(row in ceiling.deciding_rows),
            "shown": bool(np.isin(row, demo_rows[i])),
            **{learner: float(scores[learner][i]) for learner in LEARNERS},
        }
        for i, row in enumerate(test_rows)
    ]


def label_map_shown(task, seeds, shots: int, test_queries: int) -> float:
    """A label map's reference: the share of test queries whose own mapped value (the class) is
    among their demonstrations, i.e. the accuracy of a learner that knows which attribute is
    mapped and copies the word shown with the query's value (an unshown value's word cannot be
    known: any of the unused nonce words)."""
    shown = []
    for seed in seeds:
        demo_rows, test_rows = icl_cells(task, seed, NUM_TRAIN, test_queries, shots)
        words, demo_words = task.table[test_rows], task.table[demo_rows]
        shown += [
            bool(np.isin(word, shown_words)) for word, shown_words in zip(words, demo_words, strict=True)
        ]
    return float(np.mean(shown))


def summarise(rows: list[dict]) -> dict:
    """All queries, deciding cells, and deciding cells split by shown / not shown."""
    parts = {
        "all": rows,
        "deciding": [r for r in rows if r["deciding"]],
        "deciding_shown": [r for r in rows if r["deciding"] and r["shown"]],
        "deciding_not_shown": [r for r in rows if r["deciding"] and not r["shown"]],
    }
    return {label: {"count": len(part), **_means(part)} for label, part in parts.items()}


def _means(part: list[dict]) -> dict:
    return {learner: float(np.mean([r[learner] for r in part])) if part else None for learner in LEARNERS}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--set",
        choices=("demo", "dev"),
        default="demo",
        help="demo: the suite's held-out predicates, demo seeds",
    )
    parser.add_argument("--shots", type=int, default=16)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    started = time.time()
    if args.set == "demo":
        config = default_config(quick=False)
        seeds, test_queries = config.seeds, config.test_queries
        tasks = [get_task(name) for name in HELD_OUT_TASKS]
        maps = [t for t in task_suite(label_maps=True) if t.kind == "label_map"]
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        from embedded_selection_dev import DEV_SEEDS, dev_tasks

        seeds, test_queries = DEV_SEEDS, 128
        tasks = [t for t in dev_tasks() if t.is_predicate]
        maps = [t for t in dev_tasks() if not t.is_predicate]
    rows = []
    for task in tasks:
        ceiling = run_ceiling(task, seeds, test_queries)
        rows += [r for seed in seeds for r in task_rows(task, seed, args.shots, test_queries, ceiling)]
    record = {
        "command": "python " + " ".join(sys.argv),
        "set": args.set,
        "tasks": [t.name for t in tasks],
        "seeds": list(seeds),
        "settings": f"N = {NUM_TRAIN}, {test_queries} test queries per task and seed, icl:{args.shots} draws",
        "hypotheses": {learner: len(bayes.hypotheses(learner)) for learner in LEARNERS},
        "seconds": round(time.time() - started, 1),
        "pooled": summarise(rows),
        "per_task": {t.name: summarise([r for r in rows if r["task"] == t.name]) for t in tasks},
        "label_maps_value_shown": {t.name: label_map_shown(t, seeds, args.shots, test_queries) for t in maps},
    }
    write_text_atomically(args.out, json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: record[k] for k in ("hypotheses", "pooled", "label_maps_value_shown")}, indent=1))


if __name__ == "__main__":
    main()
