"""The demo's per-task report: recognition ceilings, deciding cells and the ``--json-out`` file."""

from __future__ import annotations

import json
import math
from pathlib import Path

from dpmtv._atomic import write_text_atomically
from dpmtv.demo.recognition import GROUP_TITLES
from dpmtv.demo.story import gain_words
from dpmtv.embedded import bayes
from dpmtv.eval._markdown import markdown_table

_HEADLINE = (("zero-shot", None, "zero-shot"), ("icl-16", None, "ICL-16"), ("mtv", None, "MTV"))


def _find(rows: list[dict], prefix: str, epsilon=None) -> dict | None:
    return next((r for r in rows if r["method"].startswith(prefix) and r["epsilon"] == epsilon), None)


def _dp_epsilon(rows: list[dict]) -> float | None:
    epsilons = [r["epsilon"] for r in rows if r["method"] == "dp-mtv"]
    return 1.0 if 1.0 in epsilons else (epsilons[0] if epsilons else None)


def _fmt(value) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def epsilon_cell(row: dict) -> str:
    """The ε column of a summary row: its ε, else ∞ for the non-private references and "no
    private data" for zero-shot."""
    if row["epsilon"] is not None:
        return f"{row['epsilon']:g}"
    return "no private data" if row["method"].startswith("zero-shot") else "∞ (non-private)"


def deciding_lines(
    summary: dict[str, list[dict]], per_task: dict[str, dict], references: dict[str, list[dict]]
) -> list[str]:
    """Per non-seen group, in words: how often the trained rule closest to each task answers
    right, the deciding-cell queries it answers wrong and each method's accuracy on them, then
    what ideal learners (no model) score on the same demonstrations (``references``, the summaries
    of the ICL runs' :class:`~dpmtv.eval.benchmarks.embedded.DemonstrationFacts`)."""
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
                parts.append(
                    f"{label} {_fmt(row.get('deciding_accuracy'))} (all queries {row['accuracy']:.3f})"
                )
        count = (_find(rows, "zero-shot") or {}).get("deciding_count", 0)
        title = f"{GROUP_TITLES[group].capitalize()} ({len(tasks)} tasks)"
        if ceiling == 0:
            setting = (
                f"{title}: no trained rule gives these answer words, so all {count} test queries are "
                "ones only the demonstrations can settle"
            )
        else:
            setting = (
                f"{title}: the trained rule closest to each task (the one the model can recognise from "
                f"the demonstrations) already answers {ceiling:.3f} of the test queries right, on average; "
                f"the {count} queries it answers wrong (the deciding cells) are the ones only the "
                "demonstrations can settle"
            )
        lines.append(f"{setting}. On them: " + ", ".join(parts) + ".")
        if references.get(group):
            learned = "; ".join(
                f"one that knows {_LEARNER_WORDS[r['method']]} {_fmt(r.get('deciding_accuracy'))}"
                for r in references[group]
            )
            lines.append(
                f"For comparison, ideal learners (no model) that see the same {_icl_shots(summary[group])} "
                f"demonstrations and pick the most likely rule score on those queries: {learned}. A model "
                "above the first has learned more from the demonstrations than which trained rule they show."
            )
    return lines


_LEARNER_WORDS = {
    bayes.RECOGNISER: "only the trained rules",
    bayes.SHAPES: "every rule of the trained shapes",
    bayes.GRAMMAR: "every rule of the whole grammar",
}


def _icl_shots(rows: list[dict]) -> str:
    icl = _find(rows, "icl-")
    return icl["method"].split()[0].removeprefix("icl-") if icl else "ICL"


def deciding_markdown(summary: dict[str, list[dict]]) -> list[str]:
    """Deciding-cell accuracy per method for the non-seen groups (pooled over tasks), then DP-MTV
    against zero-shot, ICL and MTV there in words."""
    groups = [g for g in summary if g != "seen"]
    if not groups:
        return []
    table = []
    for row in summary[groups[0]]:
        cells = []
        for g in groups:
            match = _find(summary[g], row["method"], row["epsilon"]) or {}
            ci = match.get("deciding_ci95")
            value = _fmt(match.get("deciding_accuracy")) + (f" ± {ci:.3f}" if ci is not None else "")
            cells.append(f"{value} (n = {match.get('deciding_count', 0)} queries)")
        table.append([row["method"], epsilon_cell(row), *cells])
    lines = [
        "",
        "## The queries only the demonstrations can settle",
        "",
        "Accuracy on the deciding-cell queries (where the trained rule closest to the task answers "
        "wrong; pooled over the group's tasks per seed, mean ± 95% t-interval over seeds; n counts "
        "those queries over all seeds). The figure deciding_cells.png draws it.",
        "",
        *markdown_table(["method", "ε", *(GROUP_TITLES[g] for g in groups)], table),
        "",
    ]
    if any(r["method"] == "dp-mtv" and r["epsilon"] == 1.0 for r in summary[groups[0]]):
        lines += [
            f"- {GROUP_TITLES[g]}, deciding cells: {gain_words(summary[g], key='deciding_accuracy')}."
            for g in groups
        ]
    return lines


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
    header = [
        "task",
        "trained",
        "closest trained rule (accuracy)",
        "deciding cells",
        "deciding queries",
        "ICL prompts showing one",
        "zero-shot",
        f"ICL-{config.icl_shots}",
        "MTV",
        f"DP-MTV ε = {eps:g}",
        "ideal: trained rules",
        "ideal: trained shapes",
        "ideal: whole grammar",
    ]
    table = []
    for name, t in per_task.items():
        if t["group"] == "seen":
            continue
        cells = []
        for key in keys:
            m = t["methods"].get(key, {})
            cells.append(f"{_fmt(m.get('accuracy'))} / {_fmt(m.get('deciding_accuracy'))}")
        ceiling = f"{t['ceiling']['accuracy']:.3f} (`{t['ceiling']['rule']}`)"
        trained = "yes" if t["trained"] else "no"
        counts = [str(len(t["deciding_cells"])), str(t["deciding_queries"])]
        table.append(
            [f"`{name}`", trained, ceiling, *counts, _fmt(t["icl_prompts_with_deciding_demo"]), *cells]
        )
    return [
        "",
        "## Per held-out task",
        "",
        "Per task not seen in training: the trained rule closest to it and its accuracy on the test "
        "queries, the deciding cells (attribute combinations where that rule answers wrong) and the "
        f"test queries in them, the share of ICL-{config.icl_shots} prompts whose demonstrations show "
        "one, and each method's accuracy on all / deciding-cell queries. The last three columns are "
        f"no model: ideal learners that answer from the same {config.icl_shots} demonstrations, "
        "knowing only the trained rules, every rule of the trained shapes, or every rule of the "
        "grammar (`dpmtv.embedded.bayes`); n/a where they do not apply (label maps).",
        "",
        *markdown_table(header, table),
    ]


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
