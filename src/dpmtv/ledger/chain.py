"""Tamper evidence for the ledger: one hash chain per dataset over every row the ledger writes.

Every write of a row — a dataset created, a charge, a void, an artifact marked written, the
upgrade of an old file — appends an entry to the ``chain`` table: the dataset, the table and key
of the row, the row's full content after the write (canonical JSON of all its columns, ``seq``
included) and ``sha256 = SHA-256(previous entry's sha256 of the same dataset, table, key,
content)``. The first entry of a dataset follows 64 zeros.

:func:`verify` runs on every open that reads or charges a dataset. It recomputes each dataset's
chain and replays it: the tables must hold exactly the rows the chain says, with the same
content. Anything else — a digit changed in an event, a budget raised, a row deleted or added
with ``sqlite3``, an entry edited or removed from the middle (``seq`` is consecutive, and SQLite's
AUTOINCREMENT counter remembers the last one) — is a *broken* chain for the dataset concerned:
the ledger then refuses to charge it, and ``dpmtv budget show`` / ``verify`` say why.

What a chain cannot see: it has no secret, so someone who recomputes the hashes after an edit
(the algorithm is this file), who removes a whole tail of entries and resets SQLite's counter,
who drops the ``chain`` table AND sets the format number back (the file then reads as a format-2
ledger never chained, and is upgraded as found), or who replaces the file with an older copy, is
not detected. A format number set back on a file that still holds its chain, a chained file
without its chain table, and a deleted dataset row whose name is created again are refused
(:mod:`dpmtv.ledger.file`, :func:`dpmtv.ledger.format.check_new_name`). It makes tampering evident, not
impossible; keep the file where only the operator can write (docs/design.md §7).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3

CHAIN_TABLE = """
CREATE TABLE IF NOT EXISTS chain (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL,
    row_table TEXT NOT NULL,
    row_key TEXT NOT NULL,
    content_json TEXT NOT NULL,
    previous_sha256 TEXT NOT NULL,
    sha256 TEXT NOT NULL
)"""

GENESIS = "0" * 64
UPGRADE = "upgrade"  # row_table of the entry an upgrade writes first (no table row)
_KEYS = {"datasets": "name", "charges": "charge_id", "voids": "void_id"}  # fixed table names


def entry_sha256(previous_sha256: str, row_table: str, row_key: str, content_json: str) -> str:
    canonical = json.dumps([previous_sha256, row_table, row_key, content_json], separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _content(columns: list[str], row: tuple[object, ...]) -> str:
    """A row as canonical JSON (floats by repr, so they read back exactly)."""
    return json.dumps(dict(zip(columns, row, strict=True)), sort_keys=True, separators=(",", ":"))


def _row(conn: sqlite3.Connection, table: str, key: str) -> tuple[str, str]:
    """(dataset, content) of the row of ``table`` with key ``key``."""
    cursor = conn.execute(f"SELECT * FROM {table} WHERE {_KEYS[table]} = ?", (key,))  # noqa: S608 (fixed names)
    columns = [column[0] for column in cursor.description]
    row = cursor.fetchone()
    dataset = row[columns.index("name" if table == "datasets" else "dataset")]
    return dataset, _content(columns, row)


def append(conn: sqlite3.Connection, dataset: str, row_table: str, row_key: str, content_json: str) -> None:
    """Append an entry to ``dataset``'s chain (inside the caller's transaction)."""
    last = conn.execute(
        "SELECT sha256 FROM chain WHERE dataset = ? ORDER BY seq DESC LIMIT 1", (dataset,)
    ).fetchone()
    previous = GENESIS if last is None else last[0]
    conn.execute(
        "INSERT INTO chain (dataset, row_table, row_key, content_json, previous_sha256, sha256) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (
            dataset,
            row_table,
            row_key,
            content_json,
            previous,
            entry_sha256(previous, row_table, row_key, content_json),
        ),
    )


def record(conn: sqlite3.Connection, table: str, key: str) -> None:
    """Chain the row of ``table`` with key ``key`` as it is now (after an insert or update)."""
    dataset, content = _row(conn, table, key)
    append(conn, dataset, table, key, content)


def chain_upgraded(conn: sqlite3.Connection, *, from_format: int, at: str) -> None:
    """Chain an upgraded file's rows as found: per dataset, an upgrade entry, then its rows."""
    for (name,) in conn.execute("SELECT name FROM datasets ORDER BY name").fetchall():
        append(conn, name, UPGRADE, name, json.dumps({"from_format": from_format, "at": at}, sort_keys=True))
        record(conn, "datasets", name)
        for table in ("charges", "voids"):
            key = _KEYS[table]
            rows = conn.execute(f"SELECT {key} FROM {table} WHERE dataset = ? ORDER BY seq", (name,))  # noqa: S608
            for (row_key,) in rows.fetchall():
                record(conn, table, row_key)


def verify(conn: sqlite3.Connection) -> dict[str, str]:
    """Each dataset whose chain is broken → the first problem found (module docstring)."""
    problems: dict[str, str] = {}
    expected, last = _replay(conn, problems)
    for table in _KEYS:
        cursor = conn.execute(f"SELECT * FROM {table}")  # noqa: S608 (fixed names)
        columns = [column[0] for column in cursor.description]
        key_at = columns.index(_KEYS[table])
        dataset_at = columns.index("name" if table == "datasets" else "dataset")
        for row in cursor.fetchall():
            key, dataset = row[key_at], row[dataset_at]
            chained = expected.pop((table, key), None)
            if chained is None:
                problems.setdefault(dataset, f"{table} row {key!r} has no chain entry (added outside dpmtv)")
            elif chained != (dataset, _content(columns, row)):
                for name in {dataset, chained[0]}:
                    problems.setdefault(
                        name, f"{table} row {key!r} differs from its chain entry (edited outside dpmtv)"
                    )
    for (table, key), (dataset, _) in expected.items():
        problems.setdefault(dataset, f"{table} row {key!r} is missing (deleted outside dpmtv)")
    if _entries_deleted(conn, last):
        for (name,) in conn.execute("SELECT name FROM datasets UNION SELECT dataset FROM chain").fetchall():
            problems.setdefault(name, "chain entries were deleted (edited outside dpmtv)")
    return problems


def _replay(
    conn: sqlite3.Connection, problems: dict[str, str]
) -> tuple[dict[tuple[str, str], tuple[str, str]], int]:
    """The rows the chain says the tables hold, (table, key) → (dataset, content); and the last
    seq. A dataset whose entries do not link is recorded in ``problems`` and replayed no further."""
    heads: dict[str, str] = {}
    expected: dict[tuple[str, str], tuple[str, str]] = {}
    seq = 0
    entries = conn.execute(
        "SELECT seq, dataset, row_table, row_key, content_json, previous_sha256, sha256 FROM chain "
        "ORDER BY seq"
    )
    for seq, dataset, table, key, content, previous, sha256 in entries:
        if dataset in problems:
            continue
        if previous != heads.get(dataset, GENESIS) or sha256 != entry_sha256(previous, table, key, content):
            problems[dataset] = (
                f"chain entry {seq} does not match its hash or its predecessor (edited outside dpmtv)"
            )
            continue
        heads[dataset] = sha256
        if table != UPGRADE:
            expected[(table, key)] = (dataset, content)
    return expected, seq


def _entries_deleted(conn: sqlite3.Connection, last_seq: int) -> bool:
    """A gap in ``seq`` or a counter past the last entry: entries were removed."""
    count = conn.execute("SELECT COUNT(*) FROM chain").fetchone()[0]
    counter = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'chain'").fetchone()
    return count != last_seq or (counter is not None and counter[0] != last_seq)


def upgraded_from(conn: sqlite3.Connection, dataset: str) -> str | None:
    """'upgraded from format F at T' when ``dataset``'s chain starts at an upgrade, else None."""
    row = conn.execute(
        "SELECT content_json FROM chain WHERE dataset = ? AND row_table = ? ORDER BY seq LIMIT 1",
        (dataset, UPGRADE),
    ).fetchone()
    try:
        upgrade = json.loads(row[0]) if row is not None else None
        return (
            None if upgrade is None else f"upgraded from format {upgrade['from_format']} at {upgrade['at']}"
        )
    except (ValueError, KeyError, TypeError):  # an edited entry: verify() reports the break
        return "upgraded from an older format"
