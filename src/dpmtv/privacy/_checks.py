"""Boundary checks shared by the privacy modules; every message names the value."""

from __future__ import annotations

import math

import numpy as np

from dpmtv.errors import ParameterError


def check_int(name: str, value: object, *, minimum: int) -> int:
    """Return ``value`` as an int if it is an integer (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_positive(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite real number > 0."""
    number = _as_float(name, value)
    if not (math.isfinite(number) and number > 0):
        raise ParameterError(f"{name} must be finite and > 0, got {value!r}")
    return number


def _as_float(name: str, value: object) -> float:
    if isinstance(value, bool):
        raise ParameterError(f"{name} must be a number, got {value!r}")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number, got {value!r}") from None
