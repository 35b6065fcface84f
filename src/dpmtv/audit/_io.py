"""Writing the audit reports: atomic text files and a JSON fallback for numpy and path values."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


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


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it over ``path``: a reader
    sees the old file or the new one, never a half-written one."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_json_atomically(path: Path, data: Any) -> None:
    """``data`` as indented JSON (numpy values and paths through :func:`json_default`)."""
    write_text_atomically(path, json.dumps(data, indent=2, default=json_default) + "\n")
