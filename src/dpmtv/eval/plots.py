"""The two figures: accuracy vs ε per method, and accuracy vs number of answered queries."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from dpmtv.eval.runner import EvalResults  # noqa: E402
from dpmtv.eval.stats import t_interval  # noqa: E402

_REFERENCE_STYLES = {"no private data": ("grey", "--"), "non-private": ("tab:red", ":")}


def plot_privacy_utility(results: EvalResults, summary: list[dict], path: Path) -> Path:
    """Private methods as mean ± 95% CI over seeds against ε (log scale); zero-shot and the
    non-private methods (MTV, ICL) as labelled horizontal reference lines."""
    metric = results.primary_metric
    rows = [r for r in summary if r["metric"] == metric]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for method in dict.fromkeys(r["method"] for r in rows if r["privacy"] == "private"):
        mine = sorted((r for r in rows if r["method"] == method), key=lambda r: r["epsilon"])
        ax.errorbar(
            [r["epsilon"] for r in mine],
            [r["mean"] for r in mine],
            yerr=[r["ci95_half_width"] or 0.0 for r in mine],
            marker="o",
            capsize=3,
            label=_private_label(mine[0], results),
        )
    _reference_lines(ax, rows)
    ax.set_xscale("log")
    epsilons = results.config["epsilons_evaluated"]
    ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
    ax.minorticks_off()
    ax.set_xlabel("privacy budget ε (log scale)")
    ax.set_ylabel(f"{metric} (mean ± 95% CI over seeds)")
    ax.set_title(f"{results.benchmark['name']}: privacy-utility trade-off (δ = {results.config['delta']:g})")
    return _save(fig, ax, path)


def _private_label(row: dict, results: EvalResults) -> str:
    relation = row.get("neighbouring_relation") or "?"
    if row["method"].startswith("dp-icl"):
        return f"{row['display']}, ε total over {results.benchmark['num_test']} queries, {relation}"
    return f"{row['display']}, any number of queries, {relation}"


def _reference_lines(ax, rows: list[dict]) -> None:
    for row in rows:
        if row["privacy"] == "private" or row["mean"] is None or math.isnan(row["mean"]):
            continue
        color, style = _REFERENCE_STYLES[row["privacy"]]
        color = "tab:purple" if row["method"].startswith("icl") else color
        label = row["display"] + (" (no private data)" if row["privacy"] == "no private data" else "")
        ax.axhline(row["mean"], color=color, linestyle=style, linewidth=1.2, label=label)


def plot_queries(results: EvalResults, summary: list[dict], path: Path) -> Path:
    """DP-ICL's accuracy at the per-query noise a total budget allows for Q queries, vs DP-MTV's
    flat line (its queries are free after the one release), over Q = 1 … 10,000."""
    curve, metric = results.queries_curve or {}, results.primary_metric
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    grid = curve.get("num_queries", [1, 10_000])
    relations = curve.get("dp_icl_relation", {})
    for label, per_seed in curve.get("dp-icl", {}).items():
        stats = [t_interval([values[i] for values in per_seed.values()]) for i in range(len(grid))]
        means = [s[0] for s in stats]
        halves = [s[1] or 0.0 for s in stats]
        relation = relations.get(label, "?")
        ax.plot(grid, means, marker="o", label=f"{label}, {relation} (per-query budget shrinks with Q)")
        ax.fill_between(
            grid, [m - h for m, h in zip(means, halves)], [m + h for m, h in zip(means, halves)], alpha=0.2
        )
    flat, half = t_interval(list(curve.get("dp-mtv", {}).values()))
    if not math.isnan(flat):
        relation = curve.get("dp_mtv_relation", "replace-one")
        label = f"dp-mtv, {relation} (one release, queries free)"
        ax.plot(grid, [flat] * len(grid), color="tab:green", label=label)
        ax.fill_between(grid, flat - (half or 0), flat + (half or 0), color="tab:green", alpha=0.15)
    zero = [r for r in summary if r["metric"] == metric and r["method"] == "zero-shot"]
    if zero:
        ax.axhline(zero[0]["mean"], color="grey", linestyle="--", linewidth=1.2, label="zero-shot")
    ax.set_xscale("log")
    ax.set_xlabel("number of answered queries Q (log scale)")
    ax.set_ylabel(f"{metric} (mean ± 95% CI over seeds)")
    total = curve.get("total_epsilon", float("nan"))
    ax.set_title(
        f"{results.benchmark['name']}: fixed total budget ε = {total:g}, δ = {results.config['delta']:g}"
    )
    return _save(fig, ax, path)


def _save(fig, ax, path: Path) -> Path:
    ax.set_ylim(-0.02, 1.02)  # every metric is a fraction
    ax.grid(True, which="both", alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no results to plot", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
