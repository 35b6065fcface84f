"""The embedded world: four attributes whose 4 x 4 x 2 x 2 = 64 combinations are everything an
image can show; every task is a table over these combinations."""

from __future__ import annotations

import itertools

import numpy as np

ATTRIBUTES: tuple[str, ...] = ("colour", "shape", "size", "position")
VALUES: dict[str, tuple[str, ...]] = {
    "colour": ("red", "green", "blue", "yellow"),
    "shape": ("square", "circle", "triangle", "cross"),
    "size": ("small", "big"),
    "position": ("left", "right"),
}
ATTR_POS = {name: i for i, name in enumerate(ATTRIBUTES)}
#: All 64 attribute combinations, ``(64, 4)`` codes; a predicate is a boolean table over its rows.
ALL_CODES = np.array(list(itertools.product(*(range(len(VALUES[a])) for a in ATTRIBUTES))), dtype=np.int64)
_RADIX = np.array([16, 4, 2, 1], dtype=np.int64)


def combo_index(codes: np.ndarray) -> np.ndarray:
    """Row of :data:`ALL_CODES` for each code row ``(..., 4)``."""
    return np.asarray(codes, dtype=np.int64) @ _RADIX


def describe_row(row: int) -> str:
    """``"red circle big left"`` for a row of :data:`ALL_CODES`."""
    return " ".join(VALUES[a][int(c)] for a, c in zip(ATTRIBUTES, ALL_CODES[row], strict=True))
