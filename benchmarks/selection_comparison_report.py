"""The tables of ``benchmarks/selection_comparison.py``: the methods it compares, their labels,
the summary over seeds and the Markdown report written beside the JSON."""

from __future__ import annotations

import math

import numpy as np

from dpmtv.embedded.suite import PUBLIC_SEED
from dpmtv.eval.stats import t_interval

DELTA = 1e-5


PRIVATE_K = 10


METHOD_LABELS = {
    "zero-shot": "zero-shot (no vector)",
    "a-reinforce": "(a) public REINFORCE (+best-of)",
    "a-reinforce-raw": "(a') REINFORCE's own draw",
    "b-greedy": "(b) public greedy (+best-of)",
    "b-greedy-raw": "(b') greedy's own set",
    "c-scored": "(c) public scored top-k (+best-of)",
    "c-scored-raw": "(c') scored top-k itself",
    "d-private": f"(d) private noisy top-{PRIVATE_K}",
    "d-abl-exact-heads": f"(d-abl, not DP) exact top-{PRIVATE_K} of the votes + (d)'s release σ",
    "d-abl-noisy-heads": "(d-abl, not DP) (d)'s noisy heads, no release noise",
    "e-all": "(e) all heads",
    "ref-shipped": "ref: shipped default set",
}


ORDER = list(METHOD_LABELS)


def summarise(rows, seeds) -> list[dict]:
    keys = sorted({(r["method"], r["epsilon"]) for r in rows}, key=lambda k: (ORDER.index(k[0]), k[1] or 0))
    out = []
    for method, eps in keys:
        per_seed = [
            float(
                np.mean(
                    [
                        r["accuracy"]
                        for r in rows
                        if r["method"] == method and r["epsilon"] == eps and r["seed"] == s
                    ]
                )
            )
            for s in seeds
        ]
        mean, half = t_interval(per_seed)
        out.append({"method": method, "epsilon": eps, "accuracy": mean, "ci95": half, "per_seed": per_seed})
    return out


def _cell_text(cell, method, eps) -> str:
    r = cell.get((method, eps))
    if r is None:
        return "—"
    return f"{r['accuracy']:.3f}" + (f" ± {r['ci95']:.3f}" if r["ci95"] is not None else "")


def _heads_column(tasks, method) -> str:
    if method == "zero-shot":
        return "0"
    if method.startswith("d-"):
        return f"{PRIVATE_K} (varies)"
    counts = [str(t["head_sets"][method]["count"]) for t in tasks.values()]
    if method.endswith("-raw"):
        same = [
            t["head_sets"][method]["heads"] == t["head_sets"][method[:-4]]["heads"] for t in tasks.values()
        ]
        counts = [c + ("=" if same_ else "") for c, same_ in zip(counts, same)]
    return "/".join(counts)


def _seconds_column(tasks, method) -> str:
    base = method.replace("-raw", "")
    key = {"a-reinforce": "reinforce", "b-greedy": "greedy", "c-scored": "scored"}.get(base)
    if key:
        return "/".join(f"{t['public_selection'][key]['seconds']:.0f}" for t in tasks.values())
    if method == "d-private":
        vals = [p["vote_seconds"] for t in tasks.values() for p in t["private_selection"].values()]
        return f"{np.mean(vals):.1f} (votes, mean)"
    return "—" if method.startswith("d-abl") else "0"


def _markdown_intro(cfg, tasks) -> list[str]:
    return [
        "# Head selection on the embedded benchmark (issue 4)",
        "",
        f"Tasks: {', '.join(t + (' (held-out)' if tasks[t]['held_out'] else '') for t in cfg['tasks'])}; "
        f"seeds {cfg['seeds']}; N = {cfg['records']} private records per task, s = {cfg['shots']} per chunk "
        f"(m = {cfg['records'] // cfg['shots']}); {cfg['test_queries']} test queries per task; "
        f"δ = {DELTA:g}, replace-one. "
        f"Public selection on {cfg['public_records']} public records per task (seed {PUBLIC_SEED}), "
        f"REINFORCE {cfg['reinforce_steps']} steps; scored k = greedy's own count per task; "
        f"private: k = k' = {PRIVATE_K}, ε_sel = {cfg['selection_fraction']:g}·ε, sequential composition. "
        "Accuracy = mean over tasks per seed, then mean ± 95% "
        "t-interval over seeds. Heads and selection seconds are per task, in task order; `=` marks a "
        "search's own set that the best-of contest kept (same heads as the row above; separate noise draws).",
        "",
    ]


def _markdown_summary_table(cell, tasks, eps_list) -> list[str]:
    lines = [
        "| method | heads | selection s | MTV (non-private) | "
        + " | ".join(f"ε = {e:g}" for e in eps_list)
        + " |",
        "|---|---|---|---|" + "---|" * len(eps_list),
    ]
    for method in ORDER:
        if not any(k[0] == method for k in cell):
            continue
        mtv = _cell_text(cell, method, None)
        cols = (
            [_cell_text(cell, method, e) for e in eps_list]
            if method != "zero-shot"
            else ["—"] * len(eps_list)
        )
        heads, seconds = _heads_column(tasks, method), _seconds_column(tasks, method)
        lines.append(f"| {METHOD_LABELS[method]} | {heads} | {seconds} | {mtv} | " + " | ".join(cols) + " |")
    return lines


def _markdown_per_task(cfg, tasks) -> list[str]:
    lines = [
        "",
        "Per task at ε = 1 (mean over seeds; MTV non-private in brackets):",
        "",
        "| method | " + " | ".join(cfg["tasks"]) + " |",
        "|---|" + "---|" * len(cfg["tasks"]),
    ]
    for method in ORDER:
        if method == "zero-shot":
            vals = [f"{t['accuracy'].get('zero-shot|None', float('nan')):.3f}" for t in tasks.values()]
        else:
            vals = [
                f"{t['accuracy'].get(method + '|1.0', math.nan):.3f}"
                + (f" ({t['accuracy'][method + '|None']:.3f})" if method + "|None" in t["accuracy"] else "")
                for t in tasks.values()
            ]
        lines.append(f"| {METHOD_LABELS[method]} | " + " | ".join(vals) + " |")
    return lines


def _markdown_head_sets(tasks) -> list[str]:
    lines = ["", "Head sets (layers: heads per layer) and best-of winners:", ""]
    for name, t in tasks.items():
        parts = [
            f"{method} {t['head_sets'][method]['count']} {t['head_sets'][method]['per_layer']}"
            for method in ORDER
            if method in t["head_sets"]
        ]
        chosen = {k: v["chosen_by_best_of"] for k, v in t["public_selection"].items()}
        lines.append(f"- **{name}**: " + "; ".join(parts) + f"; best-of chose {chosen}")
    return lines


def markdown(result) -> str:
    cfg, summary, tasks = result["config"], result["summary"], result["tasks"]
    eps_list = cfg["epsilons"]
    cell = {(r["method"], r["epsilon"]): r for r in summary}
    lines = _markdown_intro(cfg, tasks) + _markdown_summary_table(cell, tasks, eps_list)
    lines += _markdown_per_task(cfg, tasks) + _markdown_head_sets(tasks)
    lines += [
        "",
        "Private selection: mean overlap of the noisy top-10 with the exact top-10 of the votes: "
        + ", ".join(f"ε = {e:g}: {result['private_overlap'][str(e)]:.2f}" for e in eps_list),
        "",
    ]
    cc = result.get("cross_check")
    if cc:
        lines.append(f"Cross-check with `build_task_vector` (σ at ε = 1): agree = {cc['agree']}.")
    lines += [
        "",
        f"Wall time {result['seconds']:.0f} s ({result['machine']}). Command: `{result['command']}`",
        "",
    ]
    return "\n".join(lines)
