"""What a ledger file holds and accepts: its SQLite schema, the format-1 upgrade, and the checks
of every value a caller hands the ledger (see "Format" in :mod:`dpmtv.ledger.book`)."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from enum import Enum
from typing import Any

import dp_accounting

from dpmtv.errors import LedgerError, ParameterError
from dpmtv.ledger.chain import CHAIN_TABLE
from dpmtv.privacy.disjoint import DisjointReleases, charged_event_from_json, charged_event_to_json
from dpmtv.privacy.relation import AdjacencyRelation, parse_relation

SCHEMA_VERSION = 3
PRIVACY_UNITS = ("record", "user")
DEFAULT_RELATION, DEFAULT_UNIT = "replace-one", "record"
_MAX_NAME = 200

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS datasets (
    name TEXT PRIMARY KEY,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    created_at TEXT NOT NULL,
    neighbouring_relation TEXT NOT NULL,
    privacy_unit TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS charges (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    charge_id TEXT NOT NULL UNIQUE,
    dataset TEXT NOT NULL REFERENCES datasets(name),
    event_json TEXT NOT NULL,
    parameters_json TEXT NOT NULL,
    artifact TEXT,
    charged_at TEXT NOT NULL,
    epsilon_after REAL NOT NULL,
    written_at TEXT,
    tensors_sha256 TEXT
);
CREATE TABLE IF NOT EXISTS voids (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    void_id TEXT NOT NULL UNIQUE,
    dataset TEXT NOT NULL REFERENCES datasets(name),
    reason TEXT NOT NULL,
    parameters_json TEXT NOT NULL,
    artifact TEXT,
    voided_at TEXT NOT NULL,
    written_at TEXT,
    tensors_sha256 TEXT
);
"""
    + CHAIN_TABLE
)

# Format 1 -> 2: the columns and table format 2 added (see "Format" in the module docstring).
_MIGRATE_1_TO_2 = (
    f"ALTER TABLE datasets ADD COLUMN neighbouring_relation TEXT NOT NULL DEFAULT '{DEFAULT_RELATION}'",
    f"ALTER TABLE datasets ADD COLUMN privacy_unit TEXT NOT NULL DEFAULT '{DEFAULT_UNIT}'",
    "ALTER TABLE charges ADD COLUMN tensors_sha256 TEXT",
)


def migrate_dataset(conn: sqlite3.Connection, name: str) -> None:
    recorded = set()
    for (parameters_json,) in conn.execute("SELECT parameters_json FROM charges WHERE dataset = ?", (name,)):
        parameters = json.loads(parameters_json)
        if "neighbouring_relation" in parameters or "privacy_unit" in parameters:
            recorded.add(
                (
                    parameters.get("neighbouring_relation", DEFAULT_RELATION),
                    parameters.get("privacy_unit", DEFAULT_UNIT),
                )
            )
    relation, unit = sorted(recorded)[0] if recorded else (DEFAULT_RELATION, DEFAULT_UNIT)
    conn.execute(
        "UPDATE datasets SET neighbouring_relation = ?, privacy_unit = ? WHERE name = ?",
        (relation, unit, name),
    )
    if len(recorded) > 1:
        mixed = ", ".join(f"{r} per {u}" for r, u in sorted(recorded))
        conn.execute(
            "INSERT INTO voids (void_id, dataset, reason, parameters_json, voided_at) VALUES (?, ?, ?, ?, ?)",
            (
                uuid.uuid4().hex,
                name,
                f"upgraded from ledger format 1: its charges were made under different relations "
                f"or units ({mixed}) and composed as if under one",
                "{}",
                now(),
            ),
        )


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > _MAX_NAME or not name.isprintable():
        raise ParameterError(
            f"dataset name must be a printable, non-empty string of at most {_MAX_NAME} "
            f"characters, got {name!r}"
        )
    return name


def check_new_name(conn: sqlite3.Connection, name: str, path: object) -> None:
    """Refuse to create ``name`` when it exists, or when it ever existed: a name with a chain
    entry (a charge, a void, its creation) whose row was deleted outside dpmtv would otherwise
    come back with any budget while its charges stay."""
    row = conn.execute("SELECT epsilon, delta FROM datasets WHERE name = ?", (name,)).fetchone()
    if row is not None:
        raise ParameterError(
            f"dataset {name!r} already exists in ledger '{path}' with budget epsilon = {row[0]:g}, "
            f"delta = {row[1]:g}; budgets cannot be changed, choose another name"
        )
    history = conn.execute(
        "SELECT (SELECT COUNT(*) FROM chain WHERE dataset = :n) + (SELECT COUNT(*) FROM charges "
        "WHERE dataset = :n) + (SELECT COUNT(*) FROM voids WHERE dataset = :n)",
        {"n": name},
    ).fetchone()[0]
    if history:
        raise LedgerError(
            f"dataset {name!r} has a history in ledger '{path}' ({history} chain entries, charges or "
            "voids) but no row: its row was deleted outside dpmtv, so the name cannot be created "
            "again (its charges still count); choose another name"
        )


def check_relation(value: str | AdjacencyRelation) -> str:
    return parse_relation(value).value


def check_unit(value: object) -> str:
    unit = value.value if isinstance(value, Enum) else value
    if unit not in PRIVACY_UNITS:
        raise ParameterError(f"unknown privacy unit {value!r}; valid values are {', '.join(PRIVACY_UNITS)}")
    return unit


def check_event(event: object) -> str:
    if not isinstance(event, (dp_accounting.DpEvent, DisjointReleases)):
        raise ParameterError(f"expected a dp_accounting DpEvent to charge, got {type(event).__name__}")
    encoded = charged_event_to_json(event)
    charged_event_from_json(encoded)  # refuses types the ledger could not read back
    return json.dumps(encoded, sort_keys=True)


def check_parameters(parameters: Mapping[str, Any]) -> str:
    if not isinstance(parameters, Mapping):
        raise ParameterError(f"parameters must be a mapping, got {type(parameters).__name__}")
    try:
        return json.dumps(dict(parameters), sort_keys=True, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"parameters must be JSON-serialisable: {exc}") from None


def now() -> str:
    """The time stored with a charge, void or upgrade: UTC, ISO 8601, microseconds."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")
