"""The demo's per-task report: recognition ceilings, deciding cells and the ``--json-out`` file."""

from __future__ import annotations

import json
import math
from pathlib import Path

from dpmtv._atomic import write_text_atomically
from dpmtv.demo.recognition import GROUP_TITLES
from dpmtv.embedded import bayes

_HEADLINE = (("zero-shot", None, "zero-shot"), ("icl-16", None, "ICL-16"), ("mtv", None, "MTV"))


def _find(rows: list[dict], prefix: str, epsilon=None) -> dict | None:
    return next((r for r in rows if r["method"].startswith(prefix) and r["epsilon"] == epsilon), None)


def _dp_epsilon(rows: list[dict]) -> float | None:
    epsilons = [r["epsilon"] for r in rows if r["method"] == "dp-mtv"]
    return 1.0 if 1.0 in epsilons else (epsilons[0] if epsilons else None)


def _fmt(value) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def deciding_lines(
    summary: dict[str, list[dict]], per_task: dict[str, dict], references: dict[str, list[dict]]
) -> list[str]:
    """The headline per non-seen group: deciding-cell accuracy next to the recognition ceiling,
    then what Bayes-optimal answers to the same demonstrations score (``references``, the
    summaries of :func:`dpmtv.demo.recognition.reference_rows`)."""
    lines = []
    for group, rows in summary.items():
        if group == "seen":
            continue
        tasks = [t for t in per_task.values() if t["group"] == group]
        ceiling = sum(t["ceiling"]["accuracy"] for t in tasks) / len(tasks)
        eps = _dp_epsilon(rows)
        methods = [*_HEADLINE, ("dp-mtv", eps, f"DP-MTV ε = {eps:g}")] if eps is not None else _HEADLINE
        parts = []
        for prefix, epsilon, label in methods:
            row = _find(rows, prefix, epsilon)
            if row is not None:
                parts.append(f"{label} {_fmt(row.get('deciding_accuracy'))} (all {row['accuracy']:.3f})")
        count = (_find(rows, "zero-shot") or {}).get("deciding_count", 0)
        lines.append(
            f"{GROUP_TITLES[group].capitalize()} ({len(tasks)}): recognition ceiling {ceiling:.3f} "
            f"(mean over tasks: the best trained table's accuracy); on the {count} deciding-cell "
            "queries (where that table answers wrong): " + ", ".join(parts) + "."
        )
        if references.get(group):
            learned = ", ".join(
                f"over the {_LEARNER_WORDS[r['method']]} {_fmt(r.get('deciding_accuracy'))} "
                f"(all {r['accuracy']:.3f})"
                for r in references[group]
            )
            lines.append(
                f"Bayes-optimal answers to the same {_icl_shots(summary[group])} demonstrations (no model) "
                f"on those queries, with a uniform prior {learned}. A model above the first has learned "
                "what recognising a trained rule from the demonstrations cannot explain."
            )
    return lines


_LEARNER_WORDS = {
    bayes.RECOGNISER: "trained tables",
    bayes.SHAPES: "tables of the trained shapes",
    bayes.GRAMMAR: "tables of the whole rule grammar",
}


def _icl_shots(rows: list[dict]) -> str:
    icl = _find(rows, "icl-")
    return icl["method"].split()[0].removeprefix("icl-") if icl else "ICL"


def deciding_markdown(summary: dict[str, list[dict]], kept: dict[str, dict]) -> list[str]:
    """Deciding-cell accuracy per method for the non-seen groups (pooled over tasks)."""
    groups = [g for g in summary if g != "seen"]
    if not groups:
        return []
    lines = [
        "",
        "Accuracy on deciding-cell queries (pooled over the group's tasks per seed, mean ± 95% "
        "t-interval over seeds; n = deciding queries over all seeds):",
        "",
        "| method | ε | " + " | ".join(GROUP_TITLES[g] for g in groups) + " |",
        "|---|---|" + "---|" * len(groups),
    ]
    for row in summary[groups[0]]:
        cells = []
        for g in groups:
            match = _find(summary[g], row["method"], row["epsilon"]) or {}
            ci = match.get("deciding_ci95")
            value = _fmt(match.get("deciding_accuracy")) + (f" ± {ci:.3f}" if ci is not None else "")
            cells.append(f"{value} (n = {match.get('deciding_count', 0)})")
        eps = "—" if row["epsilon"] is None else f"{row['epsilon']:g}"
        lines.append(f"| {row['method']} | {eps} | " + " | ".join(cells) + " |")
    for g, k in kept.items():
        lines.append(
            f"- {GROUP_TITLES[g]}, deciding cells: DP-MTV at ε = 1 keeps {pct(k['of_icl_gain'])} of "
            f"the ICL gain over zero-shot and {pct(k['of_mtv_gain'])} of MTV's; "
            f"MTV / ICL = {_fmt(k['mtv_over_icl'])}."
        )
    return lines


def pct(value: float | None) -> str:
    """A share as a percentage; "—" where there is none (None or NaN: no gain to keep)."""
    return "—" if value is None or math.isnan(value) else f"{value:.0%}"


def per_task_markdown(per_task: dict[str, dict], config) -> list[str]:
    """One line per held-out task or typed rule: ceiling, deciding cells, and each method's
    accuracy on all / deciding-cell queries."""
    eps = 1.0 if 1.0 in config.epsilons else config.epsilons[0]
    keys = (
        "zero-shot",
        f"icl-{config.icl_shots} (non-private)",
        "mtv (non-private)",
        f"dp-mtv@{eps:g}",
        *bayes.LEARNERS,
    )
    lines = [
        "",
        "Per task (not seen in training): the recognition ceiling (best trained table, its accuracy on "
        "the test queries), its deciding cells, the share of ICL-16 prompts whose demonstrations show "
        "one, and accuracy on all / deciding-cell queries; the last three columns are no model but "
        f"Bayes-optimal answers to the same {config.icl_shots} demonstrations (`dpmtv.embedded.bayes`: "
        "a uniform prior over the trained tables, over every table of the trained rule shapes, or over "
        "every table of the rule grammar):",
        "",
        f"| task | trained | ceiling | deciding cells | deciding queries | ICL prompts with one | "
        f"zero-shot | ICL-{config.icl_shots} | MTV | DP-MTV ε = {eps:g} | Bayes: trained tables | "
        "Bayes: trained shapes | Bayes: rule grammar |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, t in per_task.items():
        if t["group"] == "seen":
            continue
        cells = []
        for key in keys:
            m = t["methods"].get(key, {})
            cells.append(f"{_fmt(m.get('accuracy'))} / {_fmt(m.get('deciding_accuracy'))}")
        share = t["icl_prompts_with_deciding_demo"]
        lines.append(
            f"| `{name}` | {'yes' if t['trained'] else 'no'} | {t['ceiling']['accuracy']:.3f} "
            f"(`{t['ceiling']['rule']}`) | {len(t['deciding_cells'])} | {t['deciding_queries']} | "
            f"{_fmt(share)} | " + " | ".join(cells) + " |"
        )
    return lines


def rule_json(name: str, record: dict) -> dict:
    """The ``--json-out`` entry of one task: the issue's fields, all and deciding-cell."""
    methods = record["methods"]

    def fields(key: str) -> dict:
        icl = {
            k.split()[0].removeprefix("curve:icl-"): v[key] for k, v in methods.items() if "curve:icl-" in k
        }
        main_icl = [(k, v) for k, v in methods.items() if k.startswith("icl-")]
        icl.update({k.split()[0].removeprefix("icl-"): v[key] for k, v in main_icl})
        return {
            "zero_shot": methods.get("zero-shot", {}).get(key),
            "icl": icl,
            "mtv": methods.get("mtv (non-private)", {}).get(key),
            "dp_mtv": {k.split("@")[1]: v[key] for k, v in methods.items() if k.startswith("dp-mtv@")},
            "bayes": {k.removeprefix("bayes: "): v[key] for k, v in methods.items() if k in bayes.LEARNERS},
        }

    count = methods.get("zero-shot", {}).get("deciding_count", 0)
    return {
        "rule": name,
        "trained": record["trained"],
        **fields("accuracy"),
        "deciding": {**fields("deciding_accuracy"), "count": count, "cells": record["deciding_cells"]},
        "ceiling": record["ceiling"],
        "icl_prompts_with_deciding_demo": record["icl_prompts_with_deciding_demo"],
    }


def write_json_out(path: Path, per_task: dict[str, dict], names) -> None:
    """``dpmtv demo --json-out``: one :func:`rule_json` entry per typed rule (or task)."""
    entries = [rule_json(n, per_task[n]) for n in names]
    write_text_atomically(path, json.dumps(entries, indent=1) + "\n")
