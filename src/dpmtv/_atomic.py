"""Files written whole or not at all: every file dpmtv writes (artifacts, cards, signatures,
selections, reports, results, plots) goes to a temporary file beside its target, named
``.NAME.XXXXXXXX.tmp`` (the name :data:`dpmtv.cli._output_path.TEMPORARY_NAME` recognises as ours),
which is renamed over the target once complete. A reader sees the old file or the new one, never
a half-written one, and a failed write leaves no temporary behind."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "default_file_mode",
    "replacing",
    "replacing_together",
    "save_figure_atomically",
    "write_text_atomically",
]


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[str]:
    """The block writes the file at the yielded temporary path; when it ends without error the
    file gets the mode a new file would get and replaces ``path``, else it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        yield temporary
        os.chmod(temporary, default_file_mode())  # mkstemp's 0600 would hide it from the group
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def replacing_together(paths: Sequence[str | Path]) -> Iterator[list[str]]:
    """:func:`replacing` for files that belong together (an artifact, its card, its signature): the
    block writes every yielded temporary; only when all are complete are they renamed over their
    targets, one after another. A failed write (a full disk) leaves every target as it was; a
    failed rename, rarer (the writes are done), removes the ones already renamed, so a reader
    finds all of the new files or none of them."""
    with contextlib.ExitStack() as stack:
        targets = [Path(path) for path in paths]
        temporaries = [stack.enter_context(_temporary_beside(path)) for path in targets]
        yield temporaries
        landed: list[Path] = []
        try:
            for temporary, path in zip(temporaries, targets, strict=True):
                os.chmod(temporary, default_file_mode())
                os.replace(temporary, path)
                landed.append(path)
        except BaseException:
            for path in landed:
                path.unlink(missing_ok=True)
            raise


@contextlib.contextmanager
def _temporary_beside(path: Path) -> Iterator[str]:
    """A temporary file in ``path``'s folder, removed on the way out unless renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        yield temporary
    finally:
        Path(temporary).unlink(missing_ok=True)


def write_text_atomically(path: str | Path, text: str) -> Path:
    """``text`` (UTF-8) as the whole of ``path``."""
    with replacing(path) as temporary:
        Path(temporary).write_text(text, encoding="utf-8")
    return Path(path)


def save_figure_atomically(figure: Any, path: str | Path, **savefig: Any) -> Path:
    """``figure.savefig`` to ``path``, its format from ``path``'s suffix (the temporary's is .tmp)."""
    path = Path(path)
    with replacing(path) as temporary:
        figure.savefig(temporary, format=path.suffix.lstrip(".") or "png", **savefig)
    return path


def default_file_mode() -> int:
    """``0o666`` less the process umask: the mode ``open()`` would give a new file."""
    umask = os.umask(0o077)  # read by setting it: a file another thread makes meanwhile gets 0600, not 0666
    os.umask(umask)
    return 0o666 & ~umask
