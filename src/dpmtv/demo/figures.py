"""The demo's deciding-cell figure: per held-out group, each method's accuracy on all test queries
beside its accuracy on the queries only the demonstrations can settle (where the trained rule
closest to the task answers wrong), with zero-shot's level on those queries drawn across, so
that a method below it is seen to be below it."""

from __future__ import annotations

from pathlib import Path

from dpmtv._atomic import save_figure_atomically
from dpmtv.demo.recognition import GROUP_TITLES
from dpmtv.demo.story import lookup
from dpmtv.eval.plot_style import method_style

_BAR_WIDTH = 0.38


def _methods(rows: list[dict]) -> list[tuple[str, float | None, str]]:
    """(method prefix, ε, label) in the order drawn: zero-shot, ICL, MTV, DP-MTV by ε."""
    fixed = [(r["method"], None) for r in rows if r["epsilon"] is None]
    private = sorted(r["epsilon"] for r in rows if r["method"] == "dp-mtv")
    labels = [(m, e, m.replace(" (non-private)", "\n(non-private)")) for m, e in fixed]
    return labels + [("dp-mtv", e, f"DP-MTV\nε = {e:g}") for e in private]


def plot_deciding_cells(summary: dict[str, list[dict]], path: Path) -> bool:
    """Write the figure to ``path``; False (nothing written) when no group has deciding cells."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [g for g, rows in summary.items() if g != "seen" and any(r.get("deciding_count") for r in rows)]
    if not groups:
        return False
    fig, axes = plt.subplots(1, len(groups), figsize=(7.0 * len(groups), 4.6), squeeze=False)
    for ax, group in zip(axes[0], groups):
        _draw_group(ax, summary[group])
        ax.set_title(f"{GROUP_TITLES[group]}: all queries vs deciding cells", fontsize=10)
    fig.tight_layout()
    save_figure_atomically(fig, path, dpi=120)
    plt.close(fig)
    return True


def _draw_group(ax, rows: list[dict]) -> None:
    methods = _methods(rows)
    for index, (method, epsilon, _) in enumerate(methods):
        colour = method_style(method).color
        row = next(r for r in rows if r["method"] == method and r["epsilon"] == epsilon)
        for offset, key, ci, hatch, alpha in (
            (-_BAR_WIDTH / 2, "accuracy", "ci95", None, 0.35),
            (_BAR_WIDTH / 2, "deciding_accuracy", "deciding_ci95", "//", 0.9),
        ):
            value = row.get(key)
            if value is None:
                continue
            error = row.get(ci) or 0.0
            look = {"color": colour, "alpha": alpha, "hatch": hatch, "edgecolor": "black"}
            ax.bar(index + offset, value, _BAR_WIDTH, **look)
            ax.errorbar(index + offset, value, yerr=error, color="black", capsize=3, linewidth=1)
            if key == "deciding_accuracy":  # the value, so that a bar at 0 is read as 0
                text = {"ha": "center", "va": "bottom", "fontsize": 6, "rotation": 90}
                ax.text(index + offset, 0.01, f"{value:.2f}", **text)
    zero = lookup(rows, "zero-shot", key="deciding_accuracy")
    label = f"zero-shot on deciding cells ({zero:.2f})"
    ax.axhline(zero, color="black", linestyle=":", linewidth=1.4, label=label)
    from matplotlib.patches import Patch

    handles = [
        *ax.get_legend_handles_labels()[0],
        Patch(facecolor="lightgrey", edgecolor="black", label="all test queries"),
        Patch(facecolor="grey", hatch="//", edgecolor="black", label="deciding-cell queries"),
    ]
    ax.set_xticks(range(len(methods)), [label for _, _, label in methods], fontsize=7)
    ax.set_ylabel("accuracy (mean ± 95% CI over seeds)")
    ax.set_ylim(0, 1.05)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(handles=handles, loc="upper left", fontsize=7)
