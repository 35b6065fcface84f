"""Procedural images and the embedded task family (deterministic by seed).

Every image is 24x24 RGB and shows exactly one shape with four attributes:

- colour: red, green, blue, yellow (each with per-image RGB jitter),
- shape: square, circle, triangle, cross,
- size: small, big,
- position: left, right (the shape's center is in the left or right half; the row is random),

on a dark, randomly grey background with Gaussian pixel noise. The 4 x 4 x 2 x 2 = 64 attribute
combinations are the whole world: every predicate is a truth table over them.

Tasks are defined only by their demonstrations (the question text is the same fixed public string
for all of them, :data:`QUESTION`):

- *naming* tasks answer with the value of one hidden attribute (``name_colour`` -> ``red`` ...);
  the answer vocabularies of the attributes are disjoint, so one demonstration reveals the task;
- *predicate* tasks answer ``yes``/``no`` for one hidden rule of the rule space
  (:mod:`dpmtv.embedded.rulespace`): single values and their negations, two-literal and / or / xor,
  three-literal and / or / at-least-2, and two shapes training never sees (3-way parity,
  ``(a and b) or c``); each demonstration carries about one bit, so accuracy climbs with shots;
- *label-map* tasks name one attribute, or a pair of attributes, with arbitrary nonce words
  (:data:`NONCE_WORDS`): the map is drawn afresh for every training episode, so only the
  demonstrations say which word is which.

Held out of training: every table that :func:`dpmtv.embedded.rulespace.trained` calls untrained
(a public rule: legacy held-out predicates, a hash of the table, whole shapes), a table and its
complement together. :func:`task_suite` is the evaluation suite (seen and held-out tasks, each
marked ``held_out``); :func:`training_tasks` lists what training draws from.

Everything random goes through a ``numpy.random.Generator`` passed by the caller, so a seed fixes
every pixel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

import numpy as np
from PIL import Image

from dpmtv.embedded import rules as R
from dpmtv.embedded.render import IMAGE_SIZE, render, sample_attributes, to_pil  # noqa: F401 (re-exported)
from dpmtv.embedded.rulespace import KIND_OF_SHAPE, LEGACY_HELD_OUT, rule_entries, trained
from dpmtv.embedded.world import ALL_CODES, ATTR_POS, ATTRIBUTES, VALUES, combo_index
from dpmtv.errors import ParameterError

QUESTION = "What is the answer?"

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

#: Held-out predicates of the evaluation suite (all untrained by the public rule): the legacy ten
#: (single values, and/or, negated literals), then hash-held tables of the new trained shapes and
#: rules of the two shapes training never sees (3-way parity, ``(a and b) or c``).
HELD_OUT_TASKS: tuple[str, ...] = (
    *LEGACY_HELD_OUT,
    "red_xor_circle",
    "big_xor_left",
    "red_and_triangle_and_big",
    "2_of_red_circle_big",
    "red_xor_circle_xor_big",
    "blue_xor_square_xor_left",
    "red_and_big_or_square",
    "green_and_left_or_circle",
)
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
    "red_xor_big",
    "2_of_red_circle_right",
)
#: Label maps of the evaluation suite: fixed nonce maps (drawn from a fixed seed), effectively new
#: since training draws a fresh map per episode.
LABEL_MAP_ATTRIBUTES: tuple[str, ...] = ("colour", "shape")


# --------------------------------------------------------------------------------------------
# attributes and rendering
# --------------------------------------------------------------------------------------------
def attributes_to_dict(codes: Sequence[int]) -> dict[str, str]:
    """Integer codes ``(colour, shape, size, position)`` as ``{"colour": "red", ...}``."""
    return {name: VALUES[name][int(code)] for name, code in zip(ATTRIBUTES, codes, strict=True)}


def _codes_from_dict(attributes: Mapping[str, str]) -> np.ndarray:
    return np.array([[VALUES[a].index(attributes[a]) for a in ATTRIBUTES]], dtype=np.int64)


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


PREDICATE_KINDS = ("predicate", "negation", *dict.fromkeys(KIND_OF_SHAPE.values()), "rule")


def yes_no_table(truth: np.ndarray) -> np.ndarray:
    """A boolean table over :data:`ALL_CODES` as answer indices (``yes`` / ``no``)."""
    return np.where(truth, ANSWER_INDEX[YES], ANSWER_INDEX[NO]).astype(np.int64)


def _naming(attribute: str) -> Task:
    offset = ANSWER_INDEX[VALUES[attribute][0]]
    return Task(
        name=f"name_{attribute}",
        kind="naming",
        held_out=False,
        table=offset + ALL_CODES[:, ATTR_POS[attribute]],
        attribute=attribute,
    )


def label_map_task(
    attribute: str | tuple[str, ...], words: Sequence[str], *, name: str | None = None
) -> Task:
    """Name the values of ``attribute`` (or the value combinations of several attributes, in
    :data:`ALL_CODES` order) with ``words`` (one per class, from :data:`NONCE_WORDS`)."""
    attributes = (attribute,) if isinstance(attribute, str) else tuple(attribute)
    index = np.array([ANSWER_INDEX[w] for w in words], dtype=np.int64)
    classes = np.zeros(len(ALL_CODES), dtype=np.int64)
    for a in attributes:  # mixed radix over the chosen attributes
        classes = classes * len(VALUES[a]) + ALL_CODES[:, ATTR_POS[a]]
    label = "_".join(attributes)
    return Task(
        name=name or f"map_{label}_" + "_".join(words),
        kind="label_map",
        held_out=True,
        table=index[classes],
        attribute=label,
    )


def _predicate(entry) -> Task:
    truth = R.truth(entry.rule)
    single = isinstance(entry.rule, R.Literal) or entry.shape == "single"
    literal = entry.name.removeprefix("is_") if single else ""
    return Task(
        name=entry.name,
        kind=entry.kind,
        held_out=not trained(truth),
        table=yes_no_table(truth),
        attribute=_rule_attribute(entry.rule) if single else "",
        value=literal.removeprefix("not_") if single else None,
    )


def _rule_attribute(rule) -> str:
    return rule.attribute if isinstance(rule, R.Literal) else rule.operand.attribute


@cache
def _all_tasks() -> tuple[Task, ...]:
    predicates = {}
    for entry in rule_entries():  # the first name of a duplicated name wins
        predicates.setdefault(entry.name, _predicate(entry))
    unknown = set(HELD_OUT_TASKS) - set(predicates)
    if unknown:  # pragma: no cover - a typo in HELD_OUT_TASKS
        raise AssertionError(f"unknown held-out tasks {sorted(unknown)}")
    return (*(_naming(name) for name in ATTRIBUTES), *predicates.values())


def rule_task(text: str) -> Task:
    """A predicate task for a typed rule (:func:`dpmtv.embedded.rules.parse`), named by its text;
    held out unless the public hold-out rule says training drew its table or complement."""
    truth = R.truth(R.parse(text))
    if truth.all() or not truth.any():
        answer = YES if truth.all() else NO
        raise ParameterError(f"rule {text!r} answers '{answer}' for every image: nothing to learn")
    return Task(name=text.strip(), kind="rule", held_out=not trained(truth), table=yes_no_table(truth))


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


@cache
def _tasks_by_name() -> dict[str, Task]:
    return {t.name: t for t in (*_all_tasks(), *_evaluation_label_maps())}


def get_task(name: str) -> Task:
    if name in _tasks_by_name():
        return _tasks_by_name()[name]
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
