"""Writing the audit reports: atomic JSON files with a fallback for numpy and path values."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpmtv._atomic import write_text_atomically


def json_default(value: Any) -> Any:
    """``json.dumps(default=...)`` for what reports hold besides JSON types: paths (as strings),
    numpy arrays and scalars, tuples and sets (as lists); anything else as its ``str``."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, (Sequence, set, frozenset)):
        return list(value)
    return str(value)


def write_json_atomically(path: Path, data: Any) -> None:
    """``data`` as indented JSON (numpy values and paths through :func:`json_default`)."""
    write_text_atomically(path, json.dumps(data, indent=2, default=json_default) + "\n")
