"""Training episodes of the embedded family: what `scripts/train_embedded.py` trains on.

Each episode is one task's shots: a training group picked by a mix (:data:`TRAINING_MIX`), a task
within the group (a seen predicate, a naming task, a fresh label map, or a fresh random table),
a per-episode yes-rate for predicates, and fresh images. Held-out tables never occur: the seen
tasks come from :func:`dpmtv.embedded.generator.training_tasks`, and random tables are never a
table of the rule grammar.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

import numpy as np

from dpmtv.embedded.generator import (
    NONCE_WORDS,
    Task,
    label_map_task,
    sample_codes_for_task,
    training_tasks,
    yes_no_table,
)
from dpmtv.embedded.render import render
from dpmtv.embedded.rulespace import in_grammar
from dpmtv.embedded.world import ALL_CODES, ATTRIBUTES, VALUES


@dataclass
class EpisodeBatch:
    """``n_episodes`` episodes of ``n_shots`` examples each, all examples of an episode from one
    task. ``images``: uint8 ``(E*K, 24, 24, 3)`` in episode-major order; ``codes``: ``(E, K, 4)``;
    ``answers``: indices into :data:`ANSWER_WORDS`, ``(E, K)``; ``task_names``: ``E`` names;
    ``kinds``: the group each episode was drawn from (``naming``, ``single``, ``composition``,
    ``label_map``)."""

    images: np.ndarray
    codes: np.ndarray
    answers: np.ndarray
    task_names: list[str]
    kinds: list[str]


#: Default training mix: probability of each group per episode.
TRAINING_MIX: dict[str, float] = {
    "naming": 0.08,
    "single": 0.12,
    "composition": 0.18,
    "xor": 0.12,
    "triple": 0.20,
    "label_map": 0.30,
}
_GROUP_KINDS = {
    "naming": ("naming",),
    "single": ("predicate", "negation"),
    "composition": ("conjunction", "disjunction"),
    "xor": ("xor",),
    "triple": ("conjunction3", "disjunction3", "at_least_2"),
}


@cache
def _training_pools() -> dict[str, tuple[Task, ...]]:
    tasks = training_tasks()
    pools = {}
    for group, kinds in _GROUP_KINDS.items():
        distinct: dict[bytes, Task] = {}
        for t in tasks:  # one task per distinct table: uniform over tables, not over names
            if t.kind in kinds:
                distinct.setdefault(t.table.tobytes(), t)
        pools[group] = tuple(distinct.values())
    # conjunctions of two plain values only (no negated literal, no disjunction)
    pools["conjunction"] = tuple(
        t for t in pools["composition"] if t.kind == "conjunction" and "not_" not in t.name
    )
    return pools


def training_pools() -> dict[str, list[Task]]:
    """The seen tasks each training group draws from (uniformly over distinct tables)."""
    return {group: list(tasks) for group, tasks in _training_pools().items()}


#: Attribute pairs a combination label map may name (at most 8 classes: one word each).
LABEL_MAP_PAIRS: tuple[tuple[str, str], ...] = tuple(
    (a, b)
    for i, a in enumerate(ATTRIBUTES)
    for b in ATTRIBUTES[i + 1 :]
    if len(VALUES[a]) * len(VALUES[b]) <= 8
)
PAIR_MAP_SHARE = 0.25  # share of training label maps over an attribute pair


def random_label_map(rng: np.random.Generator) -> Task:
    """A fresh label map: a random attribute (or, with probability :data:`PAIR_MAP_SHARE`, a pair
    of attributes), its classes named by distinct random nonce words."""
    if rng.uniform() < PAIR_MAP_SHARE:
        attribute: str | tuple[str, ...] = LABEL_MAP_PAIRS[rng.integers(len(LABEL_MAP_PAIRS))]
        n_classes = int(np.prod([len(VALUES[a]) for a in attribute]))
    else:
        attribute = ATTRIBUTES[rng.integers(len(ATTRIBUTES))]
        n_classes = len(VALUES[attribute])
    words = [NONCE_WORDS[i] for i in rng.choice(len(NONCE_WORDS), n_classes, replace=False)]
    return label_map_task(attribute, words)


BURSTY_POOL_SIZES = (2, 3, 4, 6)


def _bursty_codes(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` shots drawn uniformly from a fresh pool of a few distinct attribute combinations."""
    size = BURSTY_POOL_SIZES[rng.integers(len(BURSTY_POOL_SIZES))]
    pool = ALL_CODES[rng.choice(len(ALL_CODES), size, replace=False)]
    return pool[rng.integers(0, size, n)].copy()


def random_table(rng: np.random.Generator) -> Task:
    """A yes/no task whose 64 attribute combinations are independent fair coins (training group
    ``random_table``): nothing but a combination's own demonstrations predicts its answer, so a
    learner has to carry the evidence combination by combination. Drawn again while the table (or
    its complement) is a table of the rule grammar or constant: the public hold-out is over the
    grammar's tables, and training never draws a held-out one."""
    while True:
        truth = rng.uniform(size=len(ALL_CODES)) < 0.5
        if truth.any() and not truth.all() and not in_grammar(truth):
            return Task(name="random_table", kind="rule", held_out=False, table=yes_no_table(truth))


def sample_episodes(
    rng: np.random.Generator,
    n_episodes: int,
    n_shots: int,
    *,
    mix: Mapping[str, float] | None = None,
    yes_rate_range: tuple[float, float] = (0.3, 0.7),
    bursty_label_maps: float = 0.0,
) -> EpisodeBatch:
    """Training episodes: each picks a group by ``mix`` (default :data:`TRAINING_MIX`), a task
    uniformly within the group (a fresh map for ``label_map``, a fresh coin table for
    ``random_table``, which no default mix draws), a per-episode yes-rate for
    predicates, and fresh images. Held-out tasks never occur.

    ``bursty_label_maps``: the share of label-map episodes whose shots all come from a small pool
    of :data:`BURSTY_POOL_SIZES` attribute combinations, so the query's combination recurs among
    the demonstrations (bursty exemplars, Chan et al. 2022: copying the label of a matching
    demonstration is rewarded before matching on one attribute is). 0 draws nothing extra from
    ``rng`` (earlier runs replay unchanged)."""
    mix = dict(TRAINING_MIX if mix is None else mix)
    groups = [g for g, p in mix.items() if p > 0]
    weights = np.array([mix[g] for g in groups], dtype=float)
    pools = training_pools()
    all_codes, all_answers, names, kinds = [], [], [], []
    for _ in range(n_episodes):
        group = groups[rng.choice(len(groups), p=weights / weights.sum())]
        if group == "label_map":
            task = random_label_map(rng)
        elif group == "random_table":
            task = random_table(rng)
        else:
            task = pools[group][rng.integers(len(pools[group]))]
        codes = sample_codes_for_task(task, n_shots, rng, yes_rate=rng.uniform(*yes_rate_range))
        if group == "label_map" and bursty_label_maps > 0 and rng.uniform() < bursty_label_maps:
            codes = _bursty_codes(rng, n_shots)
        all_codes.append(codes)
        all_answers.append(task.answer_indices(codes))
        names.append(task.name)
        kinds.append(group)
    codes = np.stack(all_codes)
    images = render(codes.reshape(-1, 4), rng)
    return EpisodeBatch(images, codes, np.stack(all_answers), names, kinds)
