"""The DEV set of the private-only study (issue 28): every choice of the private path (the clip
round's ε share, grid and score; the private head-selection variant and its ε share) is made on
these tasks and seeds, never on the evaluation suite's held-out tasks or the demo's seeds.

- Tasks: trained (seen) predicate tables of the embedded rule space that are NOT in the
  evaluation suite (:func:`dpmtv.embedded.generator.task_suite`, seen or held out, nor their
  complements): one task per distinct table of the training pools, ``DEV_TASKS_PER_GROUP`` drawn
  per group by the fixed public seed ``DEV_TASK_SEED``.
- Seeds: ``DEV_SEEDS`` (100+) for the private records and test queries; the demo uses 0, 1, 2.
- Public heads and C per dev task: ``scripts/select_embedded_heads.py``'s own public selection
  (greedy, prefixes vs layer blocks scored at ε = 1) on the task's public sample (``PUBLIC_SEED``),
  computed once and cached in ``benchmarks/results/private_only_dev_public.json``.

Usage: .venv/bin/python benchmarks/private_dev.py   (prints the tasks; writes the cache)
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

from dpmtv.embedded.episodes import training_pools
from dpmtv.embedded.generator import task_suite
from dpmtv.embedded.rulespace import canonical

DEV_TASK_SEED = 20_261_228  # public, fixed before any dev number was seen
DEV_SEEDS = (100, 101)
DEV_TASKS_PER_GROUP = {"single": 2, "composition": 3, "xor": 2, "triple": 3}
CACHE = Path(__file__).parent / "results" / "private_only_dev_public.json"


def dev_task_names() -> list[str]:
    """10 trained predicate tasks outside the evaluation suite, by the fixed public seed."""
    suite = {canonical(t.truth) for t in task_suite() if t.is_predicate}
    rng = np.random.default_rng(DEV_TASK_SEED)
    names: list[str] = []
    pools = training_pools()
    for group, count in DEV_TASKS_PER_GROUP.items():
        pool = sorted(t.name for t in pools[group] if canonical(t.truth) not in suite)
        names += [pool[int(i)] for i in rng.choice(len(pool), count, replace=False)]
    return names


def selection_script():
    path = Path(__file__).resolve().parent.parent / "scripts" / "select_embedded_heads.py"
    spec = importlib.util.spec_from_file_location("select_embedded_heads", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def dev_public_defaults(loaded) -> dict:
    """``{"per_task": {name: {"heads", "l2_clip_norm"}}, "l2_clip_norm"}`` for the dev tasks, as the
    shipped defaults have them for the suite: the script's public selection on each task's public
    sample, and the shipped shared generic per-layer C (selected on the suite's seen tasks)."""
    names = dev_task_names()
    cached = json.loads(CACHE.read_text()) if CACHE.exists() else {"per_task": {}}
    missing = [n for n in names if n not in cached["per_task"]]
    if missing:
        from dpmtv.embedded.generator import get_task
        from dpmtv.embedded.suite import PUBLIC_SEED

        script = selection_script()
        adapter, rng = loaded.adapter, np.random.default_rng(PUBLIC_SEED)
        for name in missing:
            task = get_task(name)
            chosen = script.select_for_task(
                adapter, task, PUBLIC_SEED, rng, deciding_weight=script.DECIDING_WEIGHT
            )
            cached["per_task"][name] = {k: chosen[k] for k in ("heads", "l2_clip_norm")}
            CACHE.parent.mkdir(parents=True, exist_ok=True)
            tmp = CACHE.with_suffix(".tmp")
            tmp.write_text(json.dumps(cached, indent=2) + "\n")
            tmp.replace(CACHE)
    from dpmtv.demo.config import load_defaults

    return cached | {"l2_clip_norm": load_defaults()["l2_clip_norm"]}


if __name__ == "__main__":
    import torch

    from dpmtv.models.loading import load_model

    torch.set_num_threads(1)
    print(dev_task_names())
    out = dev_public_defaults(load_model("embedded"))
    for name in dev_task_names():
        print(name, len(out["per_task"][name]["heads"]), out["per_task"][name]["l2_clip_norm"])
