"""The two figures: accuracy vs ε per method, and accuracy vs number of answered queries."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from dpmtv._atomic import save_figure_atomically
from dpmtv.eval.plot_style import epsilon_axis, method_family, method_label, method_style  # noqa: E402
from dpmtv.eval.runner import EvalResults  # noqa: E402
from dpmtv.eval.stats import t_interval  # noqa: E402


def plot_privacy_utility(results: EvalResults, summary: list[dict], path: Path) -> Path:
    return _save(privacy_utility_figure(results, summary), path)


def privacy_utility_figure(results: EvalResults, summary: list[dict]):
    """Private methods as mean ± 95% CI over seeds against ε (log scale); zero-shot and the
    non-private methods (MTV, ICL) as labelled horizontal reference lines. Styles and labels:
    :mod:`dpmtv.eval.plot_style`."""
    metric = results.primary_metric
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    draw_privacy_utility(
        ax, [r for r in summary if r["metric"] == metric], results.config["epsilons_evaluated"]
    )
    ax.set_ylabel(f"{metric} (mean ± 95% CI over seeds)")
    ax.set_title(f"{results.benchmark['name']}: privacy-utility trade-off (δ = {results.config['delta']:g})")
    num_test = results.benchmark["num_test"]
    _footnote(
        fig, f"DP-MTV: one release, any number of queries; DP-ICL: ε is the total over {num_test} queries"
    )
    return fig


def draw_privacy_utility(ax, rows: list[dict], epsilons) -> None:
    """On ``ax``: the private methods of ``rows`` (one metric's summary rows: ``method``,
    ``privacy``, ``epsilon``, ``mean``, ``ci95_half_width``, ``neighbouring_relation``) as mean ±
    95% CI against ε, the others as labelled horizontal reference lines; the ε axis at ``epsilons``."""
    for method in dict.fromkeys(r["method"] for r in rows if r["privacy"] == "private"):
        mine = sorted((r for r in rows if r["method"] == method), key=lambda r: r["epsilon"])
        ax.errorbar(
            [r["epsilon"] for r in mine],
            [r["mean"] for r in mine],
            yerr=[r["ci95_half_width"] or 0.0 for r in mine],
            capsize=3,
            alpha=0.85,
            label=_label(method, mine[0].get("neighbouring_relation")),
            **method_style(method).line(),
        )
    _reference_lines(ax, rows, epsilons)
    epsilon_axis(ax, epsilons)


def _label(method: str, relation: str | None) -> str:
    """The same legend label for a method in every figure (its relation when it has one)."""
    return method_label(method) + (f", {relation}" if relation else "")


#: Where a reference line's markers sit, as a factor on each ε (log axis): lines that lie on top
#: of each other (ICL, MTV and DP-MTV within 0.003 on the seen tasks) stay told apart by their
#: markers, side by side instead of on one point.
_MARKER_SHIFT = {"zero-shot": 0.88, "icl": 0.94, "mtv": 1.06}


def _reference_lines(ax, rows: list[dict], epsilons) -> None:
    """The non-private rows as horizontal lines in their method's style, with the method's marker
    at each ε (shifted per method); the legend label is the method's, as in every figure."""
    for row in rows:
        if row["privacy"] == "private" or row["mean"] is None or math.isnan(row["mean"]):
            continue
        style = method_style(row["method"])
        label = method_label(row["method"])
        ax.axhline(row["mean"], linewidth=1.4, zorder=3, **style.reference())
        shift = _MARKER_SHIFT.get(method_family(row["method"]), 1.0)
        xs = [float(e) * shift for e in epsilons] or [1.0]
        ax.plot(xs, [row["mean"]] * len(xs), label=label, linewidth=1.4, zorder=3, **style.line())


def plot_queries(results: EvalResults, summary: list[dict], path: Path) -> Path:
    return _save(queries_figure(results, summary), path)


def queries_figure(results: EvalResults, summary: list[dict]):
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
        style = method_style(label)
        ax.plot(grid, means, label=_label(label, relations.get(label, "?")), alpha=0.85, **style.line())
        lows, highs = [m - h for m, h in zip(means, halves)], [m + h for m, h in zip(means, halves)]
        ax.fill_between(grid, lows, highs, color=style.color, alpha=0.15)
    flat, half = t_interval(list(curve.get("dp-mtv", {}).values()))
    if not math.isnan(flat):
        style = method_style("dp-mtv")
        label = _label("dp-mtv", curve.get("dp_mtv_relation", "replace-one"))
        ax.plot(grid, [flat] * len(grid), label=label, alpha=0.85, **style.line())
        ax.fill_between(grid, flat - (half or 0), flat + (half or 0), color=style.color, alpha=0.15)
    zero = [r for r in summary if r["metric"] == metric and r["method"] == "zero-shot"]
    if zero:
        ax.axhline(
            zero[0]["mean"],
            linewidth=1.4,
            label=method_label("zero-shot"),
            **method_style("zero-shot").reference(),
        )
    ax.set_xscale("log")
    ax.set_xlabel("number of answered queries Q (log scale)")
    ax.set_ylabel(f"{metric} (mean ± 95% CI over seeds)")
    total = curve.get("total_epsilon", float("nan"))
    ax.set_title(
        f"{results.benchmark['name']}: fixed total budget ε = {total:g}, δ = {results.config['delta']:g}"
    )
    _footnote(fig, "DP-MTV: one release, queries free; DP-ICL: its per-query budget shrinks with Q")
    return fig


def _footnote(fig, text: str) -> None:
    fig.text(0.01, 0.005, text, fontsize=7, color="dimgrey", ha="left", va="bottom")


def _save(fig, path: Path) -> Path:
    ax = fig.axes[0]
    ax.set_ylim(-0.02, 1.02)  # every metric is a fraction
    ax.grid(True, which="both", alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no results to plot", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout(rect=(0, 0.03, 1, 1))  # room for the footnote
    save_figure_atomically(fig, path, dpi=120)
    plt.close(fig)
    return path
