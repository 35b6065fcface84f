"""The demo's runs: per task and seed, every method scored on the embedded model."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console

from dpmtv._progress import progress_bar
from dpmtv.demo.config import DemoConfig, default_config, load_defaults
from dpmtv.demo.report import print_summary, summarise_groups, write_outputs
from dpmtv.embedded.generator import get_task
from dpmtv.embedded.suite import few_shot_prompt, first_token_correct, task_records, zero_shot_prompts
from dpmtv.extract import stack_selected_heads
from dpmtv.heads import HeadSet
from dpmtv.hooks import layer_patches
from dpmtv.models.loading import LoadedModel, load_model
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from dpmtv.pipeline.partition import ChunkPrompts
from dpmtv.privacy import (
    AdjacencyRelation,
    l2_sensitivity,
    make_sampler,
    partition_replace_one,
    secure_rng,
)
from dpmtv.privacy.release import plan_gaussian_release, release_clipped_mean


def run_demo(out: Path, *, quick: bool, console: Console, config: DemoConfig | None = None) -> dict:
    started = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = config or default_config(quick=quick)
    loaded = load_model("embedded")
    defaults = load_defaults()
    num_chunks = config.records_per_task // config.shots_per_chunk
    sampler = make_sampler("opendp")
    releases = {name: _release_setup(defaults, name, config, num_chunks, sampler) for name in config.tasks}
    rows: list[dict] = []
    shot_rows: list[dict] = []
    steps = len(config.tasks) * len(config.seeds)
    with progress_bar("demo: tasks × seeds", steps, enabled=True) as advance:
        for seed in config.seeds:
            for name in config.tasks:
                task = get_task(name)
                rows += _task_rows(loaded, task, seed, config, releases[name], sampler)
                if seed == config.seeds[0]:  # one seed: the 64-shot prompts dominate the run time
                    shot_rows += _shot_curve_rows(loaded, task, seed, config)
                advance(1)
    artifact = _write_artifact(loaded, config, releases[config.tasks[0]], out)
    summary = summarise_groups(rows, config)
    shots = summarise_groups(shot_rows, config)
    write_outputs(out, rows, summary, shots, config, releases, artifact, time.perf_counter() - started)
    print_summary(console, summary, config, releases, num_chunks, artifact)
    return summary


@dataclass(frozen=True)
class _Release:
    """A task's public release parameters: head set, per-layer clip norms, Δ and σ per ε."""

    heads: HeadSet
    clip_norms: dict[int, float]
    sensitivity: float
    plans: dict


def _release_setup(defaults: dict, task: str, config: DemoConfig, num_chunks: int, sampler) -> _Release:
    per_task = defaults.get("per_task", {})
    chosen = defaults if config.shared_heads or task not in per_task else per_task[task]
    heads = HeadSet.of(map(tuple, chosen["heads"]))
    clip_norms = dict(zip(heads.layers, chosen["l2_clip_norm"], strict=True))
    sensitivity = l2_sensitivity(
        l2_clip_norms=list(clip_norms.values()),
        num_chunks=num_chunks,
        relation=AdjacencyRelation.REPLACE_ONE,
    )
    plans = {
        eps: plan_gaussian_release(
            l2_sensitivity=sensitivity, epsilon=eps, delta=config.delta, sampler=sampler
        )
        for eps in config.epsilons
    }
    return _Release(heads, clip_norms, sensitivity, plans)


def _task_rows(loaded, task, seed, config, release: _Release, sampler) -> list[dict]:
    adapter, heads = loaded.adapter, release.heads
    private = task_records(task, config.records_per_task, seed=seed, split="private")
    test = task_records(task, config.test_queries, seed=seed, split="test")
    answers = [r.answer for r in test]
    queries = zero_shot_prompts(test)

    def score(method: str, epsilon: float | None, correct: np.ndarray) -> dict:
        return _row(task, seed, method, epsilon, correct)

    rng = np.random.default_rng([seed, 99])
    icl = [
        few_shot_prompt([private[i] for i in rng.choice(len(private), config.icl_shots, replace=False)], q)
        for q in test
    ]
    out = [
        score("zero-shot", None, first_token_correct(adapter, queries, answers)),
        score(f"icl-{config.icl_shots} (non-private)", None, first_token_correct(adapter, icl, answers)),
    ]
    raw = _chunk_activations(loaded, private, heads, config)  # private per-chunk rows, in memory only
    mtv = {layer: values.mean(0) for layer, values in raw.items()}
    out.append(
        score(
            "mtv (non-private)",
            None,
            first_token_correct(adapter, queries, answers, patches=layer_patches(mtv, heads)),
        )
    )
    num_chunks = len(raw[heads.layers[0]])  # replace-one: every chunk is full, m is public
    for epsilon, plan in release.plans.items():
        noised = release_clipped_mean(
            raw, l2_clip_norms=release.clip_norms, num_chunks=num_chunks, plan=plan, sampler=sampler
        )
        patches = layer_patches(noised.layers, heads)
        out.append(score("dp-mtv", epsilon, first_token_correct(adapter, queries, answers, patches=patches)))
    return out


def _row(task, seed: int, method: str, epsilon: float | None, correct: np.ndarray) -> dict:
    return {
        "method": method,
        "task": task.name,
        "held_out": task.held_out,
        "epsilon": epsilon,
        "seed": seed,
        "accuracy": float(np.mean(correct)),
    }


def _shot_curve_rows(loaded, task, seed, config) -> list[dict]:
    """ICL accuracy at each of ``config.shot_curve`` shots on the task's first test queries
    (demonstrations drawn from its private records; non-private references); run for the first
    seed only."""
    private = task_records(task, config.records_per_task, seed=seed, split="private")
    test = task_records(task, config.test_queries, seed=seed, split="test")[: config.shot_curve_queries]
    answers = [r.answer for r in test]
    rng = np.random.default_rng([seed, 98])
    rows = []
    for shots in config.shot_curve:
        prompts = [
            few_shot_prompt([private[i] for i in rng.choice(len(private), shots, replace=False)], q)
            for q in test
        ]
        correct = first_token_correct(loaded.adapter, prompts, answers, batch_size=max(1, 512 // shots))
        rows.append(_row(task, seed, f"icl-{shots} (non-private)", None, correct))
    return rows


def _chunk_activations(
    loaded: LoadedModel, records, heads: HeadSet, config: DemoConfig
) -> dict[int, np.ndarray]:
    partition = partition_replace_one(len(records), shots_per_chunk=config.shots_per_chunk, rng=secure_rng())
    prompts = ChunkPrompts(
        records, partition, shots_per_chunk=config.shots_per_chunk, query="record", query_question=""
    )
    return stack_selected_heads(loaded.adapter, prompts, heads, batch_size=config.batch_size)


def _write_artifact(loaded, config: DemoConfig, release: _Release, out: Path) -> Path:
    """The ε = 1 release of one task through the real pipeline (secure noise, atomic write)."""
    task = get_task(config.tasks[0])
    settings = BuildSettings(
        epsilon=1.0,
        delta=config.delta,
        l2_clip_norm=tuple(release.clip_norms.values()),
        shots_per_chunk=config.shots_per_chunk,
        batch_size=config.batch_size,
        progress=False,
        head_selection={"method": "public selection shipped with the embedded model", "task": task.name},
    )
    records = task_records(task, config.records_per_task, seed=config.seeds[0], split="private")
    path = out / f"task_{task.name}_eps1.safetensors"
    return build_task_vector(loaded, records, release.heads, settings, out=path).path
