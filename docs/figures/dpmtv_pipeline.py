"""Draw docs/figures/dpmtv_pipeline.png, the figure of "How DP-MTV works".

Run from the repository root: python docs/figures/dpmtv_pipeline.py
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).with_suffix(".png")
PRIVATE, RELEASE, PUBLIC = "#f4d6d6", "#d6ecd6", "#dde6f4"

STAGES = [  # (x, label, colour)
    (0.6, "N private\nimage+text\nrecords", PRIVATE),
    (2.3, "m disjoint\nchunks of s\n(partition)", PRIVATE),
    (4.0, "one many-shot\nprompt per chunk\n→ heads' outputs\nat the last token", PRIVATE),
    (5.7, "clip each layer\nto L2 norm C_l", PRIVATE),
    (7.4, "mean over the\nm chunks\nΔ = 2√(ΣC_l²)/m", PRIVATE),
    (9.1, "+ Gaussian noise\nonce, σ from\n(ε, δ) and Δ", RELEASE),
    (10.8, "task vector\n(.safetensors\n+ card, signed)", RELEASE),
]


def _box(ax: plt.Axes, x: float, y: float, text: str, colour: str) -> None:
    ax.add_patch(
        FancyBboxPatch((x - 0.72, y - 0.55), 1.44, 1.1, boxstyle="round,pad=0.05", fc=colour, ec="#444444")
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=8)


def _arrow(ax: plt.Axes, start: tuple[float, float], end: tuple[float, float]) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color="#444444"))


def main() -> None:
    fig, ax = plt.subplots(figsize=(12, 3.6))
    ax.set_xlim(-0.3, 11.7)
    ax.set_ylim(-1.6, 2.0)
    ax.axis("off")
    for index, (x, text, colour) in enumerate(STAGES):
        _box(ax, x, 1.0, text, colour)
        if index:
            _arrow(ax, (STAGES[index - 1][0] + 0.77, 1.0), (x - 0.77, 1.0))
    _box(ax, 7.4, -0.9, "zero-shot query\n(image + question)", PUBLIC)
    _box(ax, 10.8, -0.9, "the VLM, vector\npatched into\nits heads → answer", PUBLIC)
    _arrow(ax, (8.15, -0.9), (10.05, -0.9))
    _arrow(ax, (10.8, 0.42), (10.8, -0.32))
    ax.text(
        5.0, 1.85, "private: inside the build, never written out", ha="center", fontsize=9, color="#a04040"
    )
    ax.text(9.95, 1.85, "released (ε, δ)-DP", ha="center", fontsize=9, color="#307030")
    ax.text(
        3.9,
        -0.9,
        "post-processing: any number of queries,\nno further privacy cost",
        ha="center",
        fontsize=9,
        color="#304070",
    )
    fig.savefig(OUT, dpi=110, bbox_inches="tight")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
