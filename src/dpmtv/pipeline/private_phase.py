"""What the operator sees of a build's private phase (docs/design.md §1, "What is released").

The terminal is an output too. While a build computes on private records:

* progress bars show no totals where the counts are private (:func:`dpmtv._progress.private_totals`);
* once the build is charged, an error's message is withheld: it may quote a record (a file, a
  line, an answer), and which record made a build fail after its charge is a function of private
  data. The operator gets the error's type and that the charge stands.

Before the charge, errors pass unchanged: naming the file, line and field of a bad record is
what the operator needs then, and nothing has been released or charged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from dpmtv._progress import private_totals
from dpmtv.errors import PrivateComputationError

__all__ = ["run_private_phase"]

T = TypeVar("T")


def run_private_phase(
    compute: Callable[[], T], *, charged: Callable[[], bool], counts_are_private: bool
) -> T:
    """``compute()``, the build's private computation: totals hidden when ``counts_are_private``,
    and any ``Exception`` raised once ``charged()`` is true replaced by a
    :class:`PrivateComputationError` that carries neither its message nor its chain (a traceback
    would print the message). A plain function, not a context manager: the new error is raised
    outside any exception handler, so Python attaches no ``__context__`` to it."""
    failed = None
    with private_totals(counts_are_private):
        try:
            return compute()
        except Exception as exc:
            if not charged():
                raise
            failed = type(exc).__name__
    raise PrivateComputationError(
        f"the build failed during private computation, after its charge point ({failed}); the "
        "message is withheld because it may quote a private record. Nothing was written"
    )
