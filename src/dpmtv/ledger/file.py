"""The ledger's SQLite file: one transaction at a time, its format checked and old formats
upgraded in place, a damaged file turned into one error line (see "Format" in
:mod:`dpmtv.ledger.book`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dpmtv.errors import LedgerError
from dpmtv.ledger import chain as ledger_chain
from dpmtv.ledger.format import _MIGRATE_1_TO_2, _SCHEMA, SCHEMA_VERSION, migrate_dataset, now


@contextmanager
def transaction(
    path: Path, *, busy_timeout_s: float, immediate: bool = False, create: bool = False
) -> Iterator[sqlite3.Connection]:
    """A connection inside one transaction: committed on success, rolled back on any error. A
    file SQLite cannot read (a zeroed page: "database disk image is malformed") is a
    :class:`LedgerError` naming it; a lock held too long stays SQLite's OperationalError (the
    build's charge says that nothing was charged)."""
    if not create and not path.is_file():
        raise LedgerError(
            f"no ledger at '{path}'; create a dataset budget first with "
            "'dpmtv budget init NAME --epsilon E --delta D --ledger PATH'"
        )
    conn = _connect(path, busy_timeout_s)
    try:
        _upgrade(conn, path)
        conn.execute("BEGIN IMMEDIATE" if immediate or create else "BEGIN")
        if create:
            _ensure_schema(conn, path)
        else:
            _check_schema(conn, path)
        yield conn
        conn.execute("COMMIT")
    except sqlite3.OperationalError:
        _rollback(conn)
        raise
    except sqlite3.DatabaseError as exc:
        _rollback(conn)
        raise LedgerError(
            f"ledger '{path}' is damaged ({exc}); nothing was charged. Restore it from a backup "
            "(`sqlite3 FILE .recover` may save its rows)"
        ) from None
    except BaseException:
        _rollback(conn)
        raise
    finally:
        conn.close()


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _connect(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA synchronous = FULL")  # a committed charge survives a power cut
    except sqlite3.DatabaseError as exc:
        raise LedgerError(f"cannot open ledger '{path}': {exc}") from None
    return conn


def _version(conn: sqlite3.Connection, path: Path) -> int:
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        raise LedgerError(f"'{path}' is not a readable SQLite ledger: {exc}") from None


def _ensure_schema(conn: sqlite3.Connection, path: Path) -> None:
    if _version(conn, path) == 0:
        for statement in filter(str.strip, _SCHEMA.split(";")):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    else:
        _check_schema(conn, path)


def _check_schema(conn: sqlite3.Connection, path: Path) -> None:
    version = _version(conn, path)
    if version != SCHEMA_VERSION:
        raise LedgerError(
            f"'{path}' is not a dpmtv ledger of format {SCHEMA_VERSION} (found format "
            f"{version}); use the dpmtv version that created it or another --ledger path"
        )
    if not _has_chain(conn):
        raise _tampered(path, f"it says format {SCHEMA_VERSION} but its chain table is missing")


def _has_chain(conn: sqlite3.Connection) -> bool:
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'chain'").fetchone()
    return found is not None


def _tampered(path: Path, what: str) -> LedgerError:
    return LedgerError(
        f"ledger '{path}' was tampered with: {what}; no budget in it can be trusted and nothing was "
        "charged. Restore the file from a backup or start another --ledger"
    )


def _upgrade(conn: sqlite3.Connection, path: Path) -> None:
    """Upgrade a format-1 or -2 ledger in place, in one transaction: 1 → 2 adds the relation,
    unit and voids; 2 → 3 chains every row as found (edits before the upgrade cannot be seen).

    Only a file that never had a chain is upgraded: a format number set back on a chained file
    would otherwise re-chain rows edited since, and launder them into an intact chain."""
    if _version(conn, path) not in (1, 2):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _version(conn, path)  # another process may have upgraded it meanwhile
        if version in (1, 2) and _has_chain(conn):  # only format 3 writes a chain
            raise _tampered(path, f"it says format {version} but holds a hash chain (format 3)")
        if version == 1:
            for statement in _MIGRATE_1_TO_2:
                conn.execute(statement)
            conn.execute(_SCHEMA.split(";")[2])  # CREATE TABLE voids
            for (name,) in conn.execute("SELECT name FROM datasets").fetchall():
                migrate_dataset(conn, name)
        if version in (1, 2):
            conn.execute(ledger_chain.CHAIN_TABLE)
            ledger_chain.chain_upgraded(conn, from_format=version, at=now())
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
