"""The demo's runs: per task and seed, ``dpmtv eval``'s methods on the embedded benchmark.

Each (task, seed) is one :func:`~dpmtv.eval.benchmarks.embedded.embedded_benchmark` (the task's
private records as the pool, its test queries, the recognition ceiling pooled over the run's
seeds) evaluated by :func:`dpmtv.eval.runner.run_evaluation` with zero-shot, ``icl:16``, ``mtv``
and ``dp-mtv`` (the real :func:`~dpmtv.pipeline.build.build_task_vector` at every ε from one
extraction, seeded as every evaluation is), answers of one greedy token; the shot curve is
``icl:K`` on the first seed's first test queries. Only the ε = 1 artifact is a real release
(secure noise). This module turns eval's runs into the demo's rows.
"""

from __future__ import annotations

import re
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from dpmtv._progress import progress_bar
from dpmtv.demo.config import DemoConfig, chunk_tokens, default_config, eval_settings
from dpmtv.demo.parallel import collect, resolve_demo_workers, submit_runs
from dpmtv.demo.recognition import per_task_table, run_ceiling
from dpmtv.demo.report import print_summary, summarise_groups, write_outputs
from dpmtv.embedded import bayes
from dpmtv.embedded.generator import Task, get_task, rule_task
from dpmtv.embedded.recognition import Ceiling
from dpmtv.embedded.suite import PUBLIC_SEED, task_records
from dpmtv.eval.benchmarks import Benchmark
from dpmtv.eval.benchmarks.embedded import (
    embedded_benchmark,
    public_selection,
    recognition_record,
    task_group,
)
from dpmtv.eval.runner import RunResult, run_evaluation
from dpmtv.heads import HeadSet
from dpmtv.models.loading import load_model
from dpmtv.pipeline.build import BuildSettings, build_task_vector
from dpmtv.pipeline.public_clip import public_clip_norms
from dpmtv.selection import select_public


def run_demo(
    out: Path, *, quick: bool, console: Console, config: DemoConfig | None = None, workers: int | None = None
) -> dict:
    """Run the demo and write its outputs to ``out``; the (task, seed) runs in ``workers``
    processes (None: one per core, :func:`dpmtv.demo.parallel.resolve_demo_workers`; the rows
    are the same for any number)."""
    started = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = config or default_config(quick=quick)
    loaded = load_model("embedded")
    tasks = demo_tasks(config)
    public = {name: _public_selection(loaded, task, config) for name, task in tasks.items()}
    ceilings = {name: run_ceiling(task, config.seeds, config.test_queries) for name, task in tasks.items()}
    units = [(seed, name) for seed in config.seeds for name in tasks]
    workers = resolve_demo_workers(workers, len(units))
    first = next(iter(tasks))
    with progress_bar("demo: tasks × seeds", len(units), enabled=True) as advance:
        if workers == 1:
            state = _DemoState(loaded, tasks, config, public, ceilings)
            artifact = _write_artifact(loaded, config, tasks[first], public[first], out)
            results = []
            for unit in units:
                results.append(_run_unit(state, unit))
                advance(1)
        else:
            pool, futures = submit_runs(
                "dpmtv.demo.runs:_worker_state", (config, public, ceilings), _run_unit, units, workers=workers
            )
            try:
                artifact = _write_artifact(loaded, config, tasks[first], public[first], out)  # meanwhile
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)  # the error now, not after every run
                raise
            results = collect(pool, futures, advance)
    rows = [row for task_rows, _, _ in results for row in task_rows]
    shot_rows = [row for _, _, unit_shots in results for row in unit_shots]
    releases: dict[str, dict] = {}
    for (_, name), (_, release, _) in zip(units, results, strict=True):
        releases.setdefault(name, release)
    recognition = {name: recognition_record(tasks[name], c) for name, c in ceilings.items()}
    references = [row for row in rows if row["method"] in bayes.LEARNERS]  # from the ICL runs' facts
    rows = [row for row in rows if row["method"] not in bayes.LEARNERS]
    per_task = per_task_table(rows + references, shot_rows, recognition)
    summary = summarise_groups(rows, config)
    reference_summary = summarise_groups(references, config)
    shots = summarise_groups(shot_rows, config)
    seconds = time.perf_counter() - started
    write_outputs(out, rows, summary, shots, config, releases, artifact, seconds, per_task, reference_summary)
    num_chunks = config.records_per_task // config.shots_per_chunk
    print_summary(
        console, summary, config, releases, num_chunks, artifact, per_task, reference_summary, out=out
    )
    return {**summary, "per_task": per_task, "references": reference_summary}


@dataclass(frozen=True)
class _DemoState:
    """What every (task, seed) run reads: the model, the tasks, the config, the public
    selections and the recognition ceilings (pooled over the run's seeds, computed once)."""

    loaded: Any
    tasks: dict[str, Task]
    config: DemoConfig
    public: dict[str, tuple[HeadSet, tuple[float, ...]]]
    ceilings: dict[str, Ceiling]


def _worker_state(config: DemoConfig, public: dict, ceilings: dict) -> _DemoState:
    return _DemoState(load_model("embedded"), demo_tasks(config), config, public, ceilings)


def _run_unit(state: _DemoState, unit: tuple[int, str]) -> tuple[list[dict], dict, list[dict]]:
    """One (seed, task): its rows, its release and, for the first seed, its shot-curve rows."""
    seed, name = unit
    config, task = state.config, state.tasks[name]
    run = _TaskRun(task, seed, state.ceilings[name], name in config.rules, *state.public[name])
    benchmark = _benchmark(run, config)
    task_rows, release = _task_rows(state.loaded, run, benchmark, config)
    # one seed for the shot curve: the 64-shot prompts dominate the run time
    shot_rows = _shot_curve_rows(state.loaded, run, benchmark, config) if seed == config.seeds[0] else []
    return task_rows, release, shot_rows


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
    heads: HeadSet
    clip: tuple[float, ...]  # per released layer


def _public_selection(loaded, task: Task, config: DemoConfig) -> tuple[HeadSet, tuple[float, ...]]:
    """The task's shipped public selection (or the shared set), or for a typed rule the package's
    public selection on a public sample of that rule (no privacy cost: public data only)."""
    if task.name in config.rules:
        return public_release(loaded, task, config)
    heads, clip = public_selection(task.name, shared=config.shared_heads)
    return HeadSet.of(map(tuple, heads)), clip


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
        progress=True,  # public data: minutes on a loaded machine, not silent
    )
    clip = public_clip_norms(loaded, public, result.heads, shots_per_chunk=shots, batch_size=32)
    return result.heads, clip


def _benchmark(run: _TaskRun, config: DemoConfig) -> Benchmark:
    sizes = {"num_train": config.records_per_task, "num_test": config.test_queries}
    return embedded_benchmark(run.task, seed=run.seed, ceiling=run.ceiling, typed=run.typed, **sizes)


def _evaluate(loaded, benchmark: Benchmark, run: _TaskRun, settings) -> list[RunResult]:
    with warnings.catch_warnings():  # the build's weak-signal notes are in each run's details
        warnings.filterwarnings("ignore", message="the noise swamps the signal")
        return run_evaluation(loaded, benchmark, settings, heads=run.heads, model_name="embedded").runs


def _task_rows(loaded, run: _TaskRun, benchmark: Benchmark, config: DemoConfig) -> tuple[list[dict], dict]:
    """The rows of zero-shot, ICL, MTV and DP-MTV at every ε (then the Bayes learners' rows from the
    ICL run's demonstration facts), and the task's release (public)."""
    methods = ("zero-shot", f"icl:{config.icl_shots}", "mtv", "dp-mtv")
    tokens = chunk_tokens(loaded.adapter, run.task, config.shots_per_chunk)
    settings = eval_settings(
        config, methods, run.seed, run.clip, batch_size=config.batch_size, chunk_tokens=tokens
    )
    runs = _evaluate(loaded, benchmark, run, settings)
    rows, references = [], []
    for result in runs:
        row = _row(run, benchmark, result)
        for learner, scores in result.details.get("demonstration_references", {}).items():
            references.append({**row, "method": learner, **scores})
        if "demos_with_deciding_cell" in result.details:
            row["demos_with_deciding_cell"] = result.details["demos_with_deciding_cell"]
        rows.append(row)
    dp = [r for r in runs if r.method == "dp-mtv"]
    release = {
        "heads": run.heads.to_json(),
        "l2_clip_norm": list(run.clip),
        "l2_sensitivity": dp[0].details["l2_sensitivity"],
        "noise_std": {str(float(r.epsilon)): r.details["noise_std"] for r in dp},
    }
    return rows + references, release


def demo_method(label: str) -> str:
    """The demo's name of an eval method: ``icl:16`` → ``icl-16 (non-private)``, ``mtv`` →
    ``mtv (non-private)``; zero-shot and dp-mtv keep theirs."""
    if label.startswith("icl:"):
        return f"icl-{label.removeprefix('icl:')} (non-private)"
    return "mtv (non-private)" if label == "mtv" else label


def _row(run: _TaskRun, benchmark: Benchmark, result: RunResult) -> dict:
    deciding = getattr(benchmark.scorer, "deciding_ids", frozenset())
    return {
        "method": demo_method(result.method),
        "task": run.task.name,
        "group": task_group(run.task, typed=run.typed),
        "held_out": run.task.held_out,
        "epsilon": result.epsilon,
        "seed": run.seed,
        "accuracy": result.metrics["accuracy"],
        "deciding_accuracy": result.metrics.get("deciding_accuracy"),
        "deciding_count": sum(r.record_id in deciding for r in benchmark.test),
    }


def _shot_curve_rows(loaded, run: _TaskRun, full: Benchmark, config: DemoConfig) -> list[dict]:
    """ICL accuracy at each of ``config.shot_curve`` shots on the task's first test queries
    (demonstrations drawn from its private records; non-private references); run for the first
    seed only, with fewer prompts per pass the more shots they hold."""
    benchmark = replace(full, test=full.test[: config.shot_curve_queries])
    rows = []
    for shots in config.shot_curve:
        settings = eval_settings(
            config, (f"icl:{shots}",), run.seed, run.clip, batch_size=max(1, 512 // shots)
        )
        rows += [_row(run, benchmark, r) for r in _evaluate(loaded, benchmark, run, settings)]
    return rows


def _write_artifact(loaded, config: DemoConfig, task: Task, public, out: Path) -> Path:
    """The ε = 1 release of one task through the real pipeline (secure noise, atomic write)."""
    heads, clip = public
    settings = BuildSettings(
        epsilon=1.0,
        delta=config.delta,
        l2_clip_norm=tuple(clip),
        shots_per_chunk=config.shots_per_chunk,
        batch_size=config.batch_size,
        progress=False,
        # the public chunk length as the token budget, as eval's builds: fixed-shape passes of
        # several chunks instead of one pass per chunk (about 3x faster; secure noise either way)
        max_prompt_tokens=chunk_tokens(loaded.adapter, task, config.shots_per_chunk),
        head_selection={
            "method": PUBLIC_HEADS,
            "task": task.name,
        },
    )
    records = task_records(task, config.records_per_task, seed=config.seeds[0], split="private")
    path = out / f"task_{re.sub(r'[^A-Za-z0-9_]+', '_', task.name).strip('_')}_eps1.safetensors"
    return build_task_vector(loaded, records, heads, settings, out=path).path
