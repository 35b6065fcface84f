"""The demo's outputs: summaries over tasks and seeds, report.md, plots and the console table."""

from __future__ import annotations

import json
import math
import os
import shlex
from dataclasses import asdict
from pathlib import Path

import numpy as np
from rich.table import Table

from dpmtv._atomic import save_figure_atomically, write_text_atomically
from dpmtv.demo.config import PRIVACY_STATEMENT, DemoConfig, default_config
from dpmtv.demo.figures import plot_deciding_cells
from dpmtv.demo.recognition import GROUP_TITLES, summarise_deciding
from dpmtv.demo.report_tasks import deciding_lines, deciding_markdown, epsilon_cell, per_task_markdown
from dpmtv.demo.story import closing_sentences, gain_kept, gain_words, output_lines
from dpmtv.embedded import CHECKPOINT_ENV, bayes
from dpmtv.eval._markdown import markdown_table
from dpmtv.eval.stats import t_interval


def summarise_over_tasks(rows: list[dict], config: DemoConfig) -> list[dict]:
    """Per (method, ε): the mean over tasks for each seed, then mean ± 95% t-interval over seeds."""
    keys = sorted(
        {(r["method"], r["epsilon"]) for r in rows},
        key=lambda k: (
            _order(k[0]),
            k[1] or 0,
            _icl_shots({"method": k[0]}) if k[0].startswith("icl-") else 0,
        ),
    )
    summary = []
    seeds = [s for s in config.seeds if any(r["seed"] == s for r in rows)]  # the shot curve: seed 0 only
    for method, epsilon in keys:
        per_seed = [
            np.mean(
                [
                    r["accuracy"]
                    for r in rows
                    if r["method"] == method and r["epsilon"] == epsilon and r["seed"] == s
                ]
            )
            for s in seeds
        ]
        mean, half_width = t_interval(per_seed)
        chosen = [r for r in rows if r["method"] == method and r["epsilon"] == epsilon]
        deciding = summarise_deciding(chosen, seeds) if "deciding_count" in rows[0] else {}
        summary.append(
            {
                "method": method,
                "epsilon": epsilon,
                "accuracy": mean,
                "ci95": half_width,
                "per_seed": per_seed,
                **deciding,
            }
        )
    return summary


def summarise_groups(rows: list[dict], config: DemoConfig) -> dict[str, list[dict]]:
    """:func:`summarise_over_tasks` separately over each group of tasks that has rows (seen, held-out
    predicates, held-out label maps, typed rules)."""
    out = {}
    for group in GROUP_TITLES:
        chosen = [r for r in rows if r["group"] == group]
        if chosen:
            out[group] = summarise_over_tasks(chosen, config)
    return out


def _order(method: str) -> int:
    return next(
        i
        for i, prefix in enumerate(("zero-shot", "icl", "mtv", "dp-mtv", *bayes.LEARNERS))
        if method.startswith(prefix)
    )


def _without_nan(value):
    """``value`` with every NaN float as None (NaN is not JSON)."""
    if isinstance(value, dict):
        return {k: _without_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nan(v) for v in value]
    return None if isinstance(value, float) and math.isnan(value) else value


def write_outputs(
    out, rows, summary, shots, config, releases, artifact, seconds, per_task, references=None
) -> None:
    write_text_atomically(out / "results.json", json.dumps(rows, indent=1) + "\n")
    groups = {g: list(dict.fromkeys(r["task"] for r in rows if r["group"] == g)) for g in GROUP_TITLES}
    meta = {
        "held_out_tasks": list(dict.fromkeys(r["task"] for r in rows if r["held_out"])),
        "seen_tasks": list(dict.fromkeys(r["task"] for r in rows if not r["held_out"])),
        "groups": {g: names for g, names in groups.items() if names},
        "config": asdict(config),
        "releases": releases,
        "summary": summary,
        "per_task": per_task,
        "icl_by_shots": shots,
        "demonstration_references": references or {},
        "seconds": round(seconds, 1),
        "artifact": str(artifact),
        "command": command_line(config),
    }
    if 1.0 in config.epsilons:
        meta["gain_kept_at_eps1"] = {group: gain_kept(s) for group, s in summary.items()}
        meta["deciding_gain_kept_at_eps1"] = {
            group: gain_kept(s, key="deciding_accuracy") for group, s in summary.items() if group != "seen"
        }
    write_text_atomically(out / "summary.json", json.dumps(_without_nan(meta), indent=1) + "\n")
    write_text_atomically(out / "report.md", _markdown(summary, shots, config, meta))
    _plot(summary, out / "privacy_utility.png")
    plot_deciding_cells(summary, out / "deciding_cells.png")
    if shots:
        _plot_shots(shots, summary, config, out / "accuracy_vs_shots.png")


def command_line(config: DemoConfig) -> str:
    """The ``dpmtv demo`` invocation that reproduces ``config`` (for the reports), with the
    checkpoint override when one is set (the reports then describe another model)."""
    override = os.environ.get(CHECKPOINT_ENV)
    demo = f"{CHECKPOINT_ENV}={shlex.quote(override)} dpmtv demo" if override else "dpmtv demo"
    if config == default_config(quick=True):
        return f"{demo} --quick"
    full = default_config(full=True)
    if config.tasks != full.tasks:  # the default's tasks (or typed rules: the flags name them)
        full = default_config()
    parts = [demo] if full == default_config() else [demo, "--full"]
    if config.records_per_task != full.records_per_task:
        parts.append(f"--records-per-task {config.records_per_task}")
    if config.shots_per_chunk != full.shots_per_chunk:
        parts.append(f"--shots-per-chunk {config.shots_per_chunk}")
    if config.epsilons != full.epsilons:
        parts.append("--epsilons " + ",".join(f"{e:g}" for e in config.epsilons))
    if config.seeds != full.seeds:
        parts.append(f"--seeds {len(config.seeds)}")
    if config.shared_heads:
        parts.append("--shared-heads")
    if not config.shot_curve:
        parts.append("--no-shot-curve")
    parts += [f"--rule {shlex.quote(text)}" for text in config.rules]
    return " ".join(parts)


def _markdown(summary, shots, config, meta) -> str:
    m = config.records_per_task // config.shots_per_chunk
    counts = {g: len(names) for g, names in meta["groups"].items()}
    groups = list(summary)
    held = len(meta["held_out_tasks"])
    lines = [
        "# dpmtv demo: the embedded model",
        "",
        *[" ".join(closing_sentences(summary, config, Path(meta["artifact"])))],
        "",
        "## The setting",
        "",
        f"{sum(counts.values())} tasks ({len(meta['seen_tasks'])} seen in training, {held} held out: "
        f"never trained, learned from the demonstrations alone) × {len(config.seeds)} seeds; "
        f"N = {config.records_per_task} private records per task, {config.shots_per_chunk} per chunk "
        f"(m = {m}); {config.test_queries} test images per task; δ = {config.delta:g}. Accuracy = mean "
        "over tasks, then mean ± 95% t-interval over seeds [min–max over seeds].",
        "",
        *deciding_lines(summary, meta["per_task"], meta["demonstration_references"]),
        "",
        RERUN_NOTE,
        "",
        "## Accuracy over all test queries",
        "",
        *markdown_table(
            ["method", "ε", *(f"{GROUP_TITLES[g]} ({counts[g]})" for g in groups)],
            [[row["method"], epsilon_cell(row), *_group_cells(summary, row)] for row in summary[groups[0]]],
        ),
    ]
    if 1.0 in config.epsilons:
        lines.append("")
        lines += [f"- {GROUP_TITLES[g]}: {gain_words(rows)}." for g, rows in summary.items()]
    lines += deciding_markdown(summary)
    lines += per_task_markdown(meta["per_task"], config)
    lines += _shots_markdown(shots, config)
    lines += [
        "",
        "Heads: "
        + ("one shared set (chosen on seen tasks)" if config.shared_heads else "each task's public selection")
        + " (selected on public data: shipped with the model, or for a typed rule on its public sample); "
        + "per task: "
        + "; ".join(
            f"{task} {len(r['heads'])} heads, Δ = {r['l2_sensitivity']:.3g}"
            for task, r in meta["releases"].items()
        ),
        "",
        f"Wall time {meta['seconds']} s. Command: `{meta['command']}`.",
        "",
    ]
    return "\n".join(lines)


def _shots_markdown(shots, config) -> list[str]:
    if not shots:
        return []
    lines = [
        "",
        "## ICL by number of demonstrations",
        "",
        f"ICL accuracy by number of shots (seed {config.seeds[0]}, "
        f"first {config.shot_curve_queries} test images per task; deciding-cell queries in brackets):",
        "",
    ]
    table = []
    for k in config.shot_curve:
        method = f"icl-{k} (non-private)"
        cells = []
        for g in shots:
            row = next(r for r in shots[g] if r["method"] == method)
            dec = row.get("deciding_accuracy")
            extra = f" [{dec:.3f}, n = {row['deciding_count']}]" if dec is not None else ""
            cells.append(f"{row['accuracy']:.3f}{extra}")
        table.append([str(k), *cells])
    return [*lines, *markdown_table(["shots", *(GROUP_TITLES[g] for g in shots)], table)]


def _plot(summary, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = privacy_utility_by_group_figure(summary)
    save_figure_atomically(fig, path, dpi=120)
    plt.close(fig)


def privacy_utility_by_group_figure(summary):
    """DP-MTV against ε per task group, with zero-shot, ICL and MTV as reference lines: one
    panel per group, each drawn by the evaluation's :func:`dpmtv.eval.plots.draw_privacy_utility`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpmtv.eval.plots import draw_privacy_utility

    fig, axes = plt.subplots(1, len(summary), figsize=(6.0 * len(summary), 4.2), squeeze=False)
    for ax, (group, rows) in zip(axes[0], summary.items()):
        as_eval = [
            {
                "method": r["method"],
                "privacy": "private" if r["method"] == "dp-mtv" else "non-private",
                "epsilon": r["epsilon"],
                "mean": r["accuracy"],
                "ci95_half_width": r["ci95"],
            }
            for r in rows
        ]
        draw_privacy_utility(ax, as_eval, [r["epsilon"] for r in rows if r["method"] == "dp-mtv"])
        ax.set_ylabel("accuracy (mean over tasks)")
        ax.set_title(f"Embedded model: {GROUP_TITLES[group]} (δ = 1e-5)")
        ax.set_ylim(-0.04, 1.04)  # a line at 0 (a label map's zero-shot) stays visible
    # one legend under the panels, so none covers a line (a label map's zero-shot lies at 0)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def _plot_shots(shots, summary, config: DemoConfig, path: Path) -> None:
    """ICL accuracy against the number of shots, seen and held-out tasks, with each group's
    zero-shot and MTV as horizontal references. The curve is measured on a subset (one seed, the
    first test images), which the title says, since its values differ from the full runs'."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpmtv.eval.plot_style import method_label, method_style

    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    colours = {"seen": "tab:blue", "held_out": "tab:red", "label_maps": "tab:green", "rules": "tab:purple"}
    markers = {"seen": "o", "held_out": "s", "label_maps": "^", "rules": "D"}  # told apart in greyscale
    for group, rows in shots.items():
        rows = sorted(rows, key=_icl_shots)
        ks = [_icl_shots(r) for r in rows]
        ax.errorbar(
            ks,
            [r["accuracy"] for r in rows],
            yerr=[r["ci95"] or 0 for r in rows],
            marker=markers[group],
            capsize=3,
            color=colours[group],
            label=f"ICL, {GROUP_TITLES[group]}",
        )
        reference = summary.get(group, [])
        for prefix in ("zero-shot", "mtv"):  # the method's line style, the group's colour
            row = next((r for r in reference if r["method"].startswith(prefix)), None)
            if row is not None:
                style = method_style(prefix).linestyle
                ax.axhline(row["accuracy"], color=colours[group], linestyle=style, alpha=0.6, linewidth=1)
    for prefix in ("zero-shot", "mtv"):
        ax.plot([], [], color="grey", linestyle=method_style(prefix).linestyle, label=method_label(prefix))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("demonstrations in the prompt")
    ax.set_ylabel("accuracy (mean over tasks)")
    ax.set_title(
        "Embedded model: in-context learning by number of shots\n"
        f"(seed {config.seeds[0]}, first {config.shot_curve_queries} test images per task; "
        "references: all runs)",
        fontsize=10,
    )
    ax.set_ylim(-0.04, 1.04)  # a reference at 0 (a label map's zero-shot) stays visible
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)  # outside: covers no line
    fig.tight_layout()
    save_figure_atomically(fig, path, dpi=120)
    plt.close(fig)


RERUN_NOTE = (
    "Rerunning gives the same numbers: as in every `dpmtv eval`, a seed fixes the records, test "
    "images, ICL demonstrations, the partition (MTV, DP-MTV) and the noise (DP-MTV), so these rows "
    "are experiments at the σ of (ε, δ), not private releases (the ε = 1 artifact is one, with "
    "secure noise). [min–max] is the spread over this run's seeds, a guide to how far other seeds "
    "may move."
)


def _group_cells(summary: dict[str, list[dict]], row: dict) -> list[str]:
    """``accuracy ± CI [min–max over seeds]`` of ``row``'s method and ε in each group."""
    cells = []
    for rows in summary.values():
        match = next(r for r in rows if (r["method"], r["epsilon"]) == (row["method"], row["epsilon"]))
        ci = f" ± {match['ci95']:.3f}" if match["ci95"] is not None else ""
        per_seed = match.get("per_seed") or []
        spread = f" [{min(per_seed):.3f}–{max(per_seed):.3f}]" if len(per_seed) > 1 else ""
        cells.append(f"{match['accuracy']:.3f}{ci}{spread}")
    return cells


def _icl_shots(row: dict) -> int:
    return int(row["method"].split()[0].removeprefix("icl-"))


def print_summary(
    console, summary, config, releases, num_chunks, artifact, per_task, references=None, *, out: Path
) -> None:
    """The console's table and notes, where every output went, then the closing sentences."""
    groups = list(summary)
    count = len(per_task)
    table = Table(title=f"dpmtv demo: embedded model, {count} tasks × {len(config.seeds)} seeds")
    table.add_column("method")
    table.add_column("ε")
    for g in groups:
        n = sum(r["group"] == g for r in summary_tasks(per_task))
        table.add_column(f"{GROUP_TITLES[g]} ({n})\naccuracy ± 95% CI [seed min–max]")
    for row in summary[groups[0]]:
        cells = _group_cells(summary, row)
        table.add_row(row["method"], epsilon_cell(row), *cells)
    console.print(table)
    console.print(RERUN_NOTE, highlight=False, markup=False)
    if 1.0 in config.epsilons:
        for g in groups:
            console.print(f"{GROUP_TITLES[g]}: {gain_words(summary[g])}.", highlight=False)
    for line in deciding_lines(summary, per_task, references or {}):
        console.print(line, highlight=False)
    name, first = next(iter(releases.items()))
    sigmas = first["noise_std"]
    epsilon, noise_std = ("1.0", sigmas["1.0"]) if "1.0" in sigmas else next(iter(sigmas.items()))
    sizes = sorted({len(r["heads"]) for r in releases.values()})
    layers = sorted({layer for layer, _ in first["heads"]})
    console.print(
        f"Heads per task: {sizes[0]}–{sizes[-1]} "
        f"({'shared set' if config.shared_heads else 'per-task public selection'}); for {name}: "
        f"{len(first['heads'])} heads in layers {layers}, Δ = {first['l2_sensitivity']:.4g}, "
        f"σ at ε = {float(epsilon):g}: {noise_std:.4g}. ε = 1 artifact: {artifact}"
    )
    console.print(
        PRIVACY_STATEMENT.format(
            epsilon=float(epsilon),
            delta=config.delta,
            num_records=config.records_per_task,
            num_chunks=num_chunks,
            sensitivity=first["l2_sensitivity"],
            noise_std=noise_std,
        )
    )
    console.print("", *output_lines(out, Path(artifact)), "", sep="\n", highlight=False, markup=False)
    console.print(" ".join(closing_sentences(summary, config, Path(artifact))), highlight=False, markup=False)


def summary_tasks(per_task: dict) -> list[dict]:
    return [{"task": name, "group": record["group"]} for name, record in per_task.items()]
