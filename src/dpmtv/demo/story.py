"""What the demo says in words: the share of a gain a method keeps (or that it fell below
zero-shot), where every output went, and the closing sentences that end the run and open the
report.

A share of a gain is a ratio of two differences from zero-shot; when the method is below
zero-shot it is negative ("keeps -89 % of the gain"), which reads as nonsense. The words here say
instead that the method fell below zero-shot, with both numbers.
"""

from __future__ import annotations

import math
from pathlib import Path

from dpmtv.demo.recognition import GROUP_TITLES

#: The docs page that explains what a task vector on the embedded model does not carry.
EMBEDDED_MODEL_DOCS = "docs/embedded-model.md"

#: A gain over zero-shot below this (in accuracy) has no share worth reporting: with tens to a
#: few hundred queries per group it is within the seeds' spread (the deciding cells' ICL gain of
#: 0.015 gave "422 %").
MIN_GAIN_TO_SHARE = 0.05

#: The demo's outputs in ``--out``, and what each holds, in the order they are listed.
OUTPUTS = (
    ("report.md", "the report: every table and what it means"),
    ("privacy_utility.png", "accuracy against ε per task group"),
    ("deciding_cells.png", "accuracy on the queries only the demonstrations can settle"),
    ("accuracy_vs_shots.png", "ICL accuracy by number of demonstrations"),
    ("results.json", "every (task, seed, method, ε) row"),
    ("summary.json", "the summaries, the settings and the command"),
)


def lookup(rows: list[dict], prefix: str, epsilon: float | None = None, key: str = "accuracy") -> float:
    """``key`` of the first summary row whose method starts with ``prefix`` at ``epsilon``; NaN
    when there is none or it has no value."""
    row = next((r for r in rows if r["method"].startswith(prefix) and r["epsilon"] == epsilon), None)
    value = None if row is None else row.get(key)
    return math.nan if value is None else float(value)


def gain_kept(summary, epsilon: float = 1.0, *, key: str = "accuracy") -> dict[str, float]:
    """DP-MTV's gain over zero-shot at ``epsilon`` as a fraction of ICL's and of MTV's gains, and
    MTV's accuracy as a fraction of ICL's; ``key="deciding_accuracy"``: the same on the
    deciding-cell queries. NaN where a gain is below :data:`MIN_GAIN_TO_SHARE`."""
    zero, icl = lookup(summary, "zero-shot", key=key), lookup(summary, "icl", key=key)
    mtv, dp = lookup(summary, "mtv", key=key), lookup(summary, "dp-mtv", epsilon, key=key)
    return {
        "of_icl_gain": _share_of_gain(dp - zero, icl - zero),
        "of_mtv_gain": _share_of_gain(dp - zero, mtv - zero),
        "mtv_over_icl": mtv / icl if icl != 0 and not math.isnan(icl) else math.nan,
    }


def _share_of_gain(kept: float, gain: float) -> float:
    return kept / gain if gain >= MIN_GAIN_TO_SHARE else math.nan


def gain_words(rows: list[dict], epsilon: float = 1.0, *, key: str = "accuracy") -> str:
    """DP-MTV at ``epsilon`` against zero-shot, ICL and MTV in words: "fell below zero-shot (a vs
    b)" when it did, else the shares of ICL's and MTV's gains it keeps (or that a gain is too
    small to share)."""
    zero, dp = lookup(rows, "zero-shot", key=key), lookup(rows, "dp-mtv", epsilon, key=key)
    head = f"DP-MTV at ε = {epsilon:g}"
    if math.isnan(zero) or math.isnan(dp):
        return f"{head}: not run"
    if dp < zero:
        return f"{head} fell below zero-shot ({dp:.3f} against {zero:.3f})"
    kept = gain_kept(rows, epsilon, key=key)
    parts = [
        _share_words(kept["of_icl_gain"], "ICL"),
        _share_words(kept["of_mtv_gain"], "MTV"),
    ]
    return f"{head} ({dp:.3f}, zero-shot {zero:.3f}) " + " and ".join(parts)


def _share_words(share: float, method: str) -> str:
    if math.isnan(share):
        return f"has no share of {method}'s gain to keep ({method} gained under {MIN_GAIN_TO_SHARE:g})"
    return f"keeps {share:.0%} of {method}'s gain over zero-shot"


def output_lines(out: Path, artifact: Path) -> list[str]:
    """Where every output of the demo went, one line each."""
    from dpmtv.artifact.card import card_path

    lines = [f"Outputs in {out}/:"]
    lines += [f"  {out / name}: {what}" for name, what in OUTPUTS if (out / name).exists()]
    lines.append(f"  {artifact}: the ε = 1 task vector, a real private release (card: {card_path(artifact)})")
    return lines


def closing_sentences(summary: dict[str, list[dict]], config, artifact: Path) -> list[str]:
    """At most six plain sentences: what was shown, the numbers that matter, the caveat and where
    it is explained."""
    seeds = len(config.seeds)
    epsilons = ", ".join(f"{e:g}" for e in config.epsilons)
    where = [
        words
        for group, words in (
            ("seen", "tasks the model was trained on"),
            ("held_out", "held-out tasks it never saw (learned from the demonstrations alone)"),
            ("rules", "the rules typed"),
        )
        if group in summary or (group == "held_out" and "label_maps" in summary)
    ]
    sentences = [
        f"Shown: zero-shot, {config.icl_shots}-shot ICL, MTV and DP-MTV at ε = {epsilons} on "
        f"{' and on '.join(where)}, {seeds} seed{'s' if seeds != 1 else ''} each, with N = "
        f"{config.records_per_task} private records per task and 95% intervals over seeds."
    ]
    dp_epsilon = 1.0 if 1.0 in config.epsilons else config.epsilons[0]
    for group in ("seen", "held_out", "label_maps", "rules"):
        if group in summary:
            sentences.append(_numbers_sentence(group, summary[group], dp_epsilon))
    sentences = sentences[:4]  # room for the caveat and the pointer
    caveat = _caveat(summary.get("held_out") or summary.get("rules") or [], dp_epsilon)
    if caveat:
        sentences.append(caveat)
    sentences.append(
        f"The ε = {dp_epsilon:g} artifact {artifact} is a real private release; why a task vector on "
        f"this small model falls short of ICL where only the demonstrations can tell: {EMBEDDED_MODEL_DOCS}."
    )
    return sentences


def _numbers_sentence(group: str, rows: list[dict], epsilon: float) -> str:
    values = [
        ("zero-shot", lookup(rows, "zero-shot")),
        ("ICL", lookup(rows, "icl")),
        ("MTV", lookup(rows, "mtv")),
        (f"DP-MTV at ε = {epsilon:g}", lookup(rows, "dp-mtv", epsilon)),
    ]
    numbers = ", ".join(f"{name} {value:.2f}" for name, value in values if not math.isnan(value))
    return f"{GROUP_TITLES[group].capitalize()}: accuracy {numbers}."


def _caveat(rows: list[dict], epsilon: float) -> str | None:
    """The deciding-cell sentence of the held-out predicates (None without deciding cells)."""
    key = "deciding_accuracy"
    zero, icl = lookup(rows, "zero-shot", key=key), lookup(rows, "icl", key=key)
    mtv, dp = lookup(rows, "mtv", key=key), lookup(rows, "dp-mtv", epsilon, key=key)
    if any(math.isnan(v) for v in (zero, icl, mtv, dp)):
        return None
    below = [name for name, value in (("MTV", mtv), ("DP-MTV", dp)) if value < zero]
    scores = (
        "On the held-out queries only the demonstrations can settle (where the trained rule closest "
        f"to the task answers wrong), ICL scores {icl:.2f}, MTV {mtv:.2f} and DP-MTV {dp:.2f}"
    )
    if not below:
        return f"{scores}: the task vectors stayed at or above zero-shot ({zero:.2f})."
    return (
        f"{scores}: {' and '.join(below)} fell below zero-shot ({zero:.2f}), because on this 1.2 "
        "M-parameter model the vector carries the rule the model recognises, not what the "
        "demonstrations taught beyond it."
    )
