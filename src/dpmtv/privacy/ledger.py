"""The privacy-budget ledger: a SQLite file that composes every release of a dataset (SPEC §4).

Model
=====
A *dataset* is a name chosen by the user with a budget ``(ε, δ)``. Every build that uses the
dataset *charges* its accounting event (the build's ``GaussianReleasePlan.event``, composed with
any selection events), and the ledger refuses a charge if the composition of ALL the dataset's
charges, old and new, would exceed ``ε`` at the dataset's ``δ``. Composition is done by the PLD
accountant of :mod:`dpmtv.privacy.events` (unit-sensitivity events, ADD_OR_REMOVE_ONE,
pessimistic estimates): we write no composition theorem, and the spent ε is an upper bound.

Ledger first
============
The build plans its release (all numbers fixed), then charges, then draws noise::

    plan = plan_gaussian_release(...)                      # nothing drawn yet
    receipt = ledger.charge(name, plan.event, parameters=..., artifact=str(out))
    noised = add_gaussian_noise(mean, plan=plan, sampler=sampler)
    ... write the artifact ...
    ledger.mark_written(receipt, artifact=str(out))        # bookkeeping only

A failure before :meth:`Ledger.charge` returns costs nothing; a failure after it keeps the charge
(noise may have been drawn and seen), which is the safe side. Charges are final: nothing in this
module deletes or lowers one.

Concurrency
===========
:meth:`Ledger.charge` reads the previous charges, composes, checks and inserts inside ONE
``BEGIN IMMEDIATE`` transaction. ``IMMEDIATE`` takes SQLite's write (RESERVED) lock before the
first read, so two charging processes serialise: the second one waits (busy timeout) and then sees
the first one's committed charge. No interleaving can make two charges each pass the check against
a state that lacks the other. Keep the file on a local disk: SQLite's locking is unreliable on
network file systems.

What is stored
==============
Per dataset: name, ``ε``, ``δ``, creation time. Per charge: an id, the serialised event
(:func:`dpmtv.privacy.events.event_to_json`), the caller's parameters (JSON), the artifact path,
the charge time, the composed ε after the charge, and when the artifact was written. Never data:
callers must not put records, counts of private data or anything derived from it into
``parameters``.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import dp_accounting

from dpmtv.errors import BudgetExceededError, ParameterError
from dpmtv.privacy.calibrate import validate_epsilon_delta
from dpmtv.privacy.events import epsilon_of, event_from_json, event_to_json

__all__ = ["Charge", "ChargeReceipt", "DatasetStatus", "Ledger", "LedgerCharge", "composed_epsilon"]

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 120.0
_MAX_NAME = 200

_SCHEMA = """
CREATE TABLE IF NOT EXISTS datasets (
    name TEXT PRIMARY KEY,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    created_at TEXT NOT NULL
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
    written_at TEXT
);
"""


@dataclass(frozen=True)
class Charge:
    """One charge as stored. ``written_at`` is None until :meth:`Ledger.mark_written`."""

    charge_id: str
    dataset: str
    event: dp_accounting.DpEvent
    parameters: Mapping[str, Any]
    artifact: str | None
    charged_at: str
    epsilon_after: float  # composed ε at the dataset's δ after this charge
    written_at: str | None


@dataclass(frozen=True)
class ChargeReceipt:
    """What :meth:`Ledger.charge` returns: proof that the budget was taken."""

    charge_id: str
    dataset: str
    epsilon_spent: float  # composed ε of all charges, this one included
    epsilon_budget: float
    delta: float
    charged_at: str

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class DatasetStatus:
    """A dataset's budget and what its charges have spent.

    ``epsilon_spent`` is the PLD composition of all charges at ``delta`` (0 with no charges).
    ``epsilon_headroom = epsilon_budget - epsilon_spent`` is for display only: composition is not
    additive, so a new release may cost less than its stand-alone ε (never more than the
    headroom is allowed, whatever it costs alone).
    """

    name: str
    epsilon_budget: float
    delta: float
    created_at: str
    epsilon_spent: float
    charges: tuple[Charge, ...]

    @property
    def epsilon_headroom(self) -> float:
        return max(0.0, self.epsilon_budget - self.epsilon_spent)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "epsilon_budget": self.epsilon_budget,
            "delta": self.delta,
            "created_at": self.created_at,
            "epsilon_spent": self.epsilon_spent,
            "epsilon_headroom": self.epsilon_headroom,
            "charges": [
                {
                    "charge_id": c.charge_id,
                    "event": event_to_json(c.event),
                    "parameters": dict(c.parameters),
                    "artifact": c.artifact,
                    "charged_at": c.charged_at,
                    "written_at": c.written_at,
                    "epsilon_after": c.epsilon_after,
                }
                for c in self.charges
            ],
        }


def composed_epsilon(events: Sequence[dp_accounting.DpEvent], *, delta: float) -> float:
    """ε at ``delta`` of all ``events`` composed (PLD accountant); 0.0 for no events."""
    if not events:
        return 0.0
    return epsilon_of(dp_accounting.ComposedDpEvent(list(events)), delta=delta)


class Ledger:
    """A privacy-budget ledger in the SQLite file ``path``.

    The file is created by the first :meth:`init_dataset`; every other method refuses a missing
    file (a mistyped ``--ledger`` must not silently start an empty ledger).
    """

    def __init__(self, path: str | Path, *, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = Path(path)
        self.busy_timeout_s = float(busy_timeout_s)

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    # -- datasets ---------------------------------------------------------------------------

    def init_dataset(self, name: str, *, epsilon: float, delta: float) -> DatasetStatus:
        """Create dataset ``name`` with budget ``(epsilon, delta)``.

        Raises:
            ParameterError: an invalid name or budget, or the name already exists (budgets are
                fixed once created: raising one after releases would defeat the ledger).
        """
        name = _check_name(name)
        validate_epsilon_delta(epsilon=epsilon, delta=delta)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._transaction(create=True) as conn:
            row = conn.execute("SELECT epsilon, delta FROM datasets WHERE name = ?", (name,)).fetchone()
            if row is not None:
                raise ParameterError(
                    f"dataset {name!r} already exists in ledger '{self.path}' with budget "
                    f"epsilon = {row[0]:g}, delta = {row[1]:g}; budgets cannot be changed, "
                    "choose another name"
                )
            conn.execute(
                "INSERT INTO datasets (name, epsilon, delta, created_at) VALUES (?, ?, ?, ?)",
                (name, float(epsilon), float(delta), _now()),
            )
        return self.status(name)

    def datasets(self) -> list[str]:
        """All dataset names, sorted."""
        with self._transaction() as conn:
            return [row[0] for row in conn.execute("SELECT name FROM datasets ORDER BY name")]

    def status(self, name: str) -> DatasetStatus:
        """The budget of ``name``, its charges, and their composed ε at its δ."""
        with self._transaction() as conn:
            epsilon, delta, created = self._dataset_row(conn, _check_name(name))
            charges = self._charges(conn, name)
        spent = composed_epsilon([c.event for c in charges], delta=delta)
        return DatasetStatus(name, epsilon, delta, created, spent, tuple(charges))

    # -- charges ----------------------------------------------------------------------------

    def charge(
        self,
        name: str,
        event: dp_accounting.DpEvent,
        *,
        parameters: Mapping[str, Any],
        artifact: str | None,
    ) -> ChargeReceipt:
        """Charge ``event`` to dataset ``name`` atomically, or refuse it.

        In one ``BEGIN IMMEDIATE`` transaction: read the previous charges, compose them with
        ``event`` (PLD accountant, at the dataset's δ), and insert the charge only if the
        composed ε is <= the budget ε (equality is allowed).

        Raises:
            BudgetExceededError: the composition would exceed the budget (spent, budget and the
                would-be total are in the message); nothing is charged.
            ParameterError: unknown dataset, a missing ledger file, an event the ledger cannot
                store or account, or parameters that are not JSON.
        """
        name = _check_name(name)
        event_json = _check_event(event)
        parameters_json = _check_parameters(parameters)
        with self._transaction(immediate=True) as conn:
            budget, delta, _ = self._dataset_row(conn, name)
            previous = [c.event for c in self._charges(conn, name)]
            before = composed_epsilon(previous, delta=delta)
            after = composed_epsilon([*previous, event], delta=delta)
            if not after <= budget:  # also refuses NaN and inf (a non-private event)
                raise BudgetExceededError(_refusal(name, budget, delta, before, after, len(previous)))
            receipt = ChargeReceipt(uuid.uuid4().hex, name, after, budget, delta, _now())
            conn.execute(
                "INSERT INTO charges (charge_id, dataset, event_json, parameters_json, artifact, "
                "charged_at, epsilon_after) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (receipt.charge_id, name, event_json, parameters_json, artifact, receipt.charged_at, after),
            )
        return receipt

    def check_charge(self, name: str, event: dp_accounting.DpEvent) -> float:
        """The composed ε that charging ``event`` now would reach; raises like :meth:`charge`.

        A NON-binding preview (nothing is locked or stored), for refusing a build early, before
        its forward passes; only :meth:`charge` takes the budget.
        """
        name = _check_name(name)
        _check_event(event)
        with self._transaction() as conn:
            budget, delta, _ = self._dataset_row(conn, name)
            previous = [c.event for c in self._charges(conn, name)]
        before = composed_epsilon(previous, delta=delta)
        after = composed_epsilon([*previous, event], delta=delta)
        if not after <= budget:
            raise BudgetExceededError(_refusal(name, budget, delta, before, after, len(previous)))
        return after

    def mark_written(self, receipt: ChargeReceipt | str, *, artifact: str | None = None) -> None:
        """Record that the charged build wrote its artifact (and, optionally, where).

        Bookkeeping only: it never changes what was charged.
        """
        charge_id = receipt.charge_id if isinstance(receipt, ChargeReceipt) else str(receipt)
        with self._transaction(immediate=True) as conn:
            cursor = conn.execute(
                "UPDATE charges SET written_at = ?, artifact = COALESCE(?, artifact) WHERE charge_id = ?",
                (_now(), artifact, charge_id),
            )
            if cursor.rowcount != 1:
                raise ParameterError(f"no charge with id {charge_id!r} in ledger '{self.path}'")

    # -- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _transaction(self, *, immediate: bool = False, create: bool = False) -> Iterator[sqlite3.Connection]:
        """A connection inside one transaction: committed on success, rolled back on any error."""
        if not create and not self.path.is_file():
            raise ParameterError(
                f"no ledger at '{self.path}'; create a dataset budget first with "
                "'dpmtv budget init NAME --epsilon E --delta D --ledger PATH'"
            )
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE" if immediate or create else "BEGIN")
            if create:
                self._ensure_schema(conn)
            else:
                self._check_schema(conn)
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = FULL")  # a committed charge survives a power cut
        except sqlite3.DatabaseError as exc:
            raise ParameterError(f"cannot open ledger '{self.path}': {exc}") from None
        return conn

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        version = self._version(conn)
        if version == 0:
            for statement in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        else:
            self._check_schema(conn)

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        version = self._version(conn)
        if version != SCHEMA_VERSION:
            raise ParameterError(
                f"'{self.path}' is not a dpmtv ledger of format {SCHEMA_VERSION} (found format "
                f"{version}); use the dpmtv version that created it or another --ledger path"
            )

    def _version(self, conn: sqlite3.Connection) -> int:
        try:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            raise ParameterError(f"'{self.path}' is not a readable SQLite ledger: {exc}") from None

    def _dataset_row(self, conn: sqlite3.Connection, name: str) -> tuple[float, float, str]:
        row = conn.execute(
            "SELECT epsilon, delta, created_at FROM datasets WHERE name = ?", (name,)
        ).fetchone()
        if row is None:
            known = [r[0] for r in conn.execute("SELECT name FROM datasets ORDER BY name")]
            raise ParameterError(
                f"no dataset {name!r} in ledger '{self.path}' (known: {known or 'none'}); "
                f"create it with 'dpmtv budget init {name} --epsilon E --delta D'"
            )
        return float(row[0]), float(row[1]), str(row[2])

    def _charges(self, conn: sqlite3.Connection, name: str) -> list[Charge]:
        rows = conn.execute(
            "SELECT charge_id, event_json, parameters_json, artifact, charged_at, epsilon_after, "
            "written_at FROM charges WHERE dataset = ? ORDER BY seq",
            (name,),
        ).fetchall()
        return [
            Charge(cid, name, event_from_json(json.loads(ev)), json.loads(par), art, at, eps, wr)
            for cid, ev, par, art, at, eps, wr in rows
        ]


def _refusal(name: str, budget: float, delta: float, before: float, after: float, count: int) -> str:
    headroom = max(0.0, budget - before)
    return (
        f"budget exceeded for dataset {name!r}: its {count} previous charge(s) spent epsilon = "
        f"{before:.6g} of its budget epsilon = {budget:g} at delta = {delta:g} (remaining "
        f"{headroom:.6g}); this release would bring the total to epsilon = {after:.6g}. Nothing "
        "was charged and no noise was drawn; use a smaller --epsilon or a new dataset budget"
    )


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > _MAX_NAME or not name.isprintable():
        raise ParameterError(
            f"dataset name must be a printable, non-empty string of at most {_MAX_NAME} "
            f"characters, got {name!r}"
        )
    return name


def _check_event(event: object) -> str:
    if not isinstance(event, dp_accounting.DpEvent):
        raise ParameterError(f"expected a dp_accounting DpEvent to charge, got {type(event).__name__}")
    encoded = event_to_json(event)
    event_from_json(encoded)  # refuses types the ledger could not read back
    return json.dumps(encoded, sort_keys=True)


def _check_parameters(parameters: Mapping[str, Any]) -> str:
    if not isinstance(parameters, Mapping):
        raise ParameterError(f"parameters must be a mapping, got {type(parameters).__name__}")
    try:
        return json.dumps(dict(parameters), sort_keys=True, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"parameters must be JSON-serialisable: {exc}") from None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


class LedgerCharge:
    """A build's ``before_noise`` callback: charge the build's event to ``dataset`` once.

    ``build_task_vector(..., before_noise=LedgerCharge(ledger, name, parameters=..., artifact=...))``
    calls it with the composed event right before the first noise draw; a refusal raises
    :class:`~dpmtv.errors.BudgetExceededError` there, so no noise is drawn. After the artifact is
    written, :meth:`mark_written` records it. Calling it a second time raises (one charge per build).
    """

    def __init__(self, ledger: Ledger, dataset: str, *, parameters: Mapping[str, Any], artifact: str | None):
        self.ledger, self.dataset = ledger, _check_name(dataset)
        self.parameters, self.artifact = dict(parameters), artifact
        self.receipt: ChargeReceipt | None = None

    def preview(self, event: dp_accounting.DpEvent) -> float:
        """:meth:`Ledger.check_charge`: refuse early (before forward passes), without charging."""
        return self.ledger.check_charge(self.dataset, event)

    def __call__(self, event: dp_accounting.DpEvent) -> ChargeReceipt:
        if self.receipt is not None:
            raise BudgetExceededError(f"this build already charged dataset {self.dataset!r} once")
        self.receipt = self.ledger.charge(
            self.dataset, event, parameters=self.parameters, artifact=self.artifact
        )
        return self.receipt

    def mark_written(self, artifact: str | None = None) -> None:
        """Record that the artifact was written (no-op if nothing was charged)."""
        if self.receipt is not None:
            self.ledger.mark_written(self.receipt, artifact=artifact)
