"""The parts of ``benchmarks/selection_comparison.py`` that touch the model and the library: every
head's last-token rows, public clip norms, the clipped-and-noised release, the public selections
(once per task) and the cross-check of one configuration against ``build_task_vector``."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

from dpmtv.embedded.suite import task_records
from dpmtv.forward.extract import stack_selected_heads
from dpmtv.heads import HeadSet
from dpmtv.pipeline.build import BuildSettings, PrivateSelectionSettings, build_task_vector
from dpmtv.privacy import AdjacencyRelation, l2_sensitivity
from dpmtv.privacy.noisy_top_k import plan_private_selection
from dpmtv.privacy.release import plan_gaussian_release, release_clipped_mean
from dpmtv.selection import select_public

sys.path.insert(0, str(Path(__file__).resolve().parent))
from selection_comparison_report import DELTA, PRIVATE_K  # noqa: E402


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def all_heads(geometry) -> HeadSet:
    return HeadSet.of((layer, h) for layer in range(geometry.num_layers) for h in range(geometry.num_heads))


def head_rows(adapter, prompts, batch_size) -> np.ndarray:
    """Every head's last-token output per prompt: (B, L, H, d) float64."""
    g = adapter.geometry
    out = stack_selected_heads(adapter, prompts, all_heads(g), batch_size=batch_size)
    return np.stack(
        [out[layer].reshape(len(prompts), g.num_heads, g.head_dim) for layer in range(g.num_layers)], 1
    )


def layer_blocks(rows: np.ndarray, heads: HeadSet) -> dict[int, np.ndarray]:
    """(B, L, H, d) → {layer: (B, k_l·d)} in the head set's order (as ``extract_selected_heads``)."""
    return {layer: rows[:, layer, heads.heads_in(layer)].reshape(len(rows), -1) for layer in heads.layers}


def public_clip_norms(public_rows: np.ndarray, heads: HeadSet) -> dict[int, float]:
    """Per layer: the median L2 norm of the heads' public chunk vectors (shipped-defaults rule)."""
    return {
        layer: float(np.median(np.linalg.norm(v, axis=1)))
        for layer, v in layer_blocks(public_rows, heads).items()
    }


def private_release(raw, heads, clip_norms, num_chunks, plan, sampler) -> dict[int, np.ndarray]:
    """Clip per layer, sum, divide by the public m, one Gaussian draw (the build's release)."""
    noised = release_clipped_mean(
        layer_blocks(raw, heads),
        l2_clip_norms={ly: clip_norms[ly] for ly in heads.layers},
        num_chunks=num_chunks,
        plan=plan,
        sampler=sampler,
    )
    return dict(noised.layers)


class Plans:
    """Release plans cached by (Δ, ε, with-selection): each calibration takes about a second."""

    def __init__(self, sampler):
        self.sampler, self.cache, self.seconds = sampler, {}, 0.0

    def get(self, sensitivity: float, epsilon: float, selection_plan=None):
        key = (sensitivity, epsilon, selection_plan is not None)
        if key not in self.cache:
            started = time.perf_counter()
            self.cache[key] = plan_gaussian_release(
                l2_sensitivity=sensitivity,
                epsilon=epsilon,
                delta=DELTA,
                sampler=self.sampler,
                fixed_events=selection_plan.fixed_events if selection_plan is not None else (),
            )
            self.seconds += time.perf_counter() - started
        return self.cache[key]


def describe(heads: HeadSet) -> dict:
    return {
        "count": len(heads),
        "layers": heads.layers,
        "per_layer": {str(layer): len(heads.heads_in(layer)) for layer in heads.layers},
        "heads": heads.to_json(),
    }


def public_selections(loaded, public, args) -> tuple[dict[str, HeadSet], dict[str, dict]]:
    """The three public searches; returns the head sets (refined and raw) and their records."""
    sets, info = {}, {}
    runs = [("reinforce", {"steps": args.reinforce_steps}), ("greedy", {}), ("scored", None)]
    greedy_count = None
    for method, extra in runs:
        if method == "scored":
            extra = {"k": greedy_count}
        started = time.perf_counter()
        result = select_public(
            loaded, public, method=method, shots=args.shots, seed=0, progress=False, **extra
        )
        wall = time.perf_counter() - started
        raw = raw_heads(result, method)
        if method == "greedy":
            greedy_count = len(raw)
        letter = {"reinforce": "a", "greedy": "b", "scored": "c"}[method]
        sets[f"{letter}-{method}"], sets[f"{letter}-{method}-raw"] = result.heads, raw
        info[method] = {
            "seconds": wall,
            "library_seconds": result.seconds,
            "method": result.method,
            "chosen_by_best_of": result.chosen,
            "dev_logprob": result.dev_metric,
            "dev_logprob_of_candidates": result.candidates,
            "parameters": {k: v for k, v in result.details.items() if k not in ("final_draws",)},
            "heads": describe(result.heads),
            "raw_heads": describe(raw),
        }
        if result.probabilities is not None:
            info[method]["learned_probabilities"] = result.probabilities
        log(
            f"  {method}: {wall:.1f}s, own set {len(raw)} heads, after best-of {result.chosen} "
            f"({len(result.heads)} heads, layers {result.heads.layers})"
        )
    return sets, info


def raw_heads(result, method: str) -> HeadSet:
    """The search's own set, before the best-of contest with layer blocks."""
    if method == "greedy":
        return HeadSet.of((int(ly), int(h)) for ly, h, _ in result.scores)
    if method == "scored":
        k = result.details["k"]
        ranked = sorted(result.scores, key=lambda r: -r[2])[:k]
        return HeadSet.of((int(ly), int(h)) for ly, h, _ in ranked)
    draws = result.details["final_draws"]
    name = result.details["search_chosen"]
    return HeadSet.of(map(tuple, draws[int(name.split("-")[1])]))


def cross_check(loaded, task, args, ctx) -> dict:
    records = task_records(task, args.records, seed=0, split="private")
    m = args.records // args.shots
    out = {}
    name = "b-greedy"
    heads, clip = ctx["public_sets"][name], ctx["clip_norms"][name]
    settings = BuildSettings(
        epsilon=1.0,
        delta=DELTA,
        l2_clip_norm=tuple(clip[ly] for ly in heads.layers),
        shots_per_chunk=args.shots,
        batch_size=args.batch_size,
        progress=False,
    )
    built = build_task_vector(loaded, records, heads, settings).vector.metadata.privacy
    sens = l2_sensitivity(
        l2_clip_norms=[clip[ly] for ly in heads.layers],
        num_chunks=m,
        relation=AdjacencyRelation.REPLACE_ONE,
    )
    mine = ctx["plans"].get(sens, 1.0)
    out["public_greedy_eps1"] = {
        "build_noise_std": built.noise_std,
        "benchmark_noise_std": mine.noise_std,
        "build_epsilon_spent": built.epsilon_spent,
        "benchmark_epsilon_spent": mine.epsilon_spent,
    }
    pool_layers = ctx["private_pool"].layers
    settings = BuildSettings(
        epsilon=1.0,
        delta=DELTA,
        l2_clip_norm=tuple(ctx["private_clip"][ly] for ly in pool_layers),
        shots_per_chunk=args.shots,
        batch_size=args.batch_size,
        progress=False,
        private_selection=PrivateSelectionSettings(
            k=PRIVATE_K, selection_fraction=args.selection_fraction, pool=ctx["private_pool_spec"]
        ),
    )
    built = build_task_vector(loaded, records, None, settings).vector.metadata.privacy
    sel_plan = plan_private_selection(
        total_epsilon=1.0, total_delta=DELTA, k=PRIVATE_K, selection_fraction=args.selection_fraction
    )
    mine = ctx["plans"].get(ctx["private_sensitivity"], 1.0, sel_plan)
    out["private_selection_eps1"] = {
        "build_noise_std": built.noise_std,
        "benchmark_noise_std": mine.noise_std,
        "build_epsilon_spent": built.epsilon_spent,
        "benchmark_epsilon_spent": mine.epsilon_spent,
        "build_l2_sensitivity": built.l2_sensitivity,
        "benchmark_l2_sensitivity": ctx["private_sensitivity"],
    }
    out["agree"] = all(
        math.isclose(v["build_noise_std"], v["benchmark_noise_std"], rel_tol=1e-9) for v in out.values()
    )
    return out
