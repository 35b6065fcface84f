"""The demo's runs: per task and seed, every method scored on the embedded model."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console

from dpmtv._progress import progress_bar
from dpmtv.demo.config import DemoConfig, default_config, load_defaults
from dpmtv.demo.recognition import (
    ceiling_record,
    deciding_fields,
    deciding_mask,
    per_task_table,
    run_ceiling,
    task_group,
)
from dpmtv.demo.report import print_summary, summarise_groups, write_outputs
from dpmtv.embedded.generator import Task, get_task, rule_task
from dpmtv.embedded.recognition import Ceiling, demos_with_deciding_cell
from dpmtv.embedded.suite import (
    PUBLIC_SEED,
    few_shot_prompt,
    first_token_correct,
    task_codes,
    task_records,
)
from dpmtv.extract import stack_selected_heads
from dpmtv.heads import HeadSet
from dpmtv.hooks import layer_patches
from dpmtv.models.loading import LoadedModel, load_model
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from dpmtv.pipeline.partition import ChunkPrompts
from dpmtv.pipeline.public_clip import public_clip_norms
from dpmtv.privacy import (
    AdjacencyRelation,
    l2_sensitivity,
    make_sampler,
    partition_replace_one,
    secure_rng,
)
from dpmtv.privacy.release import plan_gaussian_release, release_clipped_mean
from dpmtv.prompts import zero_shot_prompts
from dpmtv.selection import select_public


def run_demo(out: Path, *, quick: bool, console: Console, config: DemoConfig | None = None) -> dict:
    started = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = config or default_config(quick=quick)
    loaded = load_model("embedded")
    tasks = demo_tasks(config)
    num_chunks = config.records_per_task // config.shots_per_chunk
    sampler = make_sampler("opendp")
    releases = {name: _release_for(loaded, task, config, num_chunks, sampler) for name, task in tasks.items()}
    ceilings = {name: run_ceiling(task, config.seeds, config.test_queries) for name, task in tasks.items()}
    rows: list[dict] = []
    shot_rows: list[dict] = []
    with progress_bar("demo: tasks × seeds", len(tasks) * len(config.seeds), enabled=True) as advance:
        for seed in config.seeds:
            for name, task in tasks.items():
                run = _TaskRun(task, seed, ceilings[name], name in config.rules)
                rows += _task_rows(loaded, run, config, releases[name], sampler)
                if seed == config.seeds[0]:  # one seed: the 64-shot prompts dominate the run time
                    shot_rows += _shot_curve_rows(loaded, run, config)
                advance(1)
    first = next(iter(tasks))
    artifact = _write_artifact(loaded, config, tasks[first], releases[first], out)
    recognition = {name: ceiling_record(tasks[name], c) for name, c in ceilings.items()}
    per_task = per_task_table(rows, shot_rows, recognition)
    summary = summarise_groups(rows, config)
    shots = summarise_groups(shot_rows, config)
    seconds = time.perf_counter() - started
    write_outputs(out, rows, summary, shots, config, releases, artifact, seconds, per_task)
    print_summary(console, summary, config, releases, num_chunks, artifact, per_task)
    return {**summary, "per_task": per_task}


def demo_tasks(config: DemoConfig) -> dict[str, Task]:
    """The suite's tasks of ``config`` by name, then its typed rules (named by their text)."""
    tasks = {name: get_task(name) for name in config.tasks}
    tasks.update({text: rule_task(text) for text in config.rules})
    return tasks


@dataclass(frozen=True)
class _TaskRun:
    task: Task
    seed: int
    ceiling: Ceiling
    typed: bool


@dataclass(frozen=True)
class _Release:
    """A task's public release parameters: head set, per-layer clip norms, Δ and σ per ε."""

    heads: HeadSet
    clip_norms: dict[int, float]
    sensitivity: float
    plans: dict


def _release_for(loaded, task: Task, config: DemoConfig, num_chunks: int, sampler) -> _Release:
    """The task's shipped public selection, or for a typed rule the package's public selection
    on a public sample of that rule (no privacy cost: public data only)."""
    defaults = load_defaults()
    per_task = defaults.get("per_task", {})
    if task.name in config.rules:
        heads, clip = public_release(loaded, task, config)
    else:
        chosen = defaults if config.shared_heads or task.name not in per_task else per_task[task.name]
        heads, clip = HeadSet.of(map(tuple, chosen["heads"])), tuple(chosen["l2_clip_norm"])
    clip_norms = dict(zip(heads.layers, clip, strict=True))
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


PUBLIC_HEADS = "public selection (shipped with the embedded model, or on a typed rule's public sample)"
#: A typed rule's public sample: 72 train queries (9 chunks of 8 for the mean) and 24 dev queries;
#: preparing the search caches one prompt prefix per query, minutes for 320 on a loaded machine.
PUBLIC_RECORDS = 96
PUBLIC_DEV_QUERIES = 24
TYPED_RULE_HEADS = 8


def public_release(loaded, task: Task, config: DemoConfig) -> tuple[HeadSet, tuple[float, ...]]:
    """Heads by :func:`dpmtv.selection.select_public` (each head scored alone, the best
    :data:`TYPED_RULE_HEADS` kept, then whole-layer blocks and all heads compete on the public dev
    queries; greedy costs ~k times more and ran past 10 minutes on a loaded 2-core machine) and
    per-layer clip norms (median public chunk norm), all on the rule's PUBLIC sample."""
    public = task_records(task, PUBLIC_RECORDS, seed=PUBLIC_SEED, split="public")
    shots = config.shots_per_chunk
    result = select_public(
        loaded,
        public,
        method="scored",
        shots=shots,
        k=TYPED_RULE_HEADS,
        num_dev=PUBLIC_DEV_QUERIES,
        batch_size=32,
        progress=False,
    )
    clip = public_clip_norms(loaded, public, result.heads, shots_per_chunk=shots, batch_size=32)
    return result.heads, clip


def _task_rows(loaded, run: _TaskRun, config, release: _Release, sampler) -> list[dict]:
    adapter, heads, task, seed = loaded.adapter, release.heads, run.task, run.seed
    private = task_records(task, config.records_per_task, seed=seed, split="private")
    test = task_records(task, config.test_queries, seed=seed, split="test")
    answers = [r.answer for r in test]
    queries = zero_shot_prompts(test)
    mask = deciding_mask(task, run.ceiling, seed, config.test_queries)

    def score(method: str, epsilon: float | None, correct: np.ndarray) -> dict:
        return _row(run, method, epsilon, correct, mask)

    rng = np.random.default_rng([seed, 99])
    picks = [rng.choice(len(private), config.icl_shots, replace=False) for _ in test]
    icl = [few_shot_prompt([private[i] for i in chosen], q) for chosen, q in zip(picks, test, strict=True)]
    icl_row = score(f"icl-{config.icl_shots} (non-private)", None, first_token_correct(adapter, icl, answers))
    private_codes = task_codes(task, config.records_per_task, seed=seed, split="private")
    icl_row["demos_with_deciding_cell"] = demos_with_deciding_cell(
        private_codes[np.stack(picks)], run.ceiling
    )
    out = [score("zero-shot", None, first_token_correct(adapter, queries, answers)), icl_row]
    raw = _chunk_activations(loaded, private, heads, config)  # private per-chunk rows, in memory only
    mtv = {layer: values.mean(0) for layer, values in raw.items()}
    patches = layer_patches(mtv, heads)
    out.append(
        score("mtv (non-private)", None, first_token_correct(adapter, queries, answers, patches=patches))
    )
    num_chunks = len(raw[heads.layers[0]])  # replace-one: every chunk is full, m is public
    for epsilon, plan in release.plans.items():
        noised = release_clipped_mean(
            raw, l2_clip_norms=release.clip_norms, num_chunks=num_chunks, plan=plan, sampler=sampler
        )
        patches = layer_patches(noised.layers, heads)
        out.append(score("dp-mtv", epsilon, first_token_correct(adapter, queries, answers, patches=patches)))
    return out


def _row(run: _TaskRun, method: str, epsilon: float | None, correct: np.ndarray, mask: np.ndarray) -> dict:
    return {
        "method": method,
        "task": run.task.name,
        "group": task_group(run.task, typed=run.typed),
        "held_out": run.task.held_out,
        "epsilon": epsilon,
        "seed": run.seed,
        "accuracy": float(np.mean(correct)),
        **deciding_fields(correct, mask),
    }


def _shot_curve_rows(loaded, run: _TaskRun, config) -> list[dict]:
    """ICL accuracy at each of ``config.shot_curve`` shots on the task's first test queries
    (demonstrations drawn from its private records; non-private references); run for the first
    seed only."""
    task, seed, n = run.task, run.seed, config.shot_curve_queries
    private = task_records(task, config.records_per_task, seed=seed, split="private")
    test = task_records(task, config.test_queries, seed=seed, split="test")[:n]
    mask = deciding_mask(task, run.ceiling, seed, config.test_queries)[:n]
    answers = [r.answer for r in test]
    rng = np.random.default_rng([seed, 98])
    rows = []
    for shots in config.shot_curve:
        prompts = [
            few_shot_prompt([private[i] for i in rng.choice(len(private), shots, replace=False)], q)
            for q in test
        ]
        correct = first_token_correct(loaded.adapter, prompts, answers, batch_size=max(1, 512 // shots))
        rows.append(_row(run, f"icl-{shots} (non-private)", None, correct, mask))
    return rows


def _chunk_activations(
    loaded: LoadedModel, records, heads: HeadSet, config: DemoConfig
) -> dict[int, np.ndarray]:
    partition = partition_replace_one(len(records), shots_per_chunk=config.shots_per_chunk, rng=secure_rng())
    prompts = ChunkPrompts(
        records, partition, shots_per_chunk=config.shots_per_chunk, query="record", query_question=""
    )
    return stack_selected_heads(loaded.adapter, prompts, heads, batch_size=config.batch_size)


def _write_artifact(loaded, config: DemoConfig, task: Task, release: _Release, out: Path) -> Path:
    """The ε = 1 release of one task through the real pipeline (secure noise, atomic write)."""
    settings = BuildSettings(
        epsilon=1.0,
        delta=config.delta,
        l2_clip_norm=tuple(release.clip_norms.values()),
        shots_per_chunk=config.shots_per_chunk,
        batch_size=config.batch_size,
        progress=False,
        head_selection={
            "method": PUBLIC_HEADS,
            "task": task.name,
        },
    )
    records = task_records(task, config.records_per_task, seed=config.seeds[0], split="private")
    path = out / f"task_{re.sub(r'[^A-Za-z0-9_]+', '_', task.name).strip('_')}_eps1.safetensors"
    return build_task_vector(loaded, records, release.heads, settings, out=path).path
