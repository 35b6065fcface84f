"""The DEV set of the embedded model's public head selection (issue 24, item 3): every choice of
``scripts/select_embedded_heads.py`` (the share of the score carried by public deciding-cell
queries) is made here, never on the evaluation suite's tasks or the demo's seeds.

- Tasks: ``DEV_PREDICATES`` held-out (untrained) predicate tables of the rule space that are
  not in the evaluation suite (nor complements of its tables), drawn by the fixed public seed
  ``DEV_TASK_SEED``, and one fresh nonce label map per evaluation attribute (``dev_map_*``, words
  drawn by the same seed; training draws a fresh map per episode, the demo's maps are others).
- Seeds: ``DEV_SEEDS`` (200+) for the private records and test queries; the demo uses 0, 1, 2.
- Per variant: the script's per-task public selection on each task's public sample, then the
  demo's own (task, seed) runs (zero-shot, ICL-16, MTV, DP-MTV at ε = 1; N = 2048, s = 8) with
  those heads and clip norms; accuracy on all test queries and on deciding cells.

Usage: .venv/bin/python benchmarks/embedded_selection_dev.py --deciding-weight 0 0.5 \
           --out benchmarks/results/embedded_selection_dev.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from private_dev import selection_script

from dpmtv._atomic import write_text_atomically
from dpmtv.demo.config import DemoConfig
from dpmtv.demo.recognition import run_ceiling, summarise_deciding
from dpmtv.demo.runs import _DemoState, _run_unit
from dpmtv.embedded.generator import (
    LABEL_MAP_ATTRIBUTES,
    NONCE_WORDS,
    VALUES,
    get_task,
    label_map_task,
    task_suite,
)
from dpmtv.embedded.rulespace import canonical, rule_entries, trained
from dpmtv.embedded.suite import PUBLIC_SEED
from dpmtv.eval.benchmarks.embedded import public_selection
from dpmtv.heads import HeadSet
from dpmtv.models.loading import load_model

DEV_TASK_SEED = 20_261_202  # public, fixed before any dev number was seen
DEV_SEEDS = (200, 201)
DEV_PREDICATES = 8  # one per held-out shape (6), then 2 more
METHODS = ("zero-shot", "icl-16 (non-private)", "mtv (non-private)", "dp-mtv")


def dev_tasks() -> list:
    """``DEV_PREDICATES`` untrained predicate tasks outside the suite (one of every held-out rule
    shape, the rest from the whole pool), and the dev label maps."""
    suite = {canonical(t.truth) for t in task_suite() if t.is_predicate}
    seen: set[bytes] = set()
    by_shape: dict[str, list] = {}
    for entry in rule_entries():
        task = get_task(entry.name)
        key = canonical(task.truth)
        if task.name == entry.name and not trained(task.truth) and key not in suite | seen:
            seen.add(key)
            by_shape.setdefault(entry.shape, []).append(task)
    rng = np.random.default_rng(DEV_TASK_SEED)
    tasks = [pool[int(rng.integers(len(pool)))] for _, pool in sorted(by_shape.items())]
    rest = [t for pool in by_shape.values() for t in pool if t not in tasks]
    tasks += [rest[int(i)] for i in rng.choice(len(rest), DEV_PREDICATES - len(tasks), replace=False)]
    for attribute in LABEL_MAP_ATTRIBUTES:
        picks = rng.choice(len(NONCE_WORDS), len(VALUES[attribute]), replace=False)
        tasks.append(label_map_task(attribute, [NONCE_WORDS[i] for i in picks], name=f"dev_map_{attribute}"))
    return tasks


def per_task_selection(loaded, tasks, deciding_weight: float) -> dict:
    """Each task's public selection by the script at ``deciding_weight``."""
    script = selection_script()
    rng = np.random.default_rng(PUBLIC_SEED)
    public = {}
    for task in tasks:
        chosen = script.select_for_task(
            loaded.adapter, task, PUBLIC_SEED, rng, deciding_weight=deciding_weight
        )
        public[task.name] = (HeadSet.of(map(tuple, chosen["heads"])), tuple(chosen["l2_clip_norm"]))
    return public


def shared_selection(tasks) -> dict:
    """The shipped shared heads and clip norms (selected on the seen tasks) for every task."""
    heads, clip = public_selection(tasks[0].name, shared=True)
    return {t.name: (HeadSet.of(map(tuple, heads)), tuple(clip)) for t in tasks}


def run_variant(loaded, tasks, public: dict, test_queries: int) -> dict:
    """The demo's runs of ``tasks`` on the dev seeds with ``public`` heads and clip norms."""
    config = DemoConfig(tasks=(), seeds=DEV_SEEDS, epsilons=(1.0,), shot_curve=(), test_queries=test_queries)
    ceilings = {t.name: run_ceiling(t, DEV_SEEDS, config.test_queries) for t in tasks}
    state = _DemoState(loaded, {t.name: t for t in tasks}, config, public, ceilings)
    rows = [row for seed in DEV_SEEDS for t in tasks for row in _run_unit(state, (seed, t.name))[0]]
    out: dict = {"heads": {n: len(h) for n, (h, _) in public.items()}}
    for group, chosen_tasks in (
        ("predicates", [t.name for t in tasks if t.is_predicate]),
        ("label_maps", [t.name for t in tasks if not t.is_predicate]),
    ):
        out[group] = {}
        for method in METHODS:
            picked = [r for r in rows if r["method"] == method and r["task"] in chosen_tasks]
            out[group][method] = {
                "accuracy": float(np.mean([r["accuracy"] for r in picked])),
                **summarise_deciding(picked, DEV_SEEDS),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deciding-weight", type=float, nargs="*", default=[0.0, 0.5])
    parser.add_argument("--shared", action="store_true", help="also the shipped shared heads")
    parser.add_argument("--checkpoint", default="embedded", help="checkpoint folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--test-queries", type=int, default=128, help="per task and seed")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.shared and args.checkpoint != "embedded":
        parser.error("--shared reads the shipped model's shared heads: use it without --checkpoint")
    loaded = load_model(args.checkpoint)
    tasks = dev_tasks()
    print("dev tasks:", [t.name for t in tasks], flush=True)
    results = {}
    variants = {f"per-task, deciding weight {w:g}": w for w in args.deciding_weight}
    if args.shared:
        variants["shared heads"] = None
    for label, weight in variants.items():
        started = time.time()
        public = shared_selection(tasks) if weight is None else per_task_selection(loaded, tasks, weight)
        results[label] = run_variant(loaded, tasks, public, args.test_queries)
        results[label]["seconds"] = round(time.time() - started, 1)
        print(label, json.dumps(results[label], indent=1), flush=True)
    record = {
        "command": "python " + " ".join(sys.argv),
        "dev_tasks": [t.name for t in tasks],
        "dev_seeds": list(DEV_SEEDS),
        "settings": f"N = 2048, s = 8, ε = 1, δ = 1e-5, {args.test_queries} test queries per task and seed",
        "variants": results,
    }
    write_text_atomically(args.out, json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
