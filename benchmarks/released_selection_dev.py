"""DEV prototype (issue 28): choose the heads AFTER the release, on the released vector.

Today's private choice scores every candidate head set by patching each chunk's OWN one-chunk
mean into that set on the chunk's own last record (256 utilities in [0, 1] at N = 2048, s = 8):
a weak signal for what the 256-chunk mean will do, and the exponential mechanism at ε_sel = 0.3
cannot separate 105 candidates on it (dev: noisy 0.649, exact argmax 0.730, public 0.787).

Here instead:
1. release the whole pool once (Gaussian, per-layer C over every pool layer), composed with
2. one exponential-mechanism choice among the public candidates whose utility is, for EVERY
   private record r, the probability of r's answer when the RELEASED vector (post-processing:
   public once released) is patched into the candidate's heads on r's zero-shot question.
   Given the release, record r enters only its own term in [0, 1]: L∞ = 1 under replace-one
   (and add-remove-one), with N terms instead of m: 8x the signal mass at s = 8;
3. the artifact is the released vector on the chosen heads (post-processing).

Adaptive composition (Gaussian, then EM(ε_sel) given its output) is what dp-accounting composes:
the Gaussian is calibrated with the EM's DiscreteLaplaceDpEvent(ε_sel, 1) as a fixed event.
This script is a prototype measured on the dev set of benchmarks/private_dev.py (trained tables
outside the suite, seeds 100+) with the shared generic per-layer C given, beside today's default
candidate choice with the same C and the public heads and C. Its EM draw uses numpy's Gumbel (a
prototype, not a release).

Usage: .venv/bin/python benchmarks/released_selection_dev.py --out /tmp/released_selection_dev.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch
from dp_accounting.dp_event import DiscreteLaplaceDpEvent

from dpmtv.candidate_lists import candidate_head_sets
from dpmtv.data.prompts import zero_shot_prompts
from dpmtv.embedded.generator import get_task
from dpmtv.embedded.suite import first_token_correct, task_records
from dpmtv.forward.hooks import layer_patches
from dpmtv.heads import HeadSet
from dpmtv.models.loading import load_model
from dpmtv.pipeline.build import BuildSettings, PrivateSelectionSettings, build_task_vector
from dpmtv.privacy.calibrate import calibrate_gaussian_noise_multiplier
from dpmtv.privacy.events import epsilon_of, gaussian_release_event
from dpmtv.selection.released import pool_values, record_utilities

sys.path.insert(0, str(Path(__file__).parent))
from private_dev import DEV_SEEDS, dev_public_defaults, dev_task_names  # noqa: E402

DELTA = 1e-5
# the default before the choice on the release: candidates by chunk utilities (noisy-probability), 0.3 ε
TODAY_SELECTION = PrivateSelectionSettings(
    k=8, method="candidates", utility="noisy-probability", selection_fraction=0.3, candidates="layer-groups"
)


def equivalent_epsilon(epsilon: float, selection_epsilon: float) -> float:
    """The ε of the Gaussian alone whose multiplier the composition (Gaussian + EM(ε_sel)) at
    (ε, δ) calibrates: a plain build at this ε draws that σ."""
    multiplier = calibrate_gaussian_noise_multiplier(
        epsilon=epsilon, delta=DELTA, fixed_events=[DiscreteLaplaceDpEvent(selection_epsilon, 1)]
    )
    return epsilon_of(gaussian_release_event(noise_multiplier=multiplier), delta=DELTA)


def patched_accuracy(adapter, queries, answers, vector, heads: HeadSet) -> float:
    """Test accuracy with the released pool ``vector``'s rows of ``heads`` patched in."""
    keep = [i for i, pair in enumerate(vector.heads.pairs) if pair in set(heads.pairs)]
    rows = vector.values[keep]
    per_layer = {
        layer: rows[[j for j, i in enumerate(keep) if vector.heads.pairs[i][0] == layer]]
        for layer in heads.layers
    }
    patches = layer_patches(per_layer, heads)
    return float(first_token_correct(adapter, queries, answers, patches=patches).mean())


def run(loaded, name: str, seed: int, args, defaults: dict, rng: np.random.Generator) -> list[dict]:
    adapter, geometry = loaded.adapter, loaded.adapter.geometry
    task = get_task(name)
    private = task_records(task, args.records, seed=seed, split="private")
    test = task_records(task, args.test_queries, seed=seed, split="test")
    answers, queries = [r.answer for r in test], zero_shot_prompts(test)
    chosen = defaults["per_task"][name]
    generic_c = tuple(defaults["l2_clip_norm"])
    pool = HeadSet.of((ly, h) for ly in range(geometry.num_layers) for h in range(geometry.num_heads))
    candidates = candidate_head_sets("layer-groups", pool)

    def settings(epsilon, clip, selection=None):
        return BuildSettings(
            epsilon=epsilon, delta=DELTA, l2_clip_norm=clip, shots_per_chunk=args.shots,
            progress=False, private_selection=selection,
        )  # fmt: skip

    rows = []

    def row(variant, accuracy, **extra):
        rows.append({"task": name, "seed": seed, "variant": variant, "accuracy": accuracy, **extra})

    row("zero-shot", float(first_token_correct(adapter, queries, answers).mean()))
    public_heads = HeadSet.of(map(tuple, chosen["heads"]))
    public = build_task_vector(
        loaded, private, public_heads, settings(args.epsilon, tuple(chosen["l2_clip_norm"]))
    )
    row("public heads, public C", patched_accuracy(adapter, queries, answers, public.vector, public_heads))
    built = build_task_vector(loaded, private, None, settings(args.epsilon, generic_c, TODAY_SELECTION))
    row(
        "today: candidates by chunk utilities 0.3ε, given C",
        patched_accuracy(adapter, queries, answers, built.vector, built.vector.heads),
        heads=len(built.vector.heads.pairs),
    )
    for eps_sel in args.selection_epsilons:
        release_eps = equivalent_epsilon(args.epsilon, eps_sel) if eps_sel > 0 else args.epsilon
        released = build_task_vector(loaded, private, pool, settings(release_eps, generic_c)).vector
        if eps_sel == 0:
            row(
                "whole pool released, no selection",
                patched_accuracy(adapter, queries, answers, released, pool),
            )
            continue
        started = time.perf_counter()
        values = pool_values(released.values, released.heads, adapter)
        utilities = record_utilities(adapter, private, values, candidates)  # the package's scorer
        totals = utilities.sum(axis=0)
        seconds = time.perf_counter() - started
        exact = candidates[int(np.argmax(totals))]
        noisy = candidates[int(np.argmax(totals + rng.gumbel(scale=2.0 / eps_sel, size=len(totals))))]
        gap = float(np.sort(totals)[-1] - np.sort(totals)[-2])
        tag = f"released pool, record utilities {eps_sel:g}ε, given C"
        row(tag + " [exact argmax]", patched_accuracy(adapter, queries, answers, released, exact),
            heads=len(exact.pairs), release_epsilon=release_eps)  # fmt: skip
        row(tag, patched_accuracy(adapter, queries, answers, released, noisy), heads=len(noisy.pairs),
            release_epsilon=release_eps, top_gap=gap, utility_seconds=round(seconds, 1))  # fmt: skip
    return rows


def summarise(rows: list[dict]) -> dict:
    out = {}
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant]
        out[variant] = round(float(np.mean([r["accuracy"] for r in mine])), 4)
    base = out["public heads, public C"]
    return {v: {"accuracy": a, "ratio_to_public": round(a / base, 4)} for v, a in out.items()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", default=None)
    p.add_argument("--seeds", default=",".join(map(str, DEV_SEEDS)))
    p.add_argument("--records", type=int, default=2048)
    p.add_argument("--shots", type=int, default=8)
    p.add_argument("--test-queries", type=int, default=64)
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--selection-epsilons", type=float, nargs="*", default=[0.0, 0.05, 0.1, 0.2])
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    loaded = load_model("embedded")
    defaults = dev_public_defaults(loaded)
    rng = np.random.default_rng(12345)
    started, rows = time.perf_counter(), []
    for name in args.tasks.split(",") if args.tasks else dev_task_names():
        for seed in map(int, args.seeds.split(",")):
            rows += run(loaded, name, seed, args, defaults, rng)
            record = {
                "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
                "seconds": round(time.perf_counter() - started, 1),
                "summary": summarise(rows),
                "rows": rows,
            }
            args.out.write_text(json.dumps(record, indent=2) + "\n")
            print(name, seed, json.dumps(record["summary"]), flush=True)


if __name__ == "__main__":
    main()
