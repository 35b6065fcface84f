"""One look for every figure: a fixed colour, marker, line style and label per method, and ε axes
written the same way (ticks 0.5 … 8, not 2⁻¹ … 2³).

Used by the evaluation's ``privacy_utility.png`` and ``queries.png`` and the demo's figures, so a
method is recognisable across them. Markers and line styles differ per method, so lines that lie
on top of each other stay distinguishable (and readable in greyscale).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MethodStyle", "epsilon_axis", "method_label", "method_style"]


@dataclass(frozen=True)
class MethodStyle:
    """Matplotlib keyword values of one method family."""

    color: str
    marker: str
    linestyle: str | tuple

    def line(self) -> dict:
        """Keywords for ``plot``/``errorbar``/``axhline``."""
        return {"color": self.color, "marker": self.marker, "linestyle": self.linestyle}

    def reference(self) -> dict:
        """Keywords for a horizontal reference line (no marker)."""
        return {"color": self.color, "linestyle": self.linestyle}


_STYLES = {
    "dp-mtv": MethodStyle("tab:blue", "o", "-"),
    "dp-icl": MethodStyle("tab:orange", "s", "--"),
    "mtv": MethodStyle("tab:green", "^", "-."),
    "icl": MethodStyle("tab:purple", "D", (0, (3, 1, 1, 1, 1, 1))),
    "zero-shot": MethodStyle("dimgrey", "x", ":"),
}
_FALLBACK = MethodStyle("black", "v", "-")


def method_family(method: str) -> str:
    """'dp-mtv', 'dp-icl', 'mtv', 'icl' or 'zero-shot' for the method names of the evaluation
    (``icl:16``, ``dp-icl:4:16``) and of the demo (``icl-16 (non-private)``, ``mtv (non-private)``)."""
    name = method.strip().lower()
    for family in ("dp-mtv", "dp-icl", "zero-shot", "mtv", "icl"):
        if name.startswith(family):
            return family
    return name


def method_style(method: str) -> MethodStyle:
    return _STYLES.get(method_family(method), _FALLBACK)


def method_label(method: str) -> str:
    """The legend label of a method, the same in every figure."""
    family = method_family(method)
    numbers = [int(n) for n in re.findall(r"\d+", method.split("(")[0])]
    if family == "dp-mtv":
        return "DP-MTV"
    if family == "dp-icl":
        return "DP-ICL" + (f" (S = {numbers[0]}, M = {numbers[1]})" if len(numbers) == 2 else "")
    if family == "mtv":
        return "MTV (non-private)"
    if family == "icl":
        return f"ICL{f', {numbers[0]} shots' if numbers else ''} (non-private)"
    if family == "zero-shot":
        return "zero-shot"
    return method


def epsilon_axis(ax, epsilons: Sequence[float]) -> None:
    """Log-scale ε axis with a tick at every evaluated ε, written as plain numbers (0.5, 1, 2 …)."""
    ticks = sorted(set(epsilons))
    ax.set_xscale("log")
    ax.set_xticks(ticks, [f"{e:g}" for e in ticks])
    ax.minorticks_off()
    ax.set_xlabel("privacy budget ε (log scale)")
