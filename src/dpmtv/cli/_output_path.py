"""Where ``build --out`` may write, checked before any work (no model loaded, no forward pass).

Never destroy a file: ``--out`` is refused when it is the ledger, the records file (or inside a
records folder), an image a record references, a folder, a device or other non-regular file, or
an existing file that is not a dpmtv artifact (not even with ``--force``); an existing artifact is
replaced only with ``--force``. The output folder's writability is probed by creating a temporary
file there, and stale temporaries of our own naming (left by a killed write) are removed. Once the
head set is known, and before the charge, the folder must also have room for the artifact, whose
size is a function of public settings only (:func:`artifact_size_bound`).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from dpmtv.artifact.vector import is_dpmtv_artifact
from dpmtv.errors import ParameterError

# ``tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp")`` in ``save_task_vector``: eight random
# characters from ``[a-z0-9_]``.
TEMPORARY_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")
# Older than this, no running write can still own a temporary (writing an artifact takes seconds).
STALE_TEMPORARY_AGE_S = 600.0


def check_output_path(out: Path, *, force: bool, protected: Mapping[str, Path]) -> None:
    """Refuse an ``--out`` that would destroy something; ``protected`` maps a description
    ("the ledger") to a path that must never be replaced (a folder protects what is in it)."""
    for what, path in protected.items():
        _refuse_if_same(out, path, what)
    _refuse_a_foreign_card(out)
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


def _refuse_a_foreign_card(out: Path) -> None:
    """The model card goes beside the artifact (``task.README.md``); a file there that dpmtv did
    not write is never replaced."""
    from dpmtv.artifact.card import card_path, is_dpmtv_card

    card = card_path(out)
    if os.path.lexists(card) and not is_dpmtv_card(card):
        raise ParameterError(
            f"--out '{out}': its model card would be written to '{card}', which exists and is not a "
            "dpmtv card; dpmtv never replaces other files: choose another --out or move that file"
        )


def check_not_an_input(out: Path, paths: Iterable[Path], what: str) -> None:
    """Refuse an ``--out`` that is one of ``paths`` (e.g. the records' images)."""
    for path in paths:
        _refuse_if_same(out, path, what)


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


# Metadata JSON beside the tensors: about 2 KB measured for 6-8 heads (model identity, privacy
# numbers, accounting events, heads); the allowance covers large selection details too.
METADATA_ALLOWANCE_BYTES = 64 * 1024
_METADATA_BYTES_PER_HEAD = 64  # the head list in the metadata and in the selection details


def artifact_size_bound(*, num_heads: int, head_dim: int, centered: bool) -> int:
    """An upper bound on the artifact's size from public settings alone: float32 values of
    (K, d) (twice with a centering reference), the int64 (K, 2) head table, and the metadata."""
    tensor_bytes = num_heads * head_dim * 4 * (2 if centered else 1) + num_heads * 2 * 8
    return tensor_bytes + METADATA_ALLOWANCE_BYTES + _METADATA_BYTES_PER_HEAD * num_heads


def check_output_space(out: Path, num_bytes: int) -> None:
    """Refuse, before the charge, a folder that cannot take ``num_bytes`` now: the free space the
    file system reports, then a real allocation of that size in a temporary of our naming (removed
    at once). Another writer may still fill the disk later; the build then says the charge stands."""
    folder = out.parent
    try:
        usage = os.statvfs(folder)
        free = usage.f_bavail * usage.f_frsize
    except (OSError, AttributeError):  # no statvfs (Windows): rely on the allocation
        free = None
    if free is not None and free < num_bytes:
        raise _no_room(out, num_bytes, f"{free} bytes free")
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{out.name}.", suffix=".tmp")
    try:
        _allocate(handle, num_bytes)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise ParameterError(f"--out '{out}': cannot write in '{folder}': {exc.strerror}") from None
        raise _no_room(out, num_bytes, exc.strerror) from None
    finally:
        os.close(handle)
        os.unlink(temporary)


def _allocate(handle: int, num_bytes: int) -> None:
    allocate = getattr(os, "posix_fallocate", None)
    try:
        if allocate is not None:
            allocate(handle, 0, num_bytes)
            return
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # else: write instead
            raise
    os.write(handle, bytes(num_bytes))


def _no_room(out: Path, num_bytes: int, why: str) -> ParameterError:
    return ParameterError(
        f"--out '{out}': the folder '{out.parent}' has no room for the artifact (up to {num_bytes} "
        f"bytes: {why}); free some space or choose another folder. Nothing was charged"
    )


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
