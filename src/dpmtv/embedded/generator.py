"""Procedural images and the embedded task family (deterministic by seed).

Every image is 24x24 RGB and shows exactly one shape with four attributes:

- colour: red, green, blue, yellow (each with per-image RGB jitter),
- shape: square, circle, triangle, cross,
- size: small, big,
- position: left, right (the shape's centre is in the left or right half; the row is random),

on a dark, randomly grey background with Gaussian pixel noise.

Tasks are defined only by their demonstrations (the question text is the same fixed public string
for all of them, :data:`QUESTION`):

- *naming* tasks answer with the value of one hidden attribute (``name_colour`` -> ``red`` ...);
  the answer vocabularies of the attributes are disjoint, so one demonstration reveals the task;
- *predicate* tasks answer ``yes``/``no`` for one hidden property (``is_red``, ``is_big`` ...);
  each demonstration carries about one bit, so accuracy climbs with the number of shots.

Held out of training (:func:`training_tasks` excludes them; :func:`task_suite` marks them
``held_out``): two predicates (:data:`HELD_OUT_PREDICATES`) and one colour x shape combination
(:data:`HELD_OUT_COMBO`), which training images never show and evaluation images do.

Everything random goes through a ``numpy.random.Generator`` passed by the caller, so a seed fixes
every pixel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

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
#: Every answer word of the family, in a fixed order (the tokenizer's answer vocabulary).
ANSWER_WORDS: tuple[str, ...] = (
    *VALUES["colour"],
    *VALUES["shape"],
    *VALUES["size"],
    *VALUES["position"],
    YES,
    NO,
)
ANSWER_INDEX: dict[str, int] = {word: i for i, word in enumerate(ANSWER_WORDS)}

HELD_OUT_PREDICATES: tuple[str, ...] = ("is_green", "is_cross")
HELD_OUT_COMBO: tuple[str, str] = ("blue", "triangle")  # (colour, shape) never seen in training

_BASE_RGB = np.array([[215, 45, 45], [45, 185, 65], [55, 90, 225], [225, 210, 45]], dtype=np.float32)
_COLOUR_JITTER = 25.0
_NOISE_STD = 10.0
_SMALL_R = (3.0, 4.0)
_BIG_R = (6.0, 7.5)
_LEFT_MAX_X = 9.5  # left centres lie in [r, 9.5]; right centres mirror them (23 - x)
_ATTR_POS = {name: i for i, name in enumerate(ATTRIBUTES)}
_COMBO_CODE = (VALUES["colour"].index(HELD_OUT_COMBO[0]), VALUES["shape"].index(HELD_OUT_COMBO[1]))


# --------------------------------------------------------------------------------------------
# attributes and rendering
# --------------------------------------------------------------------------------------------
def attributes_to_dict(codes: Sequence[int]) -> dict[str, str]:
    """Integer codes ``(colour, shape, size, position)`` as ``{"colour": "red", ...}``."""
    return {name: VALUES[name][int(code)] for name, code in zip(ATTRIBUTES, codes, strict=True)}


def sample_attributes(
    rng: np.random.Generator, n: int, *, exclude_held_out_combo: bool = False
) -> np.ndarray:
    """``n`` uniformly drawn attribute codes, shape ``(n, 4)`` (colour, shape, size, position)."""
    codes = np.stack([rng.integers(0, len(VALUES[name]), n) for name in ATTRIBUTES], axis=1).astype(np.int64)
    if exclude_held_out_combo:
        _redraw_held_out_combo(rng, codes, fixed_column=None)
    return codes


def _redraw_held_out_combo(rng: np.random.Generator, codes: np.ndarray, fixed_column: int | None) -> None:
    """Replace the held-out colour x shape pair in place, never touching ``fixed_column``."""
    column = 1 if fixed_column != 1 else 0  # redraw the shape unless the shape is fixed
    for _ in range(100):
        bad = (codes[:, 0] == _COMBO_CODE[0]) & (codes[:, 1] == _COMBO_CODE[1])
        if not bad.any():
            return
        codes[bad, column] = rng.integers(0, 4, int(bad.sum()))
    raise AssertionError("could not avoid the held-out combination")  # pragma: no cover


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
    """One embedded task: ``answer_fn`` maps image attributes (``{"colour": "red", ...}``) to the
    answer word. ``attribute``/``value`` describe it (value ``None`` for naming tasks)."""

    name: str
    kind: str  # "naming" | "predicate"
    held_out: bool
    answer_fn: Callable[[Mapping[str, str]], str] = field(repr=False, compare=False)
    attribute: str = ""
    value: str | None = None
    question: str = QUESTION

    def answer(self, attributes: Mapping[str, str]) -> str:
        return self.answer_fn(attributes)

    @property
    def answers(self) -> tuple[str, ...]:
        """The possible answer words."""
        return VALUES[self.attribute] if self.kind == "naming" else (YES, NO)

    # fast path on integer codes
    def answer_indices(self, codes: np.ndarray) -> np.ndarray:
        column = codes[:, _ATTR_POS[self.attribute]]
        if self.kind == "naming":
            offset = ANSWER_INDEX[VALUES[self.attribute][0]]
            return offset + column
        target = VALUES[self.attribute].index(self.value)
        return np.where(column == target, ANSWER_INDEX[YES], ANSWER_INDEX[NO])


def _naming(attribute: str) -> Task:
    return Task(
        name=f"name_{attribute}",
        kind="naming",
        held_out=False,
        answer_fn=lambda a, _k=attribute: a[_k],
        attribute=attribute,
    )


def _predicate(attribute: str, value: str) -> Task:
    name = f"is_{value}"
    return Task(
        name=name,
        kind="predicate",
        held_out=name in HELD_OUT_PREDICATES,
        answer_fn=lambda a, _k=attribute, _v=value: YES if a[_k] == _v else NO,
        attribute=attribute,
        value=value,
    )


def task_suite() -> list[Task]:
    """The 16 evaluation tasks: 4 naming, 10 training predicates, 2 held-out predicates."""
    tasks = [_naming(name) for name in ATTRIBUTES]
    tasks += [_predicate(name, value) for name in ATTRIBUTES for value in VALUES[name]]
    return tasks


def training_tasks() -> list[Task]:
    return [task for task in task_suite() if not task.held_out]


def get_task(name: str) -> Task:
    for task in task_suite():
        if task.name == name:
            return task
    raise KeyError(f"unknown embedded task '{name}'; known: {[t.name for t in task_suite()]}")


# --------------------------------------------------------------------------------------------
# records and episodes
# --------------------------------------------------------------------------------------------
def sample_codes_for_task(
    task: Task,
    n: int,
    rng: np.random.Generator,
    *,
    exclude_held_out_combo: bool = False,
    yes_rate: float | np.ndarray = 0.5,
) -> np.ndarray:
    """Attribute codes for ``n`` examples of ``task``. Predicate tasks are label-balanced: each
    example is positive with probability ``yes_rate`` and the attribute is drawn to match."""
    codes = sample_attributes(rng, n)
    fixed = None
    if task.kind == "predicate":
        column = _ATTR_POS[task.attribute]
        n_values = len(VALUES[task.attribute])
        target = VALUES[task.attribute].index(task.value)
        positive = rng.uniform(0.0, 1.0, n) < yes_rate
        other = rng.integers(0, n_values - 1, n)
        other = other + (other >= target)  # uniform over the non-target values
        codes[:, column] = np.where(positive, target, other)
        fixed = column
    if exclude_held_out_combo:
        _redraw_held_out_combo(rng, codes, fixed_column=fixed)
    return codes


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


def sample_records(
    task: Task, n: int, rng: np.random.Generator, *, exclude_held_out_combo: bool = False
) -> Records:
    """``n`` fresh examples of ``task`` (evaluation distribution: every combination appears)."""
    codes = sample_codes_for_task(task, n, rng, exclude_held_out_combo=exclude_held_out_combo)
    pixels = render(codes, rng)
    answers = [ANSWER_WORDS[i] for i in task.answer_indices(codes)]
    return Records(task, to_pil(pixels), answers, [attributes_to_dict(c) for c in codes])


@dataclass
class EpisodeBatch:
    """``n_episodes`` episodes of ``n_shots`` examples each, all examples of an episode from one
    task. ``images``: uint8 ``(E*K, 24, 24, 3)`` in episode-major order; ``codes``: ``(E, K, 4)``;
    ``answers``: indices into :data:`ANSWER_WORDS`, ``(E, K)``; ``task_names``: ``E`` names."""

    images: np.ndarray
    codes: np.ndarray
    answers: np.ndarray
    task_names: list[str]

    @property
    def kinds(self) -> list[str]:
        return [get_task(name).kind for name in self.task_names]


def sample_episodes(
    rng: np.random.Generator,
    n_episodes: int,
    n_shots: int,
    *,
    tasks: Sequence[Task] | None = None,
    naming_fraction: float = 0.4,
    exclude_held_out_combo: bool = True,
    yes_rate_range: tuple[float, float] = (0.3, 0.7),
) -> EpisodeBatch:
    """Training episodes: each picks a task (naming with probability ``naming_fraction``, else a
    predicate, uniformly within the kind), a per-episode yes-rate for predicates, and fresh
    images. Defaults are the training distribution (held-out tasks and combination excluded)."""
    tasks = list(training_tasks() if tasks is None else tasks)
    naming = [t for t in tasks if t.kind == "naming"]
    predicates = [t for t in tasks if t.kind == "predicate"]
    all_codes, all_answers, names = [], [], []
    for _ in range(n_episodes):
        if naming and (not predicates or rng.uniform() < naming_fraction):
            task = naming[rng.integers(len(naming))]
        else:
            task = predicates[rng.integers(len(predicates))]
        yes_rate = rng.uniform(*yes_rate_range)
        codes = sample_codes_for_task(
            task, n_shots, rng, exclude_held_out_combo=exclude_held_out_combo, yes_rate=yes_rate
        )
        all_codes.append(codes)
        all_answers.append(task.answer_indices(codes))
        names.append(task.name)
    codes = np.stack(all_codes)
    images = render(codes.reshape(-1, 4), rng)
    return EpisodeBatch(images, codes, np.stack(all_answers), names)
