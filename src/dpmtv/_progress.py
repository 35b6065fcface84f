"""Progress bars for long work (rich) on stderr, so that a redirected stdout holds only results;
silent when disabled or not on a terminal.

Inside :func:`private_totals` (a build whose counts are private: add-remove-one, user level), a
bar shows no total and no count: the number of non-empty chunks, of votes and of Ray batches
depends on the private N there, and "20/20" vs "21/21" on the operator's terminal would print it.
The bar shows its description, a bar that fills when the work is done, and the time elapsed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

_TOTALS_ARE_PRIVATE: ContextVar[bool] = ContextVar("dpmtv_progress_totals_are_private", default=False)


@contextmanager
def private_totals(private: bool = True) -> Iterator[None]:
    """Bars opened inside this block (in this thread or task) hide their totals when ``private``."""
    token = _TOTALS_ARE_PRIVATE.set(private)
    try:
        yield
    finally:
        _TOTALS_ARE_PRIVATE.reset(token)


@contextmanager
def progress_bar(description: str, total: int, *, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    if not enabled:
        yield lambda advance: None
        return
    if _TOTALS_ARE_PRIVATE.get():
        with _bar_without_total(description) as advance:
            yield advance
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=False, console=Console(stderr=True)) as progress:
        task = progress.add_task(description, total=total)
        yield lambda advance: progress.advance(task, advance)


@contextmanager
def _bar_without_total(description: str) -> Iterator[Callable[[int], None]]:
    """No total, no count, no time remaining (it would follow from the total); full once done."""
    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=False, console=Console(stderr=True)) as progress:
        task = progress.add_task(description, total=None)
        yield lambda advance: None
        progress.update(task, total=1, completed=1)
