"""The demo's measure of what recognition cannot explain (:mod:`dpmtv.embedded.recognition`).

Per task: the recognition ceiling on the task's test queries pooled over the run's seeds (one
ceiling and one set of deciding cells per task), then for every method the accuracy on the test
queries in deciding cells and their count (the embedded benchmark's ``deciding_accuracy``,
:mod:`dpmtv.eval.benchmarks.embedded`). Group summaries pool deciding-cell queries over tasks
(correct / count per seed, then mean ± 95% t-interval over seeds), so a task with one deciding
query weighs one query, not one task.
"""

from __future__ import annotations

import numpy as np

from dpmtv.embedded.generator import Task
from dpmtv.embedded.recognition import Ceiling, recognition_ceiling
from dpmtv.embedded.suite import task_codes
from dpmtv.embedded.world import combo_index
from dpmtv.eval.benchmarks.embedded import GROUP_TITLES, task_group
from dpmtv.eval.methods import icl_demonstrations
from dpmtv.eval.stats import t_interval

__all__ = [
    "GROUP_TITLES",
    "icl_cells",
    "per_task_table",
    "run_ceiling",
    "summarise_deciding",
    "task_group",
]


def run_ceiling(task: Task, seeds, test_queries: int) -> Ceiling:
    """The task's ceiling on its test queries of every seed of the run, pooled."""
    codes = np.concatenate([task_codes(task, test_queries, seed=s, split="test") for s in seeds])
    return recognition_ceiling(task, codes)


def icl_cells(
    task: Task, seed: int, num_train: int, num_test: int, shots: int
) -> tuple[np.ndarray, np.ndarray]:
    """The attribute combinations (rows of ``ALL_CODES``) behind ``icl:shots`` at ``seed``: the
    demonstrations of each test query ``(num_test, shots)`` and the test queries ``(num_test,)``."""
    train_rows = combo_index(task_codes(task, num_train, seed=seed, split="private"))
    test_rows = combo_index(task_codes(task, num_test, seed=seed, split="test"))
    picks = icl_demonstrations(num_train, num_test, shots, seed)
    return np.stack([train_rows[p] for p in picks]), test_rows


def summarise_deciding(rows: list[dict], seeds) -> dict:
    """Pooled deciding-cell accuracy of ``rows`` (one method, one group): per seed correct/count
    over tasks, then mean ± 95% t-interval over the seeds that have deciding queries."""
    per_seed, total = [], 0
    for seed in seeds:
        chosen = [r for r in rows if r["seed"] == seed and r["deciding_count"]]
        count = sum(r["deciding_count"] for r in chosen)
        total += count
        if count:
            per_seed.append(sum(r["deciding_accuracy"] * r["deciding_count"] for r in chosen) / count)
    if not per_seed:
        return {"deciding_accuracy": None, "deciding_ci95": None, "deciding_count": 0}
    mean, half_width = t_interval(per_seed)
    return {"deciding_accuracy": mean, "deciding_ci95": half_width, "deciding_count": total}


def per_task_table(rows: list[dict], shot_rows: list[dict], ceilings: dict[str, dict]) -> dict[str, dict]:
    """Per task: its group and ceiling record, the share of ICL prompts whose demonstrations hold a
    deciding cell, and per method (``method``, ``method@ε``, ``curve:method`` for the shot curve's
    queries) the mean accuracy over seeds and the pooled deciding-cell accuracy and count."""
    curve = [{**r, "method": "curve:" + r["method"]} for r in shot_rows]
    out = {}
    for name, record in ceilings.items():
        task_rows = [r for r in (*rows, *curve) if r["task"] == name]
        methods: dict[str, dict] = {}
        for key in dict.fromkeys(_key(r) for r in task_rows):
            chosen = [r for r in task_rows if _key(r) == key]
            count = sum(r["deciding_count"] for r in chosen)
            hits = sum((r["deciding_accuracy"] or 0.0) * r["deciding_count"] for r in chosen)
            methods[key] = {
                "accuracy": float(np.mean([r["accuracy"] for r in chosen])),
                "deciding_accuracy": hits / count if count else None,
                "deciding_count": count,
            }
        shares = [r["demos_with_deciding_cell"] for r in task_rows if "demos_with_deciding_cell" in r]
        share = float(np.mean(shares)) if shares else None
        group = task_rows[0]["group"] if task_rows else None
        out[name] = {"group": group, **record, "icl_prompts_with_deciding_demo": share, "methods": methods}
    return out


def _key(row: dict) -> str:
    return row["method"] if row["epsilon"] is None else f"{row['method']}@{row['epsilon']:g}"
