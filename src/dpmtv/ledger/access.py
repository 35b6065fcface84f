"""Check, before a build does any work, that its ledger can be written now.

A read-only ledger (or one in a read-only folder: SQLite writes a journal beside it) is refused
at once. A ledger whose write lock another process holds is waited for, with a message, at most
``timeout_s`` seconds, then refused: nothing is charged either way.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable

from dpmtv.errors import LedgerError
from dpmtv.ledger.book import Ledger


def check_ledger_writable(ledger: Ledger, *, timeout_s: float, on_wait: Callable[[str], None]) -> None:
    """Take and release the ledger's write lock once (``BEGIN IMMEDIATE``; ``ROLLBACK``)."""
    path = ledger.path
    if not path.is_file():
        return  # the ledger's own check names the missing file and how to create it
    if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK | os.X_OK):
        raise LedgerError(f"ledger '{path}' is read-only (or its folder is); nothing was charged")
    try:
        conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    except sqlite3.DatabaseError as exc:
        raise LedgerError(f"cannot open ledger '{path}': {exc}") from None
    try:
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise LedgerError(f"ledger '{path}' cannot be written: {exc}") from None
            on_wait(
                f"waiting up to {timeout_s:g} s for ledger '{path}': another process is writing to it "
                "(--ledger-timeout)"
            )
            conn.execute(f"PRAGMA busy_timeout = {max(0, round(timeout_s * 1000))}")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                raise LedgerError(
                    f"ledger '{path}' is still locked by another process after {timeout_s:g} s; nothing "
                    "was charged. Try again when it is done, or raise --ledger-timeout"
                ) from None
        conn.execute("ROLLBACK")
    finally:
        conn.close()
