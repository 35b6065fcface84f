"""Write an evaluation: ``results.json``, ``report.md``, ``predictions.jsonl`` and the two plots.

Means over seeds carry a 95% Student-t interval: ``mean ± t_{0.975, n−1} · s / √n`` with the
sample standard deviation ``s`` (n − 1 in the denominator); no interval for a single run.
Non-private methods are labelled NON-PRIVATE (ε = ∞) in every output.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from dpmtv._atomic import replacing, write_text_atomically
from dpmtv.eval._markdown import markdown_table
from dpmtv.eval.benchmarks.embedded import demonstration_lines, recognition_lines
from dpmtv.eval.plots import plot_privacy_utility, plot_queries
from dpmtv.eval.runner import EvalResults, RunResult
from dpmtv.eval.stats import t_interval


def summarise(results: EvalResults) -> list[dict[str, Any]]:
    """One row per (method, ε, metric): mean, 95% CI and the number of runs."""
    groups: dict[tuple, list[RunResult]] = {}
    for run in results.runs:
        groups.setdefault((run.method, run.epsilon), []).append(run)
    rows = []
    for (method, epsilon), runs in groups.items():
        for metric in sorted({k for r in runs for k in r.metrics}):
            mean, half = t_interval([r.metrics.get(metric) for r in runs])
            rows.append(
                {
                    "method": method,
                    "display": runs[0].display,
                    "privacy": runs[0].privacy,
                    "neighbouring_relation": runs[0].details.get("neighbouring_relation"),
                    "epsilon": epsilon,
                    "metric": metric,
                    "mean": mean,
                    "ci95_half_width": half,
                    "num_runs": len(runs),
                    "seeds": [r.seed for r in runs],
                }
            )
    return rows


def write_report(results: EvalResults, out: str | Path) -> dict[str, Path]:
    """Write every output into ``out`` (created); returns their paths by name."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarise(results)
    paths = {
        "results": out / "results.json",
        "report": out / "report.md",
        "predictions": out / "predictions.jsonl",
        "privacy_utility": out / "privacy_utility.png",
        "queries": out / "queries.png",
    }
    results_json = json.dumps(_results_json(results, summary), indent=2, allow_nan=False)
    write_text_atomically(paths["results"], results_json + "\n")
    write_text_atomically(paths["report"], markdown_report(results, summary))
    _write_predictions(results, paths["predictions"])
    plot_privacy_utility(results, summary, paths["privacy_utility"])
    plot_queries(results, summary, paths["queries"])
    return paths


def _results_json(results: EvalResults, summary: list[dict]) -> dict[str, Any]:
    runs = [
        {
            "method": r.method,
            "display": r.display,
            "privacy": r.privacy,
            "epsilon": r.epsilon,
            "epsilon_label": _epsilon_label(r),
            "delta": results.config["delta"] if r.privacy == "private" else None,
            "neighbouring_relation": r.details.get("neighbouring_relation"),
            "seed": r.seed,
            "metrics": r.metrics,
            "details": r.details,
        }
        for r in results.runs
    ]
    return _json_safe(
        {
            "config": results.config,
            "benchmark": results.benchmark,
            "primary_metric": results.primary_metric,
            "runs": runs,
            "summary": summary,
            "queries_curve": results.queries_curve,
        }
    )


def _json_safe(value: Any) -> Any:
    """JSON has no NaN/∞: non-finite floats become null (ε = ∞ is spelled out in labels)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _epsilon_label(run: RunResult) -> str:
    if run.privacy == "non-private":
        return "∞ (NON-PRIVATE)"
    if run.privacy == "no private data":
        return "n/a (no private data)"
    return f"{run.epsilon:g}"


def _write_predictions(results: EvalResults, path: Path) -> None:
    with replacing(path) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        for run in results.runs:
            ids = results.query_ids or [str(i) for i in range(len(run.predictions))]
            for query_id, prediction in zip(ids, run.predictions, strict=True):
                row = {"method": run.method, "privacy": run.privacy, "epsilon": _epsilon_label(run)}
                row.update({"seed": run.seed, "query": query_id, "prediction": prediction})
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")


# ---- markdown --------------------------------------------------------------------------------
def markdown_report(results: EvalResults, summary: list[dict]) -> str:
    c, b = results.config, results.benchmark
    lines = [
        f"# dpmtv eval: {b['name']} on {c['model']}",
        "",
        f"{b['num_train']} demonstrations (private pool), {b['num_test']} queries; seeds "
        f"{list(c['seeds'])}; δ = {c['delta']:g}; heads {c['heads']}; dpmtv {c['dpmtv_version']}.",
        f"Scoring: {b.get('scoring', 'see the benchmark')}.",
        f"Each cell: the metric over the {b['num_test']} queries, averaged over the seeds with a 95% "
        "t-interval (no interval from one seed). NON-PRIVATE rows read the private pool without "
        "noise (ε = ∞). Noise and partitions are seeded: these are experiments, not private releases.",
        *_chance_lines(results),
        "",
        *recognition_lines(b),
        *demonstration_lines(results.runs),
    ]
    for metric in b["metrics"]:
        lines += _metric_table(results, summary, metric, chance=_chance(results, metric))
    lines += choice_scores_table(results.runs, results.primary_metric)
    lines += _notes(results)
    lines += _queries_table(results)
    return "\n".join(lines) + "\n"


def choice_scores_table(runs: list[RunResult], primary: str) -> list[str]:
    """Per run, accuracy from the answers' probabilities (and AUROC, ECE on two-way tasks)
    beside the generated answers' accuracy; empty without a closed answer set."""
    scored = [run for run in runs if "choice_scores" in run.details]
    if not scored:
        return []
    lines = [
        "## Scores over the closed answer set",
        "",
        "Each answer's probability under the method's vector, normalised over the answers "
        "(post-processing of the vector: no privacy cost). ECE: 10 equal-width bins.",
        "",
        f"| method | ε | seed | {primary} (generated) | accuracy (scores) | AUROC | ECE |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in scored:
        s = run.details["choice_scores"]
        cells = [s["score_accuracy"], s.get("auroc", math.nan), s.get("ece", math.nan)]
        shown = " | ".join("n/a" if math.isnan(v) else f"{v:.3f}" for v in cells)
        generated = run.metrics.get(primary, math.nan)
        lines.append(
            f"| {run.display} | {_epsilon_label(run)} | {run.seed if run.seed is not None else '-'} | "
            f"{generated:.3f} | {shown} |"
        )
    return [*lines, ""]


def _cell(row: dict | None) -> str:
    if row is None or row["mean"] is None or math.isnan(row["mean"]):
        return ""
    if row["ci95_half_width"] is None:  # one run: no interval to give
        runs = row["num_runs"]
        return f"{row['mean']:.3f} ({runs} seed{'s' if runs != 1 else ''}, no interval)"
    return f"{row['mean']:.3f} ± {row['ci95_half_width']:.3f}"


def _chance(results: EvalResults, metric: str) -> float | None:
    """The chance level of the primary metric (the only one it is defined for)."""
    chance = results.benchmark.get("chance_level")
    if metric != results.primary_metric or chance is None or math.isnan(chance):
        return None
    return chance


def at_chance(row: dict, chance: float | None) -> bool:
    """A mean at or below chance, or within its 95% CI of it: no evidence of any signal."""
    if chance is None or row["mean"] is None or math.isnan(row["mean"]):
        return False
    return row["mean"] - chance <= (row["ci95_half_width"] or 0.0)


def _chance_lines(results: EvalResults) -> list[str]:
    chance = _chance(results, results.primary_metric)
    if chance is None:
        return []
    lines = [
        f"Chance level ({results.primary_metric}): {chance:.3f} — a uniformly random pick among each "
        "query's candidate answers; cells marked † are at chance (within their 95% CI): no evidence "
        "that the method learned anything."
    ]
    if any(run.method.startswith("dp-icl") for run in results.runs):
        lines.append(
            "DP-ICL always answers with one of the candidate answers (a noisy vote over them), so "
            "even with no signal it scores about chance; the free-text methods (zero-shot, ICL, MTV, "
            "DP-MTV) generate text, which a weak or random-weight model makes unlike any answer, "
            "scoring near 0. When rows are at chance, compare them with the chance level, not with "
            "each other."
        )
    return lines


def _marked_cell(row: dict | None, chance: float | None) -> str:
    text = _cell(row)
    return f"{text} †" if text and at_chance(row, chance) else text


def _metric_table(
    results: EvalResults, summary: list[dict], metric: str, *, chance: float | None = None
) -> list[str]:
    rows = [r for r in summary if r["metric"] == metric]
    if not rows:
        return []
    epsilons = results.config["epsilons_evaluated"]
    header = ["method", "privacy", "relation", *[f"ε = {e:g}" for e in epsilons], "ε = ∞ / none"]
    table = []
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = {r["epsilon"]: r for r in rows if r["method"] == method}
        first = next(iter(mine.values()))
        cells = [_marked_cell(mine.get(e), chance) for e in [*epsilons, None]]
        relation = first.get("neighbouring_relation") or "n/a"
        table.append([first["display"], first["privacy"], relation, *cells])
    return [f"## {metric}", "", *markdown_table(header, table), ""]


def _notes(results: EvalResults) -> list[str]:
    notes = []
    for run in results.runs:
        d = run.details
        where = f"{run.method} seed {run.seed}" + (f" ε={run.epsilon:g}" if run.epsilon else "")
        if d.get("note"):
            notes.append(f"- {where}: {d['note']}")
        if run.method.startswith("dp-icl"):
            ensemble = (
                f"{d['num_chunks']} chunks of {d['shots_per_chunk']}"
                if "sampling_probability" not in d
                else f"{d['num_chunks']} prompts per query from a Poisson sample (q = "
                f"{d['sampling_probability']:.4g}, {d['mean_shots_per_prompt']:.2f} demonstrations "
                "per prompt)"
            )
            notes.append(
                f"- {where}: {d['num_queries']} queries × {ensemble}; {d['neighbouring_relation']}; "
                f"per-query σ = {d['noise_std']:.4g} (ε per query {d['epsilon_per_query']:.4g}, "
                f"total {d['epsilon_spent']:.4g}); "
                f"{d['votes_outside_candidates']:.0%} of votes outside the candidates"
            )
        for warning in d.get("warnings", []):
            notes.append(f"- {where}: {warning}")
    notes += [f"- benchmark: {note}" for note in results.benchmark.get("notes", [])]
    return ["## Notes", "", *dict.fromkeys(notes), ""] if notes else []


def _queries_table(results: EvalResults) -> list[str]:
    curve = results.queries_curve
    if not curve or not (curve["dp-icl"] or curve["dp-mtv"]):
        return []
    flat, _ = t_interval(list(curve["dp-mtv"].values()))
    labels = list(curve["dp-icl"])
    relations = curve.get("dp_icl_relation", {})
    dp_mtv_relation = curve.get("dp_mtv_relation", "replace-one")
    header = ["queries"]
    for label in labels:
        header += [f"{label} ({relations.get(label, '?')})", f"{label} σ"]
    header.append(f"dp-mtv ({dp_mtv_relation})")
    table = []
    for i, q in enumerate(curve["num_queries"]):
        cells = [str(q)]
        for label in labels:
            mean = t_interval([v[i] for v in curve["dp-icl"][label].values()])[0]
            cells += [f"{mean:.3f}", f"{curve['dp_icl_noise_std'][label][i]:.4g}"]
        cells.append(f"{flat:.3f}" if not math.isnan(flat) else "not run")
        table.append(cells)
    explained = (
        "DP-ICL columns: accuracy, then the per-query vote σ the Q queries allow; "
        if labels
        else "DP-ICL was not run; "
    )
    return [
        f"## {results.primary_metric} vs number of answered queries (total ε = {curve['total_epsilon']:g})",
        "",
        f"{explained}dp-mtv: {dp_mtv_relation}, one release for any number of queries.",
        "",
        *markdown_table(header, table),
        "",
    ]
