"""Run every method on one benchmark and model: seeds × methods (× ε for the private ones), then
the accuracy-versus-queries curve at a fixed total budget."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from dpmtv._progress import progress_bar
from dpmtv._version import __version__
from dpmtv.errors import ParameterError
from dpmtv.eval import dp_icl
from dpmtv.eval import methods as m
from dpmtv.eval.benchmarks import Benchmark
from dpmtv.eval.dp_icl import RecordedVotes, simulated_accuracy
from dpmtv.eval.scorers import aggregate_scores
from dpmtv.heads import HeadSet, parse_head_spec
from dpmtv.models.loading import LoadedModel
from dpmtv.privacy import validate_epsilon_delta


@dataclass(frozen=True)
class RunResult:
    """One (method, ε, seed) evaluation. ``epsilon`` is None without a budget: zero-shot reads no
    private data; non-private methods have ε = ∞ (``privacy == "non-private"``)."""

    method: str
    display: str
    privacy: str  # "private" | "non-private" | "no private data"
    epsilon: float | None
    seed: int | None
    metrics: dict[str, float]
    details: dict[str, Any]
    predictions: list[str] = field(repr=False)


@dataclass
class EvalResults:
    config: dict[str, Any]
    benchmark: dict[str, Any]
    primary_metric: str
    runs: list[RunResult]
    queries_curve: dict[str, Any] | None
    query_ids: list[str] = field(default_factory=list)


def run_evaluation(
    loaded: LoadedModel,
    benchmark: Benchmark,
    settings: m.EvalSettings,
    *,
    heads: HeadSet | str | None = None,
    model_name: str | None = None,
) -> EvalResults:
    """Evaluate ``settings.methods`` on ``benchmark`` (see :mod:`dpmtv.eval.methods`)."""
    m.check_non_private(settings.methods, allow_non_private=settings.allow_non_private)
    for epsilon in _dp_epsilons(settings):
        validate_epsilon_delta(epsilon=epsilon, delta=settings.delta)
    head_set, head_spec = _heads(loaded, heads, settings)
    ctx = m.MethodContext(
        loaded,
        benchmark,
        settings,
        head_set,
        head_spec,
        lambda d, n: progress_bar(d, n, enabled=settings.progress),
    )
    runs: list[RunResult] = []
    votes: dict[str, dict[int, RecordedVotes]] = {}
    for spec in settings.methods:
        runs += _run_method(ctx, spec, votes)
    return EvalResults(
        config=_config(settings, loaded, benchmark, head_spec, model_name),
        benchmark={**benchmark.describe(), "chance_level": chance_level(benchmark)},
        primary_metric=benchmark.scorer.primary,
        runs=runs,
        queries_curve=_queries_curve(ctx, runs, votes),
        query_ids=[r.record_id for r in benchmark.test],
    )


def chance_level(benchmark: Benchmark) -> float:
    """The primary metric expected from a uniformly random pick among each query's public
    candidate answers (DP-ICL's histogram bins): what a method that always names a known answer
    scores with no signal at all (queries whose metric is undefined are skipped)."""
    means = []
    for record in benchmark.test:
        scores = benchmark.scorer.candidate_scores(record, benchmark.scorer.candidates(record))
        if scores.size and not np.all(np.isnan(scores)):
            means.append(float(np.nanmean(scores)))
    return float(np.mean(means)) if means else float("nan")


def _dp_epsilons(settings: m.EvalSettings) -> list[float]:
    return settings.evaluated_epsilons


def _heads(loaded, heads, settings) -> tuple[HeadSet | None, str | None]:
    needs = any(spec.kind in ("mtv", "dp-mtv") for spec in settings.methods)
    if heads is None:
        if needs:
            raise ParameterError(
                "mtv and dp-mtv need a head set: pass --heads ('all', 'layers:A-B', 'heads:L.H,...', "
                "or a selection saved by `dpmtv select`)"
            )
        return None, None
    if isinstance(heads, HeadSet):
        return heads.check(loaded.adapter.geometry), f"heads:{','.join(f'{a}.{b}' for a, b in heads.pairs)}"
    return parse_head_spec(heads, loaded.adapter.geometry), heads


def _run_method(ctx: m.MethodContext, spec: m.MethodSpec, votes: dict) -> list[RunResult]:
    s = ctx.settings
    if spec.kind == "zero-shot":
        return [_result(ctx, spec, None, None, m.run_zero_shot(ctx))]
    if spec.kind == "icl":
        return [_result(ctx, spec, None, seed, m.run_icl(ctx, spec.shots, seed)) for seed in s.seeds]
    if spec.kind == "mtv":
        return [_result(ctx, spec, None, seed, m.run_mtv(ctx, seed)) for seed in s.seeds]
    out = []
    for seed in s.seeds:
        if spec.kind == "dp-icl":
            recorded = votes.setdefault(spec.label, {})[seed] = dp_icl.collect_dp_icl_votes(
                ctx, spec.shots, seed, spec.prompts
            )
        for epsilon in _dp_epsilons(s):
            output = (
                m.run_dp_mtv(ctx, epsilon, seed)
                if spec.kind == "dp-mtv"
                else dp_icl.run_dp_icl(ctx, recorded, epsilon, seed)
            )
            out.append(_result(ctx, spec, epsilon, seed, output))
    return out


def _result(ctx, spec: m.MethodSpec, epsilon, seed, output: m.MethodOutput) -> RunResult:
    scorer, queries = ctx.benchmark.scorer, ctx.benchmark.test
    metrics = aggregate_scores(scorer.score(r, p) for r, p in zip(queries, output.predictions, strict=True))
    privacy = "private" if spec.private else ("non-private" if spec.non_private else "no private data")
    details = dict(output.details)
    if spec.kind == "dp-mtv":
        details.setdefault("neighbouring_relation", ctx.settings.neighbouring_relation)
    if spec.private and epsilon not in ctx.settings.epsilons:
        details["extra"] = "run for the queries plot only (its total budget)"
    return RunResult(spec.label, spec.display, privacy, epsilon, seed, metrics, details, output.predictions)


def _queries_curve(ctx: m.MethodContext, runs: list[RunResult], votes: dict) -> dict[str, Any] | None:
    """Accuracy vs number of answered queries Q at total ε: DP-MTV flat (answers are free after
    the one release); DP-ICL at the per-query σ that Q queries allow (with the subsampling
    amplification for ``dp-icl:S:M``), simulated on the votes recorded for the evaluated queries
    (taken as a sample of the query distribution)."""
    s, primary = ctx.settings, ctx.benchmark.scorer.primary
    grid = sorted(set(s.queries_grid))
    curve: dict[str, Any] = {"total_epsilon": s.queries_epsilon, "delta": s.delta, "num_queries": grid}
    curve["dp-mtv"] = {
        str(r.seed): r.metrics.get(primary)
        for r in runs
        if r.method == "dp-mtv" and r.epsilon == s.queries_epsilon
    }
    curve["dp_icl_noise_std"], curve["dp_icl_relation"], curve["dp-icl"] = {}, {}, {}
    total = len(grid) * sum(len(per_seed) for per_seed in votes.values())
    with ctx.progress("queries curve (simulated votes)", total) as advance:
        for label, per_seed in votes.items():
            first = next(iter(per_seed.values()))
            sigmas = [
                dp_icl.per_query_noise_std(s.queries_epsilon, s.delta, q, first.sampling_probability)
                for q in grid
            ]
            curve["dp_icl_noise_std"][label], curve["dp_icl_relation"][label] = sigmas, first.relation
            curve["dp-icl"][label] = {
                str(seed): [_simulate(recorded, ctx, sigma, seed, advance) for sigma in sigmas]
                for seed, recorded in per_seed.items()
            }
    curve["dp_mtv_relation"] = s.neighbouring_relation
    return curve


def _simulate(recorded, ctx, sigma, seed, advance) -> float:
    value = simulated_accuracy(
        recorded, ctx.benchmark, noise_std=sigma, repeats=ctx.settings.queries_repeats, seed=seed
    )
    advance(1)
    return value


def _config(settings, loaded, benchmark, head_spec, model_name) -> dict[str, Any]:
    return {
        **settings.to_json(),
        "epsilons_evaluated": _dp_epsilons(settings),
        "model": model_name or loaded.name_or_path,
        "benchmark": benchmark.name,
        "heads": head_spec,
        "prompt_format": "the model's chat template; the same question text for every method",
        "dpmtv_version": __version__,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
