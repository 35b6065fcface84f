"""Procedural images and the embedded task family (deterministic by seed).

Every image is 24x24 RGB and shows exactly one shape with four attributes:

- colour: red, green, blue, yellow (each with per-image RGB jitter),
- shape: square, circle, triangle, cross,
- size: small, big,
- position: left, right (the shape's centre is in the left or right half; the row is random),

on a dark, randomly grey background with Gaussian pixel noise. The 4 x 4 x 2 x 2 = 64 attribute
combinations are the whole world: every predicate is a truth table over them.

Tasks are defined only by their demonstrations (the question text is the same fixed public string
for all of them, :data:`QUESTION`):

- *naming* tasks answer with the value of one hidden attribute (``name_colour`` -> ``red`` ...);
  the answer vocabularies of the attributes are disjoint, so one demonstration reveals the task;
- *predicate* tasks answer ``yes``/``no`` for one hidden property: a single value (``is_red``), its
  negation (``is_not_red``), or a conjunction / disjunction of two literals on different
  attributes (``green_and_cross``, ``yellow_or_square``, ``red_and_not_circle``). There are 284
  of them, so a new one is easy to define; each demonstration carries about one bit, so accuracy
  climbs with the number of shots;
- *label-map* tasks name one attribute with arbitrary nonce words (:data:`NONCE_WORDS`): the map
  is drawn afresh for every training episode, so only the demonstrations say which word is which.

Held out of training: the predicates of :data:`HELD_OUT_TASKS` *and their complements* (``is_green``
and ``is_not_green``; ``green_and_cross`` and ``not_green_or_not_cross``), so no trained task has
the same or the flipped truth table as a held-out one. :func:`task_suite` is the evaluation suite
(seen and held-out tasks, each marked ``held_out``); :func:`training_tasks` lists what training
draws from.

Everything random goes through a ``numpy.random.Generator`` passed by the caller, so a seed fixes
every pixel.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

import numpy as np
from PIL import Image

from dpmtv.errors import ParameterError

IMAGE_SIZE = 24
QUESTION = "What is the answer?"

ATTRIBUTES: tuple[str, ...] = ("colour", "shape", "size", "position")
VALUES: dict[str, tuple[str, ...]] = {
    "colour": ("red", "green", "blue", "yellow"),
    "shape": ("square", "circle", "triangle", "cross"),
    "size": ("small", "big"),
    "position": ("left", "right"),
}
YES, NO = "yes", "no"
#: Answer words of label-map tasks: made-up words with no meaning of their own.
NONCE_WORDS: tuple[str, ...] = (
    "dax", "wug", "blick", "fep", "zup", "kiki", "bouba", "tove",
    "mip", "rax", "lom", "pim", "sel", "tark", "vun", "yem",
    "zib", "gorp", "hab", "jek", "nol", "quib", "wex", "fid",
)  # fmt: skip
#: Every answer word of the family, in a fixed order (the tokenizer's answer vocabulary).
ANSWER_WORDS: tuple[str, ...] = (
    *VALUES["colour"],
    *VALUES["shape"],
    *VALUES["size"],
    *VALUES["position"],
    YES,
    NO,
    *NONCE_WORDS,
)
ANSWER_INDEX: dict[str, int] = {word: i for i, word in enumerate(ANSWER_WORDS)}

#: Evaluation-only predicates (never trained, nor their complements): two single values, four
#: conjunctions, two disjunctions and two compositions with a negated literal, spread over the
#: attribute pairs. The two single values are also the ones the first embedded model (which the
#: shipped checkpoint is fine-tuned from) never saw, and it saw no composition at all.
HELD_OUT_TASKS: tuple[str, ...] = (
    "is_green",
    "is_cross",
    "green_and_cross",
    "blue_and_small",
    "circle_and_right",
    "big_and_left",
    "yellow_or_square",
    "triangle_or_big",
    "red_and_not_circle",
    "not_blue_or_left",
)
HELD_OUT_PREDICATES: tuple[str, ...] = tuple(n for n in HELD_OUT_TASKS if n.startswith("is_"))
#: Seen tasks of the evaluation suite besides naming (trained on; a spread of every kind).
SEEN_EVAL_TASKS: tuple[str, ...] = (
    "is_red",
    "is_triangle",
    "is_big",
    "is_left",
    "is_not_yellow",
    "red_and_square",
    "blue_or_circle",
    "yellow_and_big",
    "not_green_and_right",
)
#: Label maps of the evaluation suite: fixed nonce maps (drawn from a fixed seed), effectively new
#: since training draws a fresh map per episode.
LABEL_MAP_ATTRIBUTES: tuple[str, ...] = ("colour", "shape")

_BASE_RGB = np.array([[215, 45, 45], [45, 185, 65], [55, 90, 225], [225, 210, 45]], dtype=np.float32)
_COLOUR_JITTER = 25.0
_NOISE_STD = 10.0
_SMALL_R = (3.0, 4.0)
_BIG_R = (6.0, 7.5)
_LEFT_MAX_X = 9.5  # left centres lie in [r, 9.5]; right centres mirror them (23 - x)
_ATTR_POS = {name: i for i, name in enumerate(ATTRIBUTES)}
#: All 64 attribute combinations, ``(64, 4)`` codes; a predicate is a boolean table over its rows.
ALL_CODES = np.array(list(itertools.product(*(range(len(VALUES[a])) for a in ATTRIBUTES))), dtype=np.int64)
_RADIX = np.array([16, 4, 2, 1], dtype=np.int64)


def combo_index(codes: np.ndarray) -> np.ndarray:
    """Row of :data:`ALL_CODES` for each code row ``(..., 4)``."""
    return np.asarray(codes, dtype=np.int64) @ _RADIX


# --------------------------------------------------------------------------------------------
# attributes and rendering
# --------------------------------------------------------------------------------------------
def attributes_to_dict(codes: Sequence[int]) -> dict[str, str]:
    """Integer codes ``(colour, shape, size, position)`` as ``{"colour": "red", ...}``."""
    return {name: VALUES[name][int(code)] for name, code in zip(ATTRIBUTES, codes, strict=True)}


def _codes_from_dict(attributes: Mapping[str, str]) -> np.ndarray:
    return np.array([[VALUES[a].index(attributes[a]) for a in ATTRIBUTES]], dtype=np.int64)


def sample_attributes(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` uniformly drawn attribute codes, shape ``(n, 4)`` (colour, shape, size, position)."""
    return np.stack([rng.integers(0, len(VALUES[name]), n) for name in ATTRIBUTES], axis=1).astype(np.int64)


def render(codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Images for attribute codes ``(n, 4)``: a uint8 array ``(n, 24, 24, 3)``. Vectorised."""
    codes = np.asarray(codes, dtype=np.int64).reshape(-1, 4)
    n = len(codes)
    colour, shape, size, position = codes.T
    radius = np.where(size == 1, rng.uniform(*_BIG_R, n), rng.uniform(*_SMALL_R, n)).astype(np.float32)
    u = rng.uniform(0.0, 1.0, n).astype(np.float32)
    cx = radius + u * np.maximum(_LEFT_MAX_X - radius, 0.0)
    cx = np.where(position == 1, (IMAGE_SIZE - 1) - cx, cx)
    v = rng.uniform(0.0, 1.0, n).astype(np.float32)
    cy = radius + v * ((IMAGE_SIZE - 1) - 2 * radius)

    grid = np.arange(IMAGE_SIZE, dtype=np.float32)
    dx = grid[None, None, :] - cx[:, None, None]
    dy = grid[None, :, None] - cy[:, None, None]
    r = radius[:, None, None]
    adx, ady = np.abs(dx), np.abs(dy)
    masks = np.stack(
        [
            np.maximum(adx, ady) <= 0.85 * r,  # square
            dx * dx + dy * dy <= r * r,  # circle
            (dy >= -r) & (dy <= r) & (adx <= 0.5 * (dy + r) + 0.3),  # triangle, apex up
            ((adx <= 0.35 * r) & (ady <= r)) | ((ady <= 0.35 * r) & (adx <= r)),  # cross
        ],
        axis=1,
    )
    mask = masks[np.arange(n), shape]  # (n, 24, 24)

    rgb = _BASE_RGB[colour] + rng.uniform(-_COLOUR_JITTER, _COLOUR_JITTER, (n, 3))
    background = rng.uniform(0.0, 70.0, (n, 1, 1, 1)).astype(np.float32)
    image = np.where(mask[..., None], rgb[:, None, None, :].astype(np.float32), background)
    image = image + rng.normal(0.0, _NOISE_STD, image.shape).astype(np.float32)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def to_pil(images: np.ndarray) -> list[Image.Image]:
    return [Image.fromarray(np.ascontiguousarray(im), mode="RGB") for im in images]


# --------------------------------------------------------------------------------------------
# tasks
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Task:
    """One embedded task, defined by what it answers for each of the 64 attribute combinations.

    ``table``: the answer index (into :data:`ANSWER_WORDS`) for each row of :data:`ALL_CODES`.
    ``kind``: ``naming``, ``predicate`` (one value), ``negation``, ``conjunction``,
    ``disjunction`` or ``label_map``. ``attribute``/``value`` describe naming, single-value and
    label-map tasks (empty for compositions)."""

    name: str
    kind: str
    held_out: bool
    table: np.ndarray = field(repr=False, compare=False)
    attribute: str = ""
    value: str | None = None
    question: str = QUESTION

    def answer(self, attributes: Mapping[str, str]) -> str:
        return ANSWER_WORDS[int(self.answer_indices(_codes_from_dict(attributes))[0])]

    @property
    def is_predicate(self) -> bool:
        """A yes/no task (single value, negation or composition)."""
        return self.kind in PREDICATE_KINDS

    @property
    def answers(self) -> tuple[str, ...]:
        """The possible answer words."""
        return tuple(ANSWER_WORDS[i] for i in sorted(set(self.table.tolist())))

    def answer_indices(self, codes: np.ndarray) -> np.ndarray:
        """Answer indices (into :data:`ANSWER_WORDS`) for attribute codes ``(..., 4)``."""
        return self.table[combo_index(codes)]

    @property
    def truth(self) -> np.ndarray:
        """Boolean table over :data:`ALL_CODES` (predicates only)."""
        return self.table == ANSWER_INDEX[YES]


PREDICATE_KINDS = ("predicate", "negation", "conjunction", "disjunction")


def _yes_no(truth: np.ndarray) -> np.ndarray:
    return np.where(truth, ANSWER_INDEX[YES], ANSWER_INDEX[NO]).astype(np.int64)


def _literals() -> list[tuple[str, str, np.ndarray]]:
    """(attribute, literal name, truth) for every value and, for 4-valued attributes, its
    negation (a binary attribute's negation is its other value)."""
    out = []
    for attribute in ATTRIBUTES:
        column = ALL_CODES[:, _ATTR_POS[attribute]]
        for i, value in enumerate(VALUES[attribute]):
            out.append((attribute, value, column == i))
        if len(VALUES[attribute]) > 2:
            for i, value in enumerate(VALUES[attribute]):
                out.append((attribute, f"not_{value}", column != i))
    return out


def _naming(attribute: str) -> Task:
    offset = ANSWER_INDEX[VALUES[attribute][0]]
    return Task(
        name=f"name_{attribute}",
        kind="naming",
        held_out=False,
        table=offset + ALL_CODES[:, _ATTR_POS[attribute]],
        attribute=attribute,
    )


def label_map_task(attribute: str, words: Sequence[str], *, name: str | None = None) -> Task:
    """Name ``attribute``'s values with ``words`` (one per value, from :data:`NONCE_WORDS`)."""
    index = np.array([ANSWER_INDEX[w] for w in words], dtype=np.int64)
    return Task(
        name=name or f"map_{attribute}_" + "_".join(words),
        kind="label_map",
        held_out=True,
        table=index[ALL_CODES[:, _ATTR_POS[attribute]]],
        attribute=attribute,
    )


@cache
def _all_tasks() -> tuple[Task, ...]:
    tasks = [_naming(name) for name in ATTRIBUTES]
    literals = _literals()
    held = set(HELD_OUT_TASKS)
    predicates: list[Task] = []
    for attribute, literal, truth in literals:
        negated = literal.startswith("not_")
        predicates.append(
            Task(
                name=f"is_{literal}",
                kind="negation" if negated else "predicate",
                held_out=False,
                table=_yes_no(truth),
                attribute=attribute,
                value=literal.removeprefix("not_"),
            )
        )
    for (a1, l1, t1), (a2, l2, t2) in itertools.combinations(literals, 2):
        if a1 == a2:
            continue
        predicates.append(Task(f"{l1}_and_{l2}", "conjunction", False, _yes_no(t1 & t2)))
        predicates.append(Task(f"{l1}_or_{l2}", "disjunction", False, _yes_no(t1 | t2)))
    by_name = {t.name: t for t in predicates}
    unknown = held - set(by_name)
    if unknown:  # pragma: no cover - a typo in HELD_OUT_TASKS
        raise AssertionError(f"unknown held-out tasks {sorted(unknown)}")
    # a held-out task's table and its complement are held out wherever they occur
    held_tables = {by_name[n].truth.tobytes() for n in held} | {(~by_name[n].truth).tobytes() for n in held}
    marked = [
        Task(t.name, t.kind, t.truth.tobytes() in held_tables, t.table, t.attribute, t.value)
        for t in predicates
    ]
    return (*tasks, *marked)


def all_tasks() -> list[Task]:
    """Every naming and predicate task of the family (label maps are made per episode)."""
    return list(_all_tasks())


@cache
def _evaluation_label_maps() -> tuple[Task, ...]:
    rng = np.random.default_rng(20_261_201)  # fixed: the same maps in every evaluation
    maps = []
    for attribute in LABEL_MAP_ATTRIBUTES:
        words = [NONCE_WORDS[i] for i in rng.choice(len(NONCE_WORDS), len(VALUES[attribute]), replace=False)]
        maps.append(label_map_task(attribute, words, name=f"map_{attribute}"))
    return tuple(maps)


def task_suite(*, label_maps: bool = False) -> list[Task]:
    """The evaluation suite: 4 naming and :data:`SEEN_EVAL_TASKS` (seen), :data:`HELD_OUT_TASKS`
    (held out); with ``label_maps`` also the fixed nonce label maps (``map_colour``, ...)."""
    tasks = [get_task(f"name_{a}") for a in ATTRIBUTES]
    tasks += [get_task(n) for n in (*SEEN_EVAL_TASKS, *HELD_OUT_TASKS)]
    return tasks + (list(_evaluation_label_maps()) if label_maps else [])


def training_tasks() -> list[Task]:
    """Naming and predicate tasks that training draws from (held-out tables excluded)."""
    return [task for task in _all_tasks() if not task.held_out]


def get_task(name: str) -> Task:
    for task in (*_all_tasks(), *_evaluation_label_maps()):
        if task.name == name:
            return task
    examples = [t.name for t in task_suite(label_maps=True)]
    raise ParameterError(f"unknown embedded task '{name}'; for example: {examples}")


# --------------------------------------------------------------------------------------------
# records and episodes
# --------------------------------------------------------------------------------------------
def sample_codes_for_task(
    task: Task, n: int, rng: np.random.Generator, *, yes_rate: float = 0.5
) -> np.ndarray:
    """Attribute codes for ``n`` examples of ``task``. Predicate tasks are label-balanced: each
    example is positive with probability ``yes_rate``, then drawn uniformly among the attribute
    combinations with that answer; other tasks draw uniformly from all combinations."""
    if not task.is_predicate:
        return sample_attributes(rng, n)
    positive_rows = np.flatnonzero(task.truth)
    negative_rows = np.flatnonzero(~task.truth)
    positive = rng.uniform(0.0, 1.0, n) < yes_rate
    rows = np.where(
        positive,
        positive_rows[rng.integers(0, len(positive_rows), n)],
        negative_rows[rng.integers(0, len(negative_rows), n)],
    )
    return ALL_CODES[rows].copy()


@dataclass
class Records:
    """Examples of one task: PIL images, answers, and the attributes behind them."""

    task: Task
    images: list[Image.Image]
    answers: list[str]
    attributes: list[dict[str, str]]

    @property
    def question(self) -> str:
        return self.task.question

    def __len__(self) -> int:
        return len(self.answers)


def sample_records(task: Task, n: int, rng: np.random.Generator) -> Records:
    """``n`` fresh examples of ``task``."""
    codes = sample_codes_for_task(task, n, rng)
    pixels = render(codes, rng)
    answers = [ANSWER_WORDS[i] for i in task.answer_indices(codes)]
    return Records(task, to_pil(pixels), answers, [attributes_to_dict(c) for c in codes])


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
TRAINING_MIX: dict[str, float] = {"naming": 0.15, "single": 0.25, "composition": 0.30, "label_map": 0.30}


def training_pools() -> dict[str, list[Task]]:
    """The seen tasks each training group draws from (uniformly); a mix may name any of them."""
    tasks = training_tasks()
    return {
        "naming": [t for t in tasks if t.kind == "naming"],
        "single": [t for t in tasks if t.kind in ("predicate", "negation")],
        "composition": [t for t in tasks if t.kind in ("conjunction", "disjunction")],
        # conjunctions of two plain values only (no negated literal, no disjunction)
        "conjunction": [t for t in tasks if t.kind == "conjunction" and "not_" not in t.name],
    }


def random_label_map(rng: np.random.Generator) -> Task:
    """A fresh label map: a random attribute, its values named by distinct random nonce words."""
    attribute = ATTRIBUTES[rng.integers(len(ATTRIBUTES))]
    words = [NONCE_WORDS[i] for i in rng.choice(len(NONCE_WORDS), len(VALUES[attribute]), replace=False)]
    return label_map_task(attribute, words)


def sample_episodes(
    rng: np.random.Generator,
    n_episodes: int,
    n_shots: int,
    *,
    mix: Mapping[str, float] | None = None,
    yes_rate_range: tuple[float, float] = (0.3, 0.7),
) -> EpisodeBatch:
    """Training episodes: each picks a group by ``mix`` (default :data:`TRAINING_MIX`), a task
    uniformly within the group (a fresh map for ``label_map``), a per-episode yes-rate for
    predicates, and fresh images. Held-out tasks never occur."""
    mix = dict(TRAINING_MIX if mix is None else mix)
    groups = [g for g, p in mix.items() if p > 0]
    weights = np.array([mix[g] for g in groups], dtype=float)
    pools = training_pools()
    all_codes, all_answers, names, kinds = [], [], [], []
    for _ in range(n_episodes):
        group = groups[rng.choice(len(groups), p=weights / weights.sum())]
        if group == "label_map":
            task = random_label_map(rng)
        else:
            task = pools[group][rng.integers(len(pools[group]))]
        codes = sample_codes_for_task(task, n_shots, rng, yes_rate=rng.uniform(*yes_rate_range))
        all_codes.append(codes)
        all_answers.append(task.answer_indices(codes))
        names.append(task.name)
        kinds.append(group)
    codes = np.stack(all_codes)
    images = render(codes.reshape(-1, 4), rng)
    return EpisodeBatch(images, codes, np.stack(all_answers), names, kinds)
