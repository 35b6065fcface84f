"""Select the embedded model's default head sets and clip norms on PUBLIC data (no privacy cost).

Run once over the suite's *seen* tasks (the shared, generic set: for a held-out task these are
heads chosen on other tasks) and once per task, label maps included (the paper's public variant:
the task's own small public sample — 32 chunks of 8 = 256 examples for the mean, 24 dev and 48
validation queries, 328 examples in all, generated from a seed disjoint from every private and
test split). Each run: greedy forward selection (add the head whose patching most raises the
mean log-probability of the correct first answer token over the tasks' public dev queries, each
task patched with its own public mean); then the greedy prefixes compete with blocks of whole
layers and all heads on a separate public validation set.
Candidates are scored as they will be used: the public mean, clipped and noised as DP-MTV at
ε = 1 would be for the demo's configuration (N = 2048, s = 8), averaged over a few noise draws —
fewer heads mean less noise per coordinate, so the noiseless winner is not always the private
one. Both scores are recorded. The per-layer L2 clip norm is the median norm of the selected
heads' public chunk vectors. With ``--deciding-weight W`` > 0, up to 24 more public dev and
validation queries in the task's deciding cells carry W of every score (0: chosen on the dev set
of ``benchmarks/embedded_selection_dev.py``, where it traded all-query for deciding-cell accuracy).

Writes ``dpmtv_defaults.json`` into the checkpoint folder; it ships with the model.
Usage: python scripts/select_embedded_heads.py [--checkpoint DIR] [--seed 1000003] [--deciding-weight 0]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from rich.progress import track

from dpmtv.data.prompts import chunk_prompt, zero_shot_prompts
from dpmtv.embedded import checkpoint_path
from dpmtv.embedded.generator import task_suite
from dpmtv.embedded.recognition import recognition_ceiling
from dpmtv.embedded.suite import (
    PUBLIC_SEED,
    first_token_correct,
    task_codes,
    task_records,
)
from dpmtv.forward.extract import extract_selected_heads
from dpmtv.forward.hooks import blend_heads_per_row, layer_patches
from dpmtv.heads import HeadSet
from dpmtv.models.loading import load_model

SHOTS, PUBLIC_CHUNKS, DEV_QUERIES, VAL_QUERIES = 8, 32, 24, 48
DECIDING_QUERIES = 24  # extra public dev and val queries each, in the task's deciding cells
DECIDING_WEIGHT = 0.0  # chosen on the dev tasks of benchmarks/embedded_selection_dev.py
DECIDING_POOL = 4096  # public queries drawn to find the deciding cells and those queries
DEMO_CHUNKS = 2048 // SHOTS
SIGMA_AT_EPS1 = 4.05  # noise multiplier at (1, 1e-5) with the OpenDP sampler's own map (≥ 3.73)
NOISE_DRAWS = 3
PREFIXES = (2, 4, 6, 8, 10, 12, 16)


def public_chunk_rows(adapter, task, seed) -> np.ndarray:
    """Per public chunk, every head's last-token output: (chunks, L, H, d)."""
    geometry = adapter.geometry
    every = HeadSet.of(
        (layer_, h) for layer_ in range(geometry.num_layers) for h in range(geometry.num_heads)
    )
    records = task_records(task, PUBLIC_CHUNKS * SHOTS, seed=seed, split="public")
    prompts = [
        chunk_prompt(records[i : i + SHOTS], query="record", query_question="")
        for i in range(0, len(records), SHOTS)
    ]
    rows = []
    for start in range(0, len(prompts), 32):
        out = extract_selected_heads(adapter, prompts[start : start + 32], every)
        rows.append(
            np.stack(
                [
                    out[layer_].reshape(-1, geometry.num_heads, geometry.head_dim)
                    for layer_ in range(geometry.num_layers)
                ],
                1,
            )
        )
    return np.concatenate(rows)


@dataclass(frozen=True)
class Queries:
    """Public queries of one task and their weights in a score (summing to 1)."""

    records: list
    weights: np.ndarray


def public_queries(task, seed: int, split: str, count: int, deciding_weight: float) -> Queries:
    """``count`` public queries of ``split``, plus, with ``deciding_weight`` > 0, up to
    :data:`DECIDING_QUERIES` public queries in the task's deciding cells (where the closest
    trained table answers wrong, found on a large public sample of the query distribution) that
    carry ``deciding_weight`` of the score: there the demonstrations, not recognition, must
    decide (issue 24, item 3). Tasks without deciding cells (trained ones) keep uniform weights."""
    records = task_records(task, count, seed=seed, split=split)
    weights = np.full(count, 1.0 / count)
    if deciding_weight <= 0:
        return Queries(records, weights)
    codes = task_codes(task, DECIDING_POOL, seed=seed, split="public-deciding")
    ceiling = recognition_ceiling(task, codes)
    picked = np.flatnonzero(ceiling.deciding_queries)
    half = 0 if split == "public-dev" else 1  # disjoint dev and val queries from the one pool
    picked = picked[half::2][:DECIDING_QUERIES]
    if len(picked) == 0:
        return Queries(records, weights)
    pool = task_records(task, DECIDING_POOL, seed=seed, split="public-deciding")
    extra = [pool[i] for i in picked]
    weights = np.concatenate(
        [weights * (1 - deciding_weight), np.full(len(extra), deciding_weight / len(extra))]
    )
    return Queries(records + extra, weights)


def candidate_scores(adapter, mean, queries: Queries, candidates: list[torch.Tensor]) -> np.ndarray:
    """Weighted mean log-prob of the correct first token per candidate mask (L, H), one batch."""
    weights = torch.from_numpy(queries.weights).float()
    queries = queries.records
    inputs = adapter.encode(zero_shot_prompts(queries))
    answers = torch.tensor(adapter.tokenizer.convert_tokens_to_ids([r.answer for r in queries]))
    n, q = len(candidates), len(queries)
    batch = {key: value.repeat(n, *([1] * (value.ndim - 1))) for key, value in inputs.items()}
    masks = torch.stack(candidates).repeat_interleave(q, 0).float()  # (n*q, L, H)
    values = {layer: torch.from_numpy(mean[layer]).float() for layer in range(mean.shape[0])}
    with torch.no_grad(), blend_heads_per_row(adapter, values, masks):
        logprobs = adapter.model(**batch).logits[:, -1].log_softmax(-1)
    correct = logprobs[torch.arange(n * q), answers.repeat(n)]
    return (correct.reshape(n, q) @ weights).numpy()


def greedy(adapter, means, dev) -> tuple[list[tuple[int, int]], list[float]]:
    geometry = adapter.geometry
    chosen: list[tuple[int, int]] = []
    trace = [
        float(
            np.mean(
                [
                    candidate_scores(
                        adapter,
                        means[t],
                        dev[t],
                        [torch.zeros(geometry.num_layers, geometry.num_heads, dtype=torch.bool)],
                    )[0]
                    for t in means
                ]
            )
        )
    ]
    while True:
        pool = [
            (layer_, h)
            for layer_ in range(geometry.num_layers)
            for h in range(geometry.num_heads)
            if (layer_, h) not in chosen
        ]
        if not pool:
            break
        masks = [_mask(geometry, chosen + [pair]) for pair in pool]
        scores = np.mean([candidate_scores(adapter, means[t], dev[t], masks) for t in means], axis=0)
        best = int(np.argmax(scores))
        if scores[best] <= trace[-1]:
            break
        chosen.append(pool[best])
        trace.append(float(scores[best]))
    return chosen, trace


def _mask(geometry, pairs) -> torch.Tensor:
    mask = torch.zeros(geometry.num_layers, geometry.num_heads, dtype=torch.bool)
    for layer, head in pairs:
        mask[layer, head] = True
    return mask


def clip_norms_for(rows, heads: HeadSet) -> dict[int, float]:
    """Per layer: the median L2 norm of the selected heads' public chunk vectors."""
    norms = {}
    for layer in heads.layers:
        selected = np.concatenate(
            [r[:, layer, heads.heads_in(layer)].reshape(len(r), -1) for r in rows.values()]
        )
        norms[layer] = float(np.median(np.linalg.norm(selected, axis=1)))
    return norms


def noisy_means(rows, heads: HeadSet, rng) -> dict[str, np.ndarray]:
    """Each task's public mean as DP-MTV at ε = 1 would release it (N = 2048, s = 8: m = 256)."""
    clip = clip_norms_for(rows, heads)
    sigma = 2 * np.sqrt(sum(c**2 for c in clip.values())) / DEMO_CHUNKS * SIGMA_AT_EPS1
    out = {}
    for task, r in rows.items():
        noisy = r.mean(0).copy()  # (L, H, d); the public mean of clipped rows ≈ mean for this use
        for layer in heads.layers:
            block = r[:, layer, heads.heads_in(layer)].reshape(len(r), -1)
            scale = np.minimum(1.0, clip[layer] / np.linalg.norm(block, axis=1, keepdims=True))
            mean = (block * scale).mean(0) + rng.normal(0, sigma, block.shape[1])
            noisy[layer, heads.heads_in(layer)] = mean.reshape(len(heads.heads_in(layer)), -1)
        out[task] = noisy
    return out


def validation_accuracy(adapter, means, val, pairs) -> float:
    heads = HeadSet.of(pairs)
    accuracies = []
    for task, queries in val.items():
        patches = layer_patches({ly: means[task][ly][heads.heads_in(ly)] for ly in heads.layers}, heads)
        records = queries.records
        correct = first_token_correct(
            adapter, zero_shot_prompts(records), [r.answer for r in records], patches=patches
        )
        accuracies.append(float(correct @ queries.weights))
    return float(np.mean(accuracies))


def select(adapter, rows, dev, val, rng) -> dict:
    """Greedy on ``dev``, then greedy prefixes and layer blocks scored on ``val`` at ε = 1."""
    geometry = adapter.geometry
    means = {name: r.mean(0) for name, r in rows.items()}  # (L, H, d)
    greedy_heads, trace = greedy(adapter, means, dev)
    candidates = {f"greedy-{k}": greedy_heads[:k] for k in PREFIXES if k < len(greedy_heads)}
    if greedy_heads:
        candidates[f"greedy-{len(greedy_heads)}"] = greedy_heads
    for width in range(1, geometry.num_layers + 1):
        for first in range(geometry.num_layers - width + 1):
            name = "all" if width == geometry.num_layers else f"layers:{first}-{first + width - 1}"
            candidates[name] = [
                (layer, h) for layer in range(first, first + width) for h in range(geometry.num_heads)
            ]
    noiseless, private = {}, {}
    for name, pairs in candidates.items():
        heads = HeadSet.of(pairs)
        noiseless[name] = validation_accuracy(adapter, means, val, pairs)
        draws = [
            validation_accuracy(adapter, noisy_means(rows, heads, rng), val, pairs)
            for _ in range(NOISE_DRAWS)
        ]
        private[name] = float(np.mean(draws))
    winner = max(private, key=private.get)
    heads = HeadSet.of(candidates[winner])
    clip = clip_norms_for(rows, heads)
    print(f"{'/'.join(rows)[:40]}: {winner} ({len(heads)} heads), ε=1 {private[winner]:.3f}", flush=True)
    report = {
        "winner": winner,
        "greedy_heads": [list(p) for p in greedy_heads],
        "greedy_mean_logprob": trace,
        "validation_accuracy_noiseless": noiseless,
        "validation_accuracy_at_eps1": private,
    }
    return {
        "heads": heads.to_json(),
        "l2_clip_norm": [clip[layer] for layer in heads.layers],
        "report": report,
    }


def task_inputs(adapter, task, seed: int, deciding_weight: float):
    """One task's public chunk rows, dev queries and validation queries."""
    dev = public_queries(task, seed, "public-dev", DEV_QUERIES, deciding_weight)
    val = public_queries(task, seed, "public-val", VAL_QUERIES, deciding_weight)
    return public_chunk_rows(adapter, task, seed), dev, val


def select_for_task(adapter, task, seed: int, rng, *, deciding_weight: float) -> dict:
    """The public per-task selection of one task (heads, clip norms, report)."""
    rows, dev, val = task_inputs(adapter, task, seed, deciding_weight)
    return select(adapter, {task.name: rows}, {task.name: dev}, {task.name: val}, rng)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", type=Path, default=checkpoint_path())
    parser.add_argument("--seed", type=int, default=PUBLIC_SEED)
    parser.add_argument(
        "--deciding-weight",
        type=float,
        default=DECIDING_WEIGHT,
        help="share of each score carried by public queries in the task's deciding cells",
    )
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    torch.manual_seed(0)
    started = time.time()
    loaded = load_model(args.checkpoint)
    adapter = loaded.adapter
    tasks = task_suite(label_maps=True)
    seen = [t for t in tasks if not t.held_out]
    inputs = {
        t.name: task_inputs(adapter, t, args.seed, args.deciding_weight)
        for t in track(seen, description="public means")
    }
    rng = np.random.default_rng(args.seed)
    shared = select(adapter, *({n: x[i] for n, x in inputs.items()} for i in range(3)), rng)
    per_task = {
        task.name: select_for_task(adapter, task, args.seed, rng, deciding_weight=args.deciding_weight)
        for task in track(tasks, description="per-task selection")
    }
    defaults = {
        "heads": shared["heads"],
        "l2_clip_norm": shared["l2_clip_norm"],
        "per_task": {name: {k: r[k] for k in ("heads", "l2_clip_norm")} for name, r in per_task.items()},
        "shots_per_chunk": SHOTS,
        # One-word answers then <eos>: patching the decode steps too makes the model repeat the
        # answer, so inference patches the prompt only.
        "patch_mode": "prefill-only",
        "selection": {
            "method": "greedy forward selection; prefixes vs layer blocks, scored at ε=1; once over the "
            "seen tasks (the shared, generic 'heads') and once per task on its own public sample "
            "('per_task')",
            "shared_selected_on": [t.name for t in seen],
            "deciding_weight": args.deciding_weight,
            "deciding_queries_per_split": DECIDING_QUERIES,
            "data": "public: generated from a seed disjoint from every experiment seed",
            "public_seed": args.seed,
            "public_chunks_per_task": PUBLIC_CHUNKS,
            "dev_queries_per_task": DEV_QUERIES,
            "val_queries_per_task": VAL_QUERIES,
            "public_examples_per_task": PUBLIC_CHUNKS * SHOTS + DEV_QUERIES + VAL_QUERIES,
            "noise_draws": NOISE_DRAWS,
            "clip_norm": "median L2 norm of the selected heads' public chunk vectors, per layer",
            "shared": shared["report"],
            "per_task": {name: r["report"] for name, r in per_task.items()},
            "seconds": round(time.time() - started, 1),
            "command": f"python scripts/select_embedded_heads.py --deciding-weight {args.deciding_weight:g}",
        },
    }
    out = args.checkpoint / "dpmtv_defaults.json"
    out.write_text(json.dumps(defaults, indent=2) + "\n")
    print(
        f"shared: {shared['report']['winner']}; per task: "
        + ", ".join(f"{n} {r['report']['winner']}" for n, r in per_task.items())
        + f"; wrote {out}"
    )


if __name__ == "__main__":
    main()
