"""What the demo runs: tasks, seeds, sizes and budgets, the ``dpmtv eval`` settings they map to,
and the privacy statement it prints."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dpmtv.embedded import checkpoint_path
from dpmtv.embedded.generator import task_suite
from dpmtv.eval.methods import EvalSettings, parse_methods

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


#: The default demo's tasks: a quarter of the suite, every group in it (3 seen; 4 held-out
#: predicates, from one attribute to an xor; both label maps), so that it takes under half the
#: time of ``--full``, which runs them all.
FAST_TASKS = (
    "name_colour",
    "is_red",
    "blue_or_circle",
    "is_green",
    "yellow_or_square",
    "big_xor_left",
    "2_of_red_circle_big",
    "map_colour",
    "map_shape",
)


def default_config(*, quick: bool = False, full: bool = False) -> DemoConfig:
    """The default demo (:data:`FAST_TASKS` × 3 seeds, the shot curve on 8 test images per task),
    ``full`` (every task of the suite, the shot curve on 16) or ``quick`` (4 tasks, 1 seed, N =
    256, ε = 1: for tests)."""
    if quick:
        return DemoConfig(
            tasks=("name_colour", "is_big", "is_red", "is_green"),
            seeds=(0,),
            records_per_task=256,
            epsilons=(1.0,),
            test_queries=24,
            shot_curve_queries=8,
        )
    if full:
        return DemoConfig(tasks=tuple(task.name for task in task_suite(label_maps=True)))
    return DemoConfig(tasks=FAST_TASKS, shot_curve_queries=8)


def eval_settings(
    config: DemoConfig,
    methods: tuple[str, ...],
    seed: int,
    clip: tuple[float, ...],
    *,
    batch_size: int,
    chunk_tokens: int | None = None,
) -> EvalSettings:
    """The ``dpmtv eval`` settings of one (task, seed) of the demo: ``methods`` at the demo's ε, δ
    and s, the task's public per-layer clip norms ``clip``, answers of one greedy token (the
    embedded model answers in one word), the non-private references switched on (labelled), and
    the public chunk length ``chunk_tokens`` as the build's token budget, so private chunks run
    several per pass (:func:`chunk_tokens`)."""
    return EvalSettings(
        methods=parse_methods(",".join(methods)),
        epsilons=config.epsilons,
        seeds=(seed,),
        delta=config.delta,
        l2_clip_norm=tuple(clip),
        shots_per_chunk=config.shots_per_chunk,
        max_new_tokens=1,
        batch_size=batch_size,
        allow_non_private=True,
        queries_epsilon=config.epsilons[0],  # no extra ε: the demo has no queries plot
        private_prompt_tokens=chunk_tokens,
        progress=False,
    )


def chunk_tokens(adapter, task, shots_per_chunk: int) -> int:
    """The tokens of a full chunk prompt of ``task``, measured on its PUBLIC sample: every
    embedded record has one image, the one question and a one-word answer, so every chunk has
    this length (a longer one would keep its leading demonstrations, the build's public rule)."""
    from dpmtv.data.prompts import chunk_prompt
    from dpmtv.embedded.suite import PUBLIC_SEED, task_records
    from dpmtv.forward.prompt_budget import prompt_length

    public = task_records(task, shots_per_chunk, seed=PUBLIC_SEED, split="public")
    return prompt_length(adapter, chunk_prompt(public, query="record", query_question=""))


def load_defaults(folder: Path | None = None) -> dict:
    return json.loads(((folder or checkpoint_path()) / "dpmtv_defaults.json").read_text())
