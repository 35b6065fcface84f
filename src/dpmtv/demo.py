"""``dpmtv demo``: the paper's comparison on the packaged embedded model, on the CPU.

For every task of the embedded suite and every seed: N private records, m = N/s chunk prompts;
zero-shot, 16-shot ICL (token space, non-private), MTV (the unclipped mean, non-private) and
DP-MTV at each ε (per-layer clipping, the library's Gaussian release, noise once per release) are
scored on test images by the greedy first answer token. Seen tasks (trained on) and held-out
tasks (never trained on, nor their complements: the model learns them from the demonstrations
alone) are reported separately; ICL is also scored at 1, 4, 16 and 64 shots for the shots plot.
The head set and clip norms were chosen on public data when the model was trained
(``dpmtv_defaults.json`` beside the weights) and cost no privacy. The ε = 1 artifact of one task
is built with the real pipeline and written out.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from dpmtv._progress import progress_bar
from dpmtv.build import BuildSettings, build_task_vector
from dpmtv.chunks import ChunkPrompts
from dpmtv.embedded import checkpoint_path
from dpmtv.embedded.generator import get_task, task_suite
from dpmtv.embedded.suite import few_shot_prompt, first_token_correct, task_records, zero_shot_prompts
from dpmtv.eval.stats import t_interval
from dpmtv.extract import stack_selected_heads
from dpmtv.heads import HeadSet
from dpmtv.hooks import layer_patches
from dpmtv.models.loading import LoadedModel, load_model
from dpmtv.privacy import (
    AdjacencyRelation,
    l2_sensitivity,
    make_sampler,
    partition_replace_one,
    secure_rng,
)
from dpmtv.privacy.release import plan_gaussian_release, release_clipped_mean

PRIVACY_STATEMENT = (
    "Privacy: each DP-MTV vector is ({epsilon:g}, {delta:g})-differentially private with respect to "
    "replacing any one of the task's {num_records} private records. A record lands in exactly one of "
    "{num_chunks} chunks; each chunk's vector is clipped per layer, so the mean has L2 sensitivity "
    "{sensitivity:.4g}; Gaussian noise of std {noise_std:.4g} is added once (OpenDP sampler, σ "
    "calibrated by dp-accounting's PLD accountant). Every answer computed with the vector is "
    "post-processing: unlimited queries cost no further privacy. The head set and clip norms come "
    "from public data and cost nothing. ICL and MTV rows are NON-PRIVATE references."
)


@dataclass(frozen=True)
class DemoConfig:
    tasks: tuple[str, ...]
    seeds: tuple[int, ...] = (0, 1, 2)
    records_per_task: int = 2048
    shots_per_chunk: int = 8
    epsilons: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
    delta: float = 1e-5
    test_queries: int = 64
    icl_shots: int = 16
    batch_size: int = 64
    shared_heads: bool = False  # True: one head set for all tasks; False: each task's public selection
    shot_curve: tuple[int, ...] = (1, 4, 16, 64)  # ICL shots for the accuracy-vs-shots plot
    shot_curve_queries: int = 16  # the first test queries of each task, for the shots plot


def default_config(*, quick: bool) -> DemoConfig:
    names = tuple(task.name for task in task_suite())
    if quick:
        return DemoConfig(
            tasks=("name_colour", "is_big", "is_red", "is_green"),
            seeds=(0,),
            records_per_task=256,
            epsilons=(1.0,),
            test_queries=24,
            shot_curve_queries=8,
        )
    return DemoConfig(tasks=names)


def load_defaults(folder: Path | None = None) -> dict:
    return json.loads(((folder or checkpoint_path()) / "dpmtv_defaults.json").read_text())


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
                shot_rows += _shot_curve_rows(loaded, task, seed, config)
                advance(1)
    artifact = _write_artifact(loaded, config, releases[config.tasks[0]], out)
    summary = summarise_groups(rows, config)
    shots = summarise_groups(shot_rows, config)
    _write_outputs(out, rows, summary, shots, config, releases, artifact, time.perf_counter() - started)
    _print_summary(console, summary, config, releases, num_chunks, artifact)
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
    (demonstrations drawn from its private records; non-private references)."""
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


def summarise(rows: list[dict], config: DemoConfig) -> list[dict]:
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
    for method, epsilon in keys:
        per_seed = [
            np.mean(
                [
                    r["accuracy"]
                    for r in rows
                    if r["method"] == method and r["epsilon"] == epsilon and r["seed"] == s
                ]
            )
            for s in config.seeds
        ]
        mean, half_width = t_interval(per_seed)
        summary.append(
            {"method": method, "epsilon": epsilon, "accuracy": mean, "ci95": half_width, "per_seed": per_seed}
        )
    return summary


GROUPS = {"seen": False, "held_out": True}
GROUP_TITLES = {"seen": "seen tasks", "held_out": "held-out tasks"}


def summarise_groups(rows: list[dict], config: DemoConfig) -> dict[str, list[dict]]:
    """:func:`summarise` separately over the seen and the held-out tasks (groups with tasks)."""
    out = {}
    for group, held_out in GROUPS.items():
        chosen = [r for r in rows if r["held_out"] == held_out]
        if chosen:
            out[group] = summarise(chosen, config)
    return out


def _order(method: str) -> int:
    return next(
        i for i, prefix in enumerate(("zero-shot", "icl", "mtv", "dp-mtv")) if method.startswith(prefix)
    )


def _lookup(summary, method_prefix, epsilon=None) -> float:
    return next(
        r["accuracy"] for r in summary if r["method"].startswith(method_prefix) and r["epsilon"] == epsilon
    )


def gain_kept(summary, epsilon: float = 1.0) -> dict[str, float]:
    """DP-MTV's gain over zero-shot at ``epsilon`` as a fraction of ICL's and of MTV's gains, and
    MTV's accuracy as a fraction of ICL's."""
    zero, icl, mtv = _lookup(summary, "zero-shot"), _lookup(summary, "icl"), _lookup(summary, "mtv")
    dp = _lookup(summary, "dp-mtv", epsilon)
    return {
        "of_icl_gain": (dp - zero) / (icl - zero),
        "of_mtv_gain": (dp - zero) / (mtv - zero),
        "mtv_over_icl": mtv / icl,
    }


def _write_outputs(out, rows, summary, shots, config, releases, artifact, seconds) -> None:
    (out / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    meta = {
        "held_out_tasks": [t for t in config.tasks if get_task(t).held_out],
        "seen_tasks": [t for t in config.tasks if not get_task(t).held_out],
        "config": asdict(config),
        "releases": {
            task: {
                "heads": r.heads.to_json(),
                "l2_clip_norm": list(r.clip_norms.values()),
                "l2_sensitivity": r.sensitivity,
                "noise_std": {str(e): p.noise_std for e, p in r.plans.items()},
            }
            for task, r in releases.items()
        },
        "summary": summary,
        "icl_by_shots": shots,
        "seconds": round(seconds, 1),
        "artifact": str(artifact),
        "command": command_line(config),
    }
    if 1.0 in config.epsilons:
        meta["gain_kept_at_eps1"] = {group: gain_kept(s) for group, s in summary.items()}
    (out / "summary.json").write_text(json.dumps(meta, indent=1) + "\n")
    (out / "report.md").write_text(_markdown(summary, shots, config, meta))
    _plot(summary, out / "privacy_utility.png")
    if shots:
        _plot_shots(shots, summary, out / "accuracy_vs_shots.png")


def command_line(config: DemoConfig) -> str:
    """The ``dpmtv demo`` invocation that reproduces ``config`` (for the reports)."""
    if config == default_config(quick=True):
        return "dpmtv demo --quick"
    full = default_config(quick=False)
    parts = ["dpmtv demo"]
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
    return " ".join(parts)


def _markdown(summary, shots, config, meta) -> str:
    m = config.records_per_task // config.shots_per_chunk
    counts = {"seen": len(meta["seen_tasks"]), "held_out": len(meta["held_out_tasks"])}
    groups = list(summary)
    lines = [
        "# dpmtv demo: the embedded model",
        "",
        f"{len(config.tasks)} tasks ({counts['seen']} seen in training, {counts['held_out']} held out: "
        f"never trained, learned from the demonstrations alone) × {len(config.seeds)} seeds; "
        f"N = {config.records_per_task} private records per task, {config.shots_per_chunk} per chunk "
        f"(m = {m}); {config.test_queries} test images per task; δ = {config.delta:g}. Accuracy = mean "
        "over tasks, then mean ± 95% t-interval over seeds.",
        "",
        "| method | ε | " + " | ".join(f"{GROUP_TITLES[g]} ({counts[g]})" for g in groups) + " |",
        "|---|---|" + "---|" * len(groups),
    ]
    for row in summary[groups[0]]:
        cells = _group_cells(summary, row)
        eps = "—" if row["epsilon"] is None else f"{row['epsilon']:g}"
        lines.append(f"| {row['method']} | {eps} | " + " | ".join(cells) + " |")
    if "gain_kept_at_eps1" in meta:
        lines.append("")
        for g, kept in meta["gain_kept_at_eps1"].items():
            lines.append(
                f"- {GROUP_TITLES[g]}: DP-MTV at ε = 1 keeps {kept['of_icl_gain']:.0%} of the ICL gain "
                f"over zero-shot and {kept['of_mtv_gain']:.0%} of MTV's gain; "
                f"MTV / ICL = {kept['mtv_over_icl']:.2f}."
            )
    if shots:
        lines += [
            "",
            f"ICL accuracy by number of shots (first {config.shot_curve_queries} test images per task):",
            "",
            "| shots | " + " | ".join(GROUP_TITLES[g] for g in shots) + " |",
            "|---|" + "---|" * len(shots),
        ]
        for k in config.shot_curve:
            method = f"icl-{k} (non-private)"
            cells = [f"{_lookup(shots[g], method):.3f}" for g in shots]
            lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Heads: "
        + ("one shared set (chosen on seen tasks)" if config.shared_heads else "each task's public selection")
        + " (selected on public data when the model was trained, shipped with it); per task: "
        + "; ".join(
            f"{task} {len(r['heads'])} heads, Δ = {r['l2_sensitivity']:.3g}"
            for task, r in meta["releases"].items()
        ),
        "",
        f"Wall time {meta['seconds']} s. Command: `{meta['command']}`.",
        "",
    ]
    return "\n".join(lines)


def _plot(summary, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(summary), figsize=(6.0 * len(summary), 4.2), squeeze=False)
    for ax, (group, rows) in zip(axes[0], summary.items()):
        dp = [r for r in rows if r["method"] == "dp-mtv"]
        ax.errorbar(
            [r["epsilon"] for r in dp],
            [r["accuracy"] for r in dp],
            yerr=[r["ci95"] or 0 for r in dp],
            marker="o",
            capsize=3,
            label="DP-MTV",
        )
        styles = {"zero-shot": ("grey", ":"), "icl": ("tab:green", "--"), "mtv": ("tab:orange", "-.")}
        for prefix, (colour, style) in styles.items():
            row = next(r for r in rows if r["method"].startswith(prefix))
            ax.axhline(row["accuracy"], color=colour, linestyle=style, label=row["method"])
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ε (δ = 1e-5)")
        ax.set_ylabel("accuracy (mean over tasks)")
        ax.set_title(f"Embedded model: {GROUP_TITLES[group]}")
        ax.set_ylim(0, 1)
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_shots(shots, summary, path: Path) -> None:
    """ICL accuracy against the number of shots, seen and held-out tasks, with each group's MTV
    and DP-MTV (ε = 1) as horizontal references."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    colours = {"seen": "tab:blue", "held_out": "tab:red"}
    for group, rows in shots.items():
        rows = sorted(rows, key=_icl_shots)
        ks = [_icl_shots(r) for r in rows]
        ax.errorbar(
            ks,
            [r["accuracy"] for r in rows],
            yerr=[r["ci95"] or 0 for r in rows],
            marker="o",
            capsize=3,
            color=colours[group],
            label=f"ICL, {GROUP_TITLES[group]}",
        )
        reference = summary.get(group, [])
        for prefix, style in (("zero-shot", ":"), ("mtv", "-.")):
            row = next((r for r in reference if r["method"].startswith(prefix)), None)
            if row is not None:
                ax.axhline(row["accuracy"], color=colours[group], linestyle=style, alpha=0.6, linewidth=1)
    ax.plot([], [], color="grey", linestyle=":", label="zero-shot")
    ax.plot([], [], color="grey", linestyle="-.", label="MTV (non-private)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("demonstrations in the prompt")
    ax.set_ylabel("accuracy (mean over tasks)")
    ax.set_title("Embedded model: in-context learning by number of shots")
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _group_cells(summary: dict[str, list[dict]], row: dict) -> list[str]:
    """``accuracy ± CI`` of ``row``'s method and ε in each group of ``summary``."""
    cells = []
    for rows in summary.values():
        match = next(r for r in rows if (r["method"], r["epsilon"]) == (row["method"], row["epsilon"]))
        ci = f" ± {match['ci95']:.3f}" if match["ci95"] is not None else ""
        cells.append(f"{match['accuracy']:.3f}{ci}")
    return cells


def _icl_shots(row: dict) -> int:
    return int(row["method"].split()[0].removeprefix("icl-"))


def _print_summary(console, summary, config, releases, num_chunks, artifact) -> None:
    groups = list(summary)
    table = Table(title=f"dpmtv demo — embedded model, {len(config.tasks)} tasks × {len(config.seeds)} seeds")
    table.add_column("method")
    table.add_column("ε")
    for g in groups:
        n = sum(get_task(t).held_out == GROUPS[g] for t in config.tasks)
        table.add_column(f"{GROUP_TITLES[g]} ({n})\naccuracy ± 95% CI")
    for row in summary[groups[0]]:
        cells = _group_cells(summary, row)
        table.add_row(row["method"], "—" if row["epsilon"] is None else f"{row['epsilon']:g}", *cells)
    console.print(table)
    if 1.0 in config.epsilons:
        for g in groups:
            kept = gain_kept(summary[g])
            console.print(
                f"{GROUP_TITLES[g]}: DP-MTV at ε = 1 keeps {kept['of_icl_gain']:.0%} of the ICL gain over "
                f"zero-shot ({kept['of_mtv_gain']:.0%} of MTV's)."
            )
    first = releases[config.tasks[0]]
    plan = first.plans.get(1.0) or next(iter(first.plans.values()))
    sizes = sorted({len(r.heads) for r in releases.values()})
    console.print(
        f"Heads per task: {sizes[0]}–{sizes[-1]} "
        f"({'shared set' if config.shared_heads else 'per-task public selection'}); for {config.tasks[0]}: "
        f"{len(first.heads)} heads in layers {first.heads.layers}, Δ = {first.sensitivity:.4g}, "
        f"σ at ε = {plan.epsilon:g}: {plan.noise_std:.4g}. ε = 1 artifact: {artifact}"
    )
    console.print(
        PRIVACY_STATEMENT.format(
            epsilon=plan.epsilon,
            delta=config.delta,
            num_records=config.records_per_task,
            num_chunks=num_chunks,
            sensitivity=first.sensitivity,
            noise_std=plan.noise_std,
        )
    )
