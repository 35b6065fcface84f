"""Where ``build --out`` may write, checked before any work (no model loaded, no forward pass).

Never destroy a file: ``--out`` is refused when it is the ledger, the records file (or inside a
records folder), an image a record references, a folder, a device or other non-regular file, or
an existing file that is not a dpmtv artifact (not even with ``--force``); an existing artifact is
replaced only with ``--force``. The output folder's writability is probed by creating a temporary
file there, and stale temporaries of our own naming (left by a killed write) are removed.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from dpmtv.errors import ParameterError

# ``tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp")`` in ``save_task_vector``: eight random
# characters from ``[a-z0-9_]``.
TEMPORARY_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")
# Older than this, no running write can still own a temporary (writing an artifact takes seconds).
STALE_TEMPORARY_AGE_S = 600.0
_HEADER_LIMIT_BYTES = 100_000_000  # safetensors' own limit on the JSON header


def check_output_path(out: Path, *, force: bool, protected: Mapping[str, Path]) -> None:
    """Refuse an ``--out`` that would destroy something; ``protected`` maps a description
    ("the ledger") to a path that must never be replaced (a folder protects what is in it)."""
    for what, path in protected.items():
        _refuse_if_same(out, path, what)
    if not os.path.lexists(out):
        return
    try:
        mode = os.stat(out).st_mode
    except OSError as exc:
        raise ParameterError(f"--out '{out}' cannot be checked: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        raise ParameterError(
            f"--out '{out}' is a folder; give a file path such as '{out}/vector.safetensors'"
        )
    if not stat.S_ISREG(mode):
        raise ParameterError(
            f"--out '{out}' is not a regular file (a device, pipe or socket); choose another path"
        )
    if not is_dpmtv_artifact(out):
        raise ParameterError(
            f"--out '{out}' exists and is not a dpmtv task vector; dpmtv never replaces other files "
            "(not even with --force): choose another path"
        )
    if not force:
        raise ParameterError(f"--out '{out}' already exists; add --force to replace it")


def check_not_an_input(out: Path, paths: Iterable[Path], what: str) -> None:
    """Refuse an ``--out`` that is one of ``paths`` (e.g. the records' images)."""
    for path in paths:
        _refuse_if_same(out, path, what)


def is_dpmtv_artifact(path: Path) -> bool:
    """Whether ``path`` is a safetensors file with dpmtv's metadata (header only, no tensors)."""
    from dpmtv.vector import METADATA_KEY

    try:
        with open(path, "rb") as handle:
            header_size = int.from_bytes(handle.read(8), "little")
            if not 0 < header_size <= _HEADER_LIMIT_BYTES:
                return False
            header = json.loads(handle.read(header_size))
        return isinstance(header, dict) and METADATA_KEY in (header.get("__metadata__") or {})
    except (OSError, ValueError):
        return False


def prepare_output_folder(out: Path) -> None:
    """Create ``out``'s folder, remove stale temporaries there, and prove it is writable by
    creating (and removing) a temporary file of the name the artifact write will use."""
    folder = out.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(folder)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{out.name}.", suffix=".tmp")
        os.close(handle)
        os.unlink(temporary)
    except OSError as exc:
        where = exc.filename or folder
        raise ParameterError(f"--out '{out}': cannot write in '{where}': {exc.strerror}") from None


def remove_stale_temporaries(folder: Path, *, older_than_s: float = STALE_TEMPORARY_AGE_S) -> list[Path]:
    """Remove regular files in ``folder`` named like our temporaries and older than
    ``older_than_s`` (a write killed with SIGKILL cannot remove its own); returns them."""
    removed = []
    cutoff = time.time() - older_than_s
    with os.scandir(folder) as entries:
        for entry in entries:
            if not TEMPORARY_NAME.match(entry.name) or not entry.is_file(follow_symlinks=False):
                continue
            try:
                if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
            except FileNotFoundError:  # another process cleaned it first
                continue
    return removed


def default_file_mode() -> int:
    """``0o666`` less the process umask: the mode ``open()`` would give a new file (``mkstemp``
    gives 0600, which would hide an artifact from the group that reads it)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _refuse_if_same(out: Path, path: Path, what: str) -> None:
    path = Path(path)
    if path.is_dir():
        inside = Path(os.path.realpath(out)).is_relative_to(os.path.realpath(path))
        if inside:
            raise ParameterError(f"--out '{out}' is inside {what} '{path}'; choose another path")
        return
    same = os.path.realpath(out) == os.path.realpath(path)
    if not same and os.path.exists(out) and os.path.exists(path):
        same = os.path.samefile(out, path)  # a hard link
    if same:
        raise ParameterError(f"--out '{out}' is {what}; it would be destroyed, choose another path")
