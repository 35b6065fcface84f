"""Progress of long work on stderr, so that a redirected stdout holds only results: every long
stage of the library goes through :func:`progress_bar`.

On a terminal it is a rich bar. Off a terminal (stderr to a log file, CI, a scheduler) a rich
bar would print once, at the end, and leave the log silent for the whole run; there a stage
prints plain lines instead: one when it starts, one every :data:`PROGRESS_INTERVAL_S` seconds
(``DPMTV_PROGRESS_INTERVAL_S`` overrides it) with ``done/total`` and the time elapsed, and one
when it ends.

Inside :func:`private_totals` (a build whose counts are private: add-remove-one, user level),
the number of non-empty chunks, of votes and of Ray batches depends on the private N, and so
does the time the stage takes ("20/20" vs "21/21", 0:00:03 vs 0:00:10 on the operator's
terminal would print it). There a stage shows neither a count, nor a total, nor the time
elapsed or remaining, nor a rate, on a terminal or off it: a bar that fills when the work is
done, or off a terminal a line at its start and one at its end, with no periodic line between
(how many such lines a log holds would time the stage).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

__all__ = ["PROGRESS_INTERVAL_S", "private_totals", "progress_bar", "progress_interval_s"]

#: Seconds between two plain progress lines of a stage off a terminal: often enough that a log
#: shows the run is alive, rarely enough that a long run's log stays readable.
PROGRESS_INTERVAL_S = 15.0
_INTERVAL_ENV = "DPMTV_PROGRESS_INTERVAL_S"

_TOTALS_ARE_PRIVATE: ContextVar[bool] = ContextVar("dpmtv_progress_totals_are_private", default=False)

_PRIVATE_STAGE_NOTE = "running (its size and duration depend on private data: not shown)"


@contextmanager
def private_totals(private: bool = True) -> Iterator[None]:
    """Bars opened inside this block (in this thread or task) hide their totals and times when
    ``private``."""
    token = _TOTALS_ARE_PRIVATE.set(private)
    try:
        yield
    finally:
        _TOTALS_ARE_PRIVATE.reset(token)


def progress_interval_s() -> float:
    """:data:`PROGRESS_INTERVAL_S`, or the positive number of seconds in ``DPMTV_PROGRESS_INTERVAL_S``."""
    text = os.environ.get(_INTERVAL_ENV, "").strip()
    try:
        value = float(text) if text else PROGRESS_INTERVAL_S
    except ValueError:
        return PROGRESS_INTERVAL_S
    return value if value > 0 else PROGRESS_INTERVAL_S


@contextmanager
def progress_bar(description: str, total: int, *, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """Progress of ``total`` steps of ``description``; yields ``advance(steps)``. Nothing when not
    ``enabled``, or when a public total is 0 (no work runs; a private 0 is shown as any other)."""
    private = _TOTALS_ARE_PRIVATE.get()
    if not enabled or (total == 0 and not private):
        yield lambda advance: None
        return
    console = Console(stderr=True)
    if not console.is_terminal:
        with _plain_lines(description, total, private=private) as advance:
            yield advance
        return
    if private:
        with _bar_without_total(description, console) as advance:
            yield advance
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=False, console=console) as progress:
        task = progress.add_task(description, total=total)
        yield lambda advance: progress.advance(task, advance)


@contextmanager
def _bar_without_total(description: str, console: Console) -> Iterator[Callable[[int], None]]:
    """No total, no count, no time elapsed or remaining, no rate; full once done."""
    columns = (TextColumn("{task.description}"), BarColumn())
    with Progress(*columns, transient=False, console=console) as progress:
        task = progress.add_task(description, total=None)
        yield lambda advance: None
        progress.update(task, total=1, completed=1)


@contextmanager
def _plain_lines(description: str, total: int, *, private: bool) -> Iterator[Callable[[int], None]]:
    """Plain lines off a terminal: a private stage's start and end only; a public stage's start,
    ``done/total`` and the time elapsed every :func:`progress_interval_s`, and its end."""
    if private:
        _say(f"{description}: {_PRIVATE_STAGE_NOTE}")
        yield lambda advance: None
        _say(f"{description}: done")
        return
    done = [0]
    started = time.monotonic()

    def status() -> str:
        return f"{description}: {done[0]}/{total}, {_clock(time.monotonic() - started)} elapsed"

    _say(f"{description}: 0/{total}")
    stop = threading.Event()
    ticker = threading.Thread(target=_tick, args=(stop, status), daemon=True, name="dpmtv-progress")
    ticker.start()
    try:
        yield lambda advance: done.__setitem__(0, done[0] + advance)
    finally:
        stop.set()
        ticker.join()
    _say(f"{description}: {done[0]}/{total}, done in {_clock(time.monotonic() - started)}")


def _tick(stop: threading.Event, status: Callable[[], str]) -> None:
    interval_s = progress_interval_s()
    while not stop.wait(interval_s):
        _say(status())


def _say(line: str) -> None:
    """One line on the current stderr (looked up at each call: tests and the CLI runner swap it)."""
    print(line, file=sys.stderr, flush=True)


def _clock(seconds: float) -> str:
    """``H:MM:SS``, as rich's elapsed column."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"
