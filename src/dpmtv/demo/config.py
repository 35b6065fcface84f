"""What the demo runs: tasks, seeds, sizes and budgets, and the privacy statement it prints."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dpmtv.embedded import checkpoint_path
from dpmtv.embedded.generator import task_suite

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
    rules: tuple[str, ...] = ()  # typed rules (dpmtv demo --rule), reported like held-out tasks


def default_config(*, quick: bool) -> DemoConfig:
    names = tuple(task.name for task in task_suite(label_maps=True))
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
