"""DEV only: what the exponential mechanism's factor 1 (instead of 2) under add-remove-one changes
in the choice on the release (``--heads-from private``, candidates, ``released-probability``).

Per dev task and seed (benchmarks/private_dev.py: trained tables outside the evaluation suite,
seeds 100+; never the held-out tasks or the demo's seeds), under add-remove-one with public
``m = N / s``:

1. release the whole pool once, as the build does (Gaussian with the shared generic per-layer C,
   calibrated with the choice's ``DiscreteLaplaceDpEvent(ε_sel, 1)`` as a fixed event; the event,
   hence the release, is the same before and after);
2. score every public candidate on every private record with the released vector (the package's
   scorer, :func:`dpmtv.selection.released.record_utilities`): totals ``U``;
3. the test accuracy of every candidate that either factor chooses with probability > 1e-4, and
   the EXACT expected accuracy of the choice, ``Σ_S P[S]·acc(S)``, with ``P ∝ exp(ε_sel·U/2)``
   (before) and ``P ∝ exp(ε_sel·U)`` (after): no sampling noise in the comparison, one release.

Usage: .venv/bin/python benchmarks/released_factor_dev.py --out benchmarks/results/released_factor_dev.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.special import logsumexp

from dpmtv.candidate_lists import candidate_head_sets
from dpmtv.data.prompts import zero_shot_prompts
from dpmtv.embedded.generator import get_task
from dpmtv.embedded.suite import task_records
from dpmtv.heads import HeadSet
from dpmtv.models.loading import load_model
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from dpmtv.privacy.noisy_top_k import DEFAULT_RELEASED_SELECTION_FRACTION, noisy_top_k_scale
from dpmtv.selection.released import pool_values, record_utilities

sys.path.insert(0, str(Path(__file__).parent))
from private_dev import DEV_SEEDS, dev_public_defaults, dev_task_names  # noqa: E402
from released_selection_dev import DELTA, equivalent_epsilon, patched_accuracy  # noqa: E402


def choice_probabilities(totals: np.ndarray, epsilon_selection: float, *, monotone: bool) -> np.ndarray:
    scale = noisy_top_k_scale(epsilon=epsilon_selection, k=1, monotone=monotone)
    return np.exp(totals / scale - logsumexp(totals / scale))


def run(loaded, name: str, seed: int, args, generic_c: tuple[float, ...]) -> dict:
    adapter, geometry = loaded.adapter, loaded.adapter.geometry
    task = get_task(name)
    # add-remove-one assigns chunks by a keyed hash of each record's id: give every record a stable one
    private = [
        replace(r, record_id=f"{name}-{seed}-{i}", has_explicit_id=True)
        for i, r in enumerate(task_records(task, args.records, seed=seed, split="private"))
    ]
    test = task_records(task, args.test_queries, seed=seed, split="test")
    answers, queries = [r.answer for r in test], zero_shot_prompts(test)
    pool = HeadSet.of((ly, h) for ly in range(geometry.num_layers) for h in range(geometry.num_heads))
    candidates = candidate_head_sets("layer-groups", pool)
    eps_sel = args.fraction * args.epsilon
    settings = BuildSettings(
        epsilon=equivalent_epsilon(args.epsilon, eps_sel), delta=DELTA, l2_clip_norm=generic_c,
        shots_per_chunk=args.shots, neighbouring_relation="add-remove-one",
        num_chunks=args.records // args.shots, progress=False,
    )  # fmt: skip
    started = time.perf_counter()
    released = build_task_vector(loaded, private, pool, settings).vector
    values = pool_values(released.values, released.heads, adapter)
    totals = record_utilities(adapter, private, values, candidates).sum(axis=0)
    probabilities = {factor: choice_probabilities(totals, eps_sel, monotone=factor == 1) for factor in (2, 1)}
    likely = sorted({i for p in probabilities.values() for i in np.flatnonzero(p > 1e-4)})
    accuracy = {i: patched_accuracy(adapter, queries, answers, released, candidates[i]) for i in likely}
    expected = {
        f"factor {factor}": float(sum(p[i] * accuracy[i] for i in likely) / p[likely].sum())
        for factor, p in probabilities.items()
    }
    best = int(np.argmax(totals))
    return {
        "task": name,
        "seed": seed,
        **expected,
        "exact argmax": accuracy.get(
            best, patched_accuracy(adapter, queries, answers, released, candidates[best])
        ),
        "top_gap": float(np.sort(totals)[-1] - np.sort(totals)[-2]),
        "p_argmax": {f"factor {f}": float(p[best]) for f, p in probabilities.items()},
        "candidates_scored": len(likely),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tasks", default=None, help="default: every dev task")
    p.add_argument("--seeds", default=",".join(map(str, DEV_SEEDS)))
    p.add_argument("--records", type=int, default=2048)
    p.add_argument("--shots", type=int, default=8)
    p.add_argument("--test-queries", type=int, default=64)
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--fraction", type=float, default=DEFAULT_RELEASED_SELECTION_FRACTION)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    loaded = load_model("embedded")
    generic_c = tuple(dev_public_defaults(loaded)["l2_clip_norm"])
    tasks = args.tasks.split(",") if args.tasks else dev_task_names()
    rows, started = [], time.perf_counter()
    for name in tasks:
        for seed in (int(s) for s in args.seeds.split(",")):
            rows.append(run(loaded, name, seed, args, generic_c))
            print(json.dumps(rows[-1]), flush=True)
            summary = {
                key: round(float(np.mean([r[key] for r in rows])), 4)
                for key in ("factor 2", "factor 1", "exact argmax")
            }
            result = {
                "command": shlex.join([sys.executable, *sys.argv]),
                "args": {k: str(v) for k, v in vars(args).items()},
                "note": "DEV tasks and seeds only; expected accuracy of the choice, exact over its "
                "distribution given one release per (task, seed); CPU, machine shared and loaded",
                "seconds": round(time.perf_counter() - started, 1),
                "summary": summary,
                "rows": rows,
            }
            args.out.write_text(json.dumps(result, indent=1) + "\n")  # after every row: partial runs count


if __name__ == "__main__":
    main()
