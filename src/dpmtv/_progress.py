"""Progress bars for long work (rich) on stderr, so that a redirected stdout holds only results;
silent when disabled or not on a terminal."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


@contextmanager
def progress_bar(description: str, total: int, *, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    if not enabled:
        yield lambda advance: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=False, console=Console(stderr=True)) as progress:
        task = progress.add_task(description, total=total)
        yield lambda advance: progress.advance(task, advance)
