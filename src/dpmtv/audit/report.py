"""The audit's outputs: ``audit.json``, ``audit.md`` (table) and ``audit.png`` (ε_lower vs ε_claimed)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpmtv._atomic import save_figure_atomically, write_text_atomically
from dpmtv.audit._io import write_json_atomically
from dpmtv.audit.mechanism import AuditPoint

__all__ = ["AuditReport", "bonferroni_confidence"]

DEFAULT_EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)


def bonferroni_confidence(family_confidence: float, num_tests: int) -> float:
    """Per-test confidence ``1 − (1 − family_confidence) / K`` for ``K`` tests.

    The audit tests "ε_lower > ε_claimed" at each of ``K`` claimed ε values; with each bound at
    this confidence, the probability that ANY correct claim is reported as a violation is at most
    ``1 − family_confidence`` (Bonferroni's union bound; it needs no independence between tests).
    """
    if not 0.0 < family_confidence < 1.0 or num_tests < 1:
        raise ValueError(f"need a confidence in (0, 1) and >= 1 test, got {family_confidence}, {num_tests}")
    return 1.0 - (1.0 - family_confidence) / num_tests


@dataclass(frozen=True)
class AuditReport:
    """Audit points over claimed ε, with the public settings they were measured under."""

    mode: str  # "synthetic" | "model"
    points: tuple[AuditPoint, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)
    family_confidence: float | None = None  # set when the points' bounds are Bonferroni-corrected

    @property
    def violations(self) -> list[AuditPoint]:
        return [p for p in self.points if p.violation]

    @property
    def confidence(self) -> float:
        """The family-wise confidence over all ε values (per point when uncorrected)."""
        if self.family_confidence is not None:
            return self.family_confidence
        return self.point_confidence

    @property
    def point_confidence(self) -> float:
        return self.points[0].bound.confidence if self.points else math.nan

    @property
    def correction(self) -> str:
        return "bonferroni" if self.family_confidence is not None else "none"

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "settings": dict(self.settings),
            "confidence": self.confidence,
            "multiple_testing_correction": self.correction,
            "per_point_confidence": self.point_confidence,
            "violation": bool(self.violations),
            "points": [p.to_json() for p in self.points],
        }

    def rows(self) -> list[tuple[str, ...]]:
        """Table rows, in the order of :attr:`HEADER`."""
        return [
            (
                f"{p.epsilon_claimed:g}",
                f"{p.epsilon_lower:.3f}",
                f"{p.bound.epsilon_point:.3f}",
                f"{p.epsilon_canary:.3f}",
                f"{p.bound.epsilon_max_detectable:.3f}",
                f"{p.shift_norm / p.l2_sensitivity:.3f}",
                f"{p.bound.tpr:.4f}",
                f"{p.bound.fpr:.4f}",
                str(p.trials),
                _verdict(p),
            )
            for p in self.points
        ]

    HEADER = (
        "ε claim",
        "ε lower",
        "plug-in",
        "ε canary",
        "max det.",
        "shift/Δ",
        "TPR",
        "FPR",
        "trials",
        "verdict",
    )

    def to_markdown(self) -> str:
        mechanism = self.points[0].mechanism if self.points else "?"
        lines = [
            f"# Empirical privacy audit ({self.mode}, mechanism: {mechanism})",
            "",
            f"ε lower is a {self.point_confidence:.4g}-confidence lower bound (Clopper–Pearson, δ "
            "subtracted, threshold chosen on held-out trials)"
            + (
                f"; Bonferroni-corrected over the {len(self.points)} ε values, so all of them hold "
                f"together with confidence {self.confidence:.0%}"
                if self.family_confidence is not None
                else ""
            )
            + "; a VIOLATION means the release "
            "leaks more than claimed. ε canary is the analytic ε of the canary's measured shift "
            "(the limit with infinitely many trials); shift/Δ is 1 for a worst-case canary; max det. "
            "is the largest ε_lower this many trials can certify (a claim at or above it is "
            "'beyond reach': it cannot be refuted with these trials).",
            "",
            "| " + " | ".join(self.HEADER) + " |",
            "|" + "---|" * len(self.HEADER),
            *("| " + " | ".join(row) + " |" for row in self.rows()),
            "",
            "Settings: `" + json.dumps(dict(self.settings), sort_keys=True, default=str) + "`",
            "",
        ]
        return "\n".join(lines)

    def save_plot(self, path: str | Path) -> Path:
        """ε_lower (and ε_canary) against ε_claimed, with the y = x line of the claim."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        claimed = [p.epsilon_claimed for p in self.points]
        fig, ax = plt.subplots(figsize=(5, 4))
        ax.plot(claimed, claimed, "k--", label="claimed (y = x)")
        canary = [min(p.epsilon_canary, 2 * max(claimed)) for p in self.points]
        ax.plot(claimed, canary, "s:", color="grey", label="ε canary (∞ trials, clipped to plot)")
        detectable = [p.bound.epsilon_max_detectable for p in self.points]
        ax.plot(claimed, detectable, ":", color="tab:orange", label="max detectable (trials)")
        ax.plot(
            claimed, [p.epsilon_lower for p in self.points], "o-", label=f"ε lower ({self.confidence:.0%})"
        )
        for p in self.violations:
            ax.plot([p.epsilon_claimed], [p.epsilon_lower], "rx", markersize=12, mew=2)
        ax.set_xticks(claimed)
        ax.set_xlabel("ε claimed")
        ax.set_ylabel("ε")
        ax.set_title(f"privacy audit ({self.mode}, {self.points[0].mechanism if self.points else ''})")
        ax.legend(loc="upper left", fontsize="small")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = Path(path)
        save_figure_atomically(fig, path, dpi=120)
        plt.close(fig)
        return path

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``audit.json``, ``audit.md`` and ``audit.png`` into ``out_dir`` (created)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"json": out / "audit.json", "markdown": out / "audit.md", "plot": out / "audit.png"}
        write_json_atomically(paths["json"], self.to_json())
        write_text_atomically(paths["markdown"], self.to_markdown())
        self.save_plot(paths["plot"])
        return paths


def _verdict(point: AuditPoint) -> str:
    if point.violation:
        return "VIOLATION"
    if point.epsilon_claimed >= point.bound.epsilon_max_detectable:
        return "beyond reach"
    return "ok"
