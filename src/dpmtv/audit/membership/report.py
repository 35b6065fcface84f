"""The attack's report: JSON, Markdown and ROC plots, written atomically."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpmtv._atomic import save_figure_atomically, write_text_atomically
from dpmtv.audit._io import json_default, write_json_atomically
from dpmtv.audit.membership.metrics import AttackMetrics, roc_curve
from dpmtv.audit.membership.targets import TargetScores, statistic_scores


@dataclass(frozen=True)
class MembershipReport:
    """Scores and metrics of every attacked target, with the public settings of the run."""

    targets: tuple[TargetScores, ...]
    metrics: tuple[AttackMetrics, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)

    HEADER = (
        "target",
        "statistic",
        "AUC",
        "AUC CI",
        "TPR@FPR",
        "FPR",
        "p",
        "members",
        "non-members",
        "own answer m/n",
    )

    def metric(self, target: str, statistic: str = "logprob") -> AttackMetrics:
        for item in self.metrics:
            if item.target == target and item.statistic == statistic:
                return item
        raise KeyError(f"no metrics for target {target!r}, statistic {statistic!r}")

    def target(self, name: str) -> TargetScores:
        return next(t for t in self.targets if t.name == name)

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": dict(self.settings),
            "metrics": [m.to_json() for m in self.metrics],
            "targets": [t.to_json() for t in self.targets],
        }

    def rows(self) -> list[tuple[str, ...]]:
        rows = []
        for m in self.metrics:
            target = self.target(m.target)
            rows.append(
                (
                    m.target,
                    m.statistic,
                    f"{m.auc:.3f}",
                    f"[{m.auc_low:.3f}, {m.auc_high:.3f}]",
                    f"{m.tpr_at_fpr:.3f}",
                    f"{m.achieved_fpr:.3f} (≤{m.target_fpr:g})",
                    f"{m.p_value:.2g}",
                    str(m.num_members),
                    str(m.num_non_members),
                    f"{target.member_greedy.mean():.2f}/{target.non_member_greedy.mean():.2f}",
                )
            )
        return rows

    def to_markdown(self) -> str:
        confidence = self.metrics[0].confidence if self.metrics else 0.95
        resamples = self.metrics[0].bootstrap_resamples if self.metrics else 0
        lines = [
            "# Membership inference: many-shot ICL vs DP-MTV",
            "",
            "Score = log p(record's own answer | query); `calibrated` subtracts the zero-shot model's "
            "score of the same record; `shadow` subtracts its score under the same target rebuilt "
            f"from public records. AUC CI: {confidence:.0%} stratified percentile bootstrap "
            f"({resamples} resamples). TPR@FPR: the best threshold test whose FPR does not exceed the "
            "target (the FPR column shows the one achieved; with n non-members the smallest non-zero "
            "FPR is 1/n). p: one-sided Mann–Whitney, H0 'members score no higher'. Own answer m/n: "
            "how often greedy decoding returns the record's own answer, members/non-members.",
            "",
            "| " + " | ".join(self.HEADER) + " |",
            "|" + "---|" * len(self.HEADER),
            *("| " + " | ".join(row) + " |" for row in self.rows()),
            "",
            "Targets:",
            "",
            *(
                f"- `{t.name}`: {t.description}" + ("" if t.private else " — no privacy guarantee")
                for t in self.targets
            ),
            "",
            "Settings: `" + json.dumps(dict(self.settings), sort_keys=True, default=json_default) + "`",
            "",
        ]
        return "\n".join(lines)

    def save_plot(self, path: str | Path) -> Path:
        """ROC curves (logprob solid, calibrated dashed), linear and log–log."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
        colours = dict(zip([t.name for t in self.targets], plt.rcParams["axes.prop_cycle"].by_key()["color"]))
        styles = {"logprob": "-", "calibrated": "--", "shadow": "-."}
        for m in self.metrics:
            members, others = statistic_scores(self.target(m.target), self.targets[0], m.statistic)
            fpr, tpr, _ = roc_curve(members, others)
            style = styles[m.statistic]
            label = f"{m.target} {m.statistic} (AUC {m.auc:.2f})"
            for ax in axes:  # straight segments between vertices: ties are diagonal
                ax.plot(fpr, tpr, style, color=colours[m.target], label=label)
        floor = 1.0 / max(1, min(min(m.num_members, m.num_non_members) for m in self.metrics))
        for ax, scale in zip(axes, ("linear", "log")):
            ax.plot([floor / 2, 1], [floor / 2, 1], ":", color="grey", label="chance")
            ax.set_xscale(scale)
            ax.set_yscale(scale)
            ax.set_xlabel("false positive rate")
            ax.set_ylabel("true positive rate")
            ax.grid(alpha=0.3)
        axes[1].set_xlim(floor / 2, 1)
        axes[1].set_ylim(floor / 2, 1)
        axes[0].legend(loc="lower right", fontsize="x-small")
        n = self.metrics[0]
        fig.suptitle(f"membership inference ({n.num_members} members, {n.num_non_members} non-members)")
        fig.tight_layout()
        path = Path(path)
        save_figure_atomically(fig, path, dpi=120)
        plt.close(fig)
        return path

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``membership.json``, ``membership.md`` and ``membership_roc.png`` (folder created)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {
            "json": out / "membership.json",
            "markdown": out / "membership.md",
            "plot": out / "membership_roc.png",
        }
        write_json_atomically(paths["json"], self.to_json())
        write_text_atomically(paths["markdown"], self.to_markdown())
        self.save_plot(paths["plot"])
        return paths
