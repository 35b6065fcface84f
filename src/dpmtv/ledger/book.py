"""The privacy-budget ledger: a SQLite file that composes every release of a dataset.

Model
=====
A *dataset* is a name chosen by the user with a budget ``(ε, δ)``, a neighbouring relation
(``replace-one`` or ``add-remove-one``) and a privacy unit (``record`` or ``user``), all fixed at
creation. Every build that uses the dataset *charges* its accounting event, and the ledger refuses:

* a charge under another relation or unit than the dataset's: the events are normalised to
  unit sensitivity under the build's own relation (:mod:`dpmtv.privacy.events`), so composing a
  replace-one event with an add-remove-one event, or a per-record with a per-user one, states
  no guarantee for either relation;
* a charge that would make the composition of ALL the dataset's charges, old and new, exceed
  ``ε`` at the dataset's ``δ``. Composition is done by the PLD accountant (pessimistic
  estimates): we write no composition theorem, and the spent ε is an upper bound. A build on
  disjoint halves (parallel composition) is charged as :class:`~dpmtv.privacy.disjoint.
  DisjointReleases`: it costs its worse alternative, never the composition of both.

A build without a guarantee (non-private, or seeded noise whose seed is in the artifact) may name
a dataset only to VOID it: :meth:`Ledger.void_dataset` records the build, and from then on the
dataset's status says its guarantee is void. Nothing in this module removes a void or a charge.

Ledger first
============
The build plans its release (all numbers fixed), previews, then charges, then draws noise::

    plan = plan_gaussian_release(...)                      # nothing drawn yet
    ledger.check_charge(name, plan.event, ...)             # refuse before any forward pass
    ... extract, clip, sum ...
    receipt = ledger.charge(name, plan.event, ...)         # the binding charge
    noised = add_gaussian_noise(mean, plan=plan, sampler=sampler)
    ... write the artifact ...
    ledger.mark_written(receipt, artifact=..., tensors_sha256=...)   # bookkeeping only

A failure before :meth:`Ledger.charge` returns costs nothing; a failure after it keeps the charge
(noise may have been drawn and seen), which is the safe side.

Concurrency
===========
:meth:`Ledger.charge` reads the previous charges, composes, checks and inserts inside ONE
``BEGIN IMMEDIATE`` transaction. ``IMMEDIATE`` takes SQLite's write (RESERVED) lock before the
first read, so two charging processes serialise: the second one waits (busy timeout) and then sees
the first one's committed charge. No interleaving can make two charges each pass the check against
a state that lacks the other. Keep the file on a local disk: SQLite's locking is unreliable on
network file systems.

Format
======
Format 3 (this module) stores per dataset: name, ``ε``, ``δ``, relation, unit, creation time; per
charge: an id, the serialised event, the caller's parameters (JSON), the artifact's absolute path
and tensor hash, the charge time, the composed ε after the charge, when the artifact was written;
per void: the same without an event, plus the reason. Never data: callers must not put records,
counts of private data or anything derived from it into ``parameters``. Every write is also
chained (:mod:`dpmtv.ledger.chain`): a dataset whose rows were edited outside dpmtv has
a broken chain, which :attr:`DatasetStatus.chain_problem` names and which no charge or void
extends.

Older ledgers are upgraded in place the first time they are opened (:mod:`dpmtv.ledger.file`),
unless the file already holds a chain (a format number set back: tampering, refused).
Format 2 → 3 chains the rows as found (the status says since when). A format-1 ledger (no
relation, unit or voids) first becomes format 2:
each dataset takes the relation and unit its charges recorded (the CLI always recorded both);
a dataset without charges, or whose charges recorded none, takes the defaults (replace-one,
record); a dataset whose charges recorded DIFFERENT relations or units is voided, since its
composed ε was computed across relations.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dpmtv.errors import BudgetExceededError, LedgerError, ParameterError
from dpmtv.ledger import chain as ledger_chain
from dpmtv.ledger.file import transaction
from dpmtv.ledger.format import (
    DEFAULT_RELATION,
    DEFAULT_UNIT,
    PRIVACY_UNITS,
    check_event,
    check_name,
    check_new_name,
    check_parameters,
    check_relation,
    check_unit,
    now,
)
from dpmtv.ledger.public_n import same_num_records
from dpmtv.ledger.records import Charge, ChargeReceipt, DatasetStatus, Void, _DatasetRow
from dpmtv.privacy.calibrate import validate_epsilon_delta
from dpmtv.privacy.disjoint import ChargedEvent, charged_event_from_json, composed_epsilon

__all__ = [
    "Charge",
    "ChargeReceipt",
    "DatasetStatus",
    "Ledger",
    "PRIVACY_UNITS",
    "Void",
    "composed_epsilon",
]

BUSY_TIMEOUT_S = 120.0


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

    def init_dataset(
        self,
        name: str,
        *,
        epsilon: float,
        delta: float,
        neighbouring_relation: str = DEFAULT_RELATION,
        privacy_unit: str = DEFAULT_UNIT,
    ) -> DatasetStatus:
        """Create dataset ``name`` with budget ``(epsilon, delta)`` under ``neighbouring_relation``
        and ``privacy_unit`` (spelled as in ``dpmtv build``).

        Raises:
            ParameterError: an invalid name, budget, relation or unit, or the name already exists
                (budgets are fixed once created: raising one after releases would defeat the ledger).
            LedgerError: the name has charges or chain entries but its row was deleted.
        """
        name = check_name(name)
        validate_epsilon_delta(epsilon=epsilon, delta=delta)
        relation, unit = check_relation(neighbouring_relation), check_unit(privacy_unit)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._transaction(create=True) as conn:
            check_new_name(conn, name, self.path)
            conn.execute(
                "INSERT INTO datasets (name, epsilon, delta, created_at, neighbouring_relation, "
                "privacy_unit) VALUES (?, ?, ?, ?, ?, ?)",
                (name, float(epsilon), float(delta), _now(), relation, unit),
            )
            ledger_chain.record(conn, "datasets", name)
        return self.status(name)

    def datasets(self) -> list[str]:
        """All dataset names, sorted."""
        with self._transaction() as conn:
            return [row[0] for row in conn.execute("SELECT name FROM datasets ORDER BY name")]

    def status(self, name: str) -> DatasetStatus:
        """The budget of ``name``, its charges and voids, and their composed ε at its δ."""
        name = check_name(name)
        with self._transaction() as conn:
            row = self._dataset_row(conn, name)
            problem = ledger_chain.verify(conn).get(name)
            since = ledger_chain.upgraded_from(conn, name)
            charges, voids = self._charges(conn, name, problem), self._voids(conn, name, problem)
        spent = composed_epsilon([c.event for c in charges], delta=row.delta)
        return DatasetStatus(
            name,
            row.epsilon,
            row.delta,
            row.created_at,
            spent,
            tuple(charges),
            row.neighbouring_relation,
            row.privacy_unit,
            tuple(voids),
            problem,
            since,
        )

    def chain_problems(self) -> dict[str, str]:
        """Every dataset whose chain is broken → the first problem found (empty: all intact)."""
        with self._transaction() as conn:
            return ledger_chain.verify(conn)

    def check_dataset(self, name: str, *, neighbouring_relation: str, privacy_unit: str) -> DatasetStatus:
        """Refuse early, before a build reads anything: an unknown dataset, another relation or
        unit, or a budget with nothing left. Charges nothing (the exact cost is checked by
        :meth:`check_charge` once the build has planned its release)."""
        status = self.status(name)
        if status.chain_problem is not None:
            raise self._broken(name, status.chain_problem)
        _check_same_relation(name, status, check_relation(neighbouring_relation), check_unit(privacy_unit))
        if not status.epsilon_spent < status.epsilon_budget:
            raise BudgetExceededError(
                f"budget exceeded for dataset {name!r}: its {len(status.charges)} charge(s) spent "
                f"epsilon = {status.epsilon_spent:.6g} of its budget epsilon = "
                f"{status.epsilon_budget:g}; nothing is left for another release"
            )
        return status

    # -- charges ----------------------------------------------------------------------------

    def charge(
        self,
        name: str,
        event: ChargedEvent,
        *,
        neighbouring_relation: str,
        privacy_unit: str,
        parameters: Mapping[str, Any],
        artifact: str | Path | None,
        charged_at: str | None = None,
    ) -> ChargeReceipt:
        """Charge ``event`` (a DpEvent, or :class:`DisjointReleases` for a parallel build) to
        dataset ``name`` atomically, or refuse it. ``charged_at``: the time stored (default now; a
        build passes its start time, since a time taken after private computation times it).

        In one ``BEGIN IMMEDIATE`` transaction: check the build's relation and unit are the
        dataset's, read the previous charges (and their N, :mod:`dpmtv.ledger.public_n`), compose
        them with ``event`` (PLD accountant, at the dataset's δ), and insert the charge only if the
        composed ε is <= the budget ε (equality is allowed).

        Raises:
            BudgetExceededError: the composition would exceed the budget (spent, budget and the
                would-be total are in the message); nothing is charged.
            ParameterError: unknown dataset, a missing ledger file, another relation or unit than
                the dataset's, an event the ledger cannot store or account, or parameters that
                are not JSON.
        """
        name = check_name(name)
        event_json = check_event(event)
        parameters_json = check_parameters(parameters)
        relation, unit = check_relation(neighbouring_relation), check_unit(privacy_unit)
        with self._transaction(immediate=True) as conn:
            row = self._intact_row(conn, name)
            _check_same_relation(name, row, relation, unit)
            previous = same_num_records(name, relation, self._charges(conn, name), parameters)
            after = _check_fits(name, row, previous, event)
            receipt = ChargeReceipt(
                uuid.uuid4().hex, name, after, row.epsilon, row.delta, charged_at or _now()
            )
            conn.execute(
                "INSERT INTO charges (charge_id, dataset, event_json, parameters_json, artifact, "
                "charged_at, epsilon_after) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    receipt.charge_id,
                    name,
                    event_json,
                    parameters_json,
                    _absolute(artifact),
                    receipt.charged_at,
                    after,
                ),
            )
            ledger_chain.record(conn, "charges", receipt.charge_id)
        return receipt

    def check_charge(
        self, name: str, event: ChargedEvent, *, neighbouring_relation: str, privacy_unit: str
    ) -> float:
        """The composed ε that charging ``event`` now would reach; raises like :meth:`charge`.

        A NON-binding preview (nothing is locked or stored), for refusing a build early, before
        its forward passes; only :meth:`charge` takes the budget.
        """
        name = check_name(name)
        check_event(event)
        relation, unit = check_relation(neighbouring_relation), check_unit(privacy_unit)
        with self._transaction() as conn:
            row = self._intact_row(conn, name)
            previous = [c.event for c in self._charges(conn, name)]
        _check_same_relation(name, row, relation, unit)
        return _check_fits(name, row, previous, event)

    def void_dataset(
        self,
        name: str,
        *,
        reason: str,
        parameters: Mapping[str, Any],
        artifact: str | Path | None,
        voided_at: str | None = None,
    ) -> Void:
        """Record a build without a privacy guarantee against ``name``: from now on the dataset's
        guarantee is VOID (:attr:`DatasetStatus.void`), for good. Charges nothing."""
        name = check_name(name)
        parameters_json = check_parameters(parameters)
        if not isinstance(reason, str) or not reason.strip():
            raise ParameterError(f"a void needs a reason, got {reason!r}")
        with self._transaction(immediate=True) as conn:
            self._intact_row(conn, name)
            at = voided_at or _now()
            void = Void(uuid.uuid4().hex, name, reason, parameters, _absolute(artifact), at, None, None)
            conn.execute(
                "INSERT INTO voids (void_id, dataset, reason, parameters_json, artifact, voided_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (void.void_id, name, reason, parameters_json, void.artifact, void.voided_at),
            )
            ledger_chain.record(conn, "voids", void.void_id)
        return void

    def mark_written(
        self,
        receipt: ChargeReceipt | Void | str,
        *,
        artifact: str | Path | None = None,
        tensors_sha256: str | None = None,
        written_at: str | None = None,
    ) -> None:
        """Record that the charged (or voiding) build wrote its artifact: where (absolute) and
        the artifact's tensor hash (``written_at``: the time stored, default now; a build passes
        its start time). Bookkeeping only: it never changes what was charged."""
        if isinstance(receipt, ChargeReceipt):
            table, key, entry_id = "charges", "charge_id", receipt.charge_id
        elif isinstance(receipt, Void):
            table, key, entry_id = "voids", "void_id", receipt.void_id
        else:
            table, key, entry_id = "charges", "charge_id", str(receipt)
        with self._transaction(immediate=True) as conn:
            cursor = conn.execute(
                f"UPDATE {table} SET written_at = ?, artifact = COALESCE(?, artifact), "  # noqa: S608 (fixed names)
                f"tensors_sha256 = COALESCE(?, tensors_sha256) WHERE {key} = ?",
                (written_at or _now(), _absolute(artifact), tensors_sha256, entry_id),
            )
            if cursor.rowcount != 1:
                raise ParameterError(f"no charge with id {entry_id!r} in ledger '{self.path}'")
            ledger_chain.record(conn, table, entry_id)

    # -- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _transaction(self, *, immediate: bool = False, create: bool = False) -> Iterator[sqlite3.Connection]:
        """A connection inside one transaction (:func:`dpmtv.ledger.file.transaction`)."""
        with transaction(
            self.path, busy_timeout_s=self.busy_timeout_s, immediate=immediate, create=create
        ) as conn:
            yield conn

    def _intact_row(self, conn: sqlite3.Connection, name: str) -> _DatasetRow:
        """The dataset's row, refusing a dataset whose chain is broken (nothing is written to it)."""
        row = self._dataset_row(conn, name)
        problem = ledger_chain.verify(conn).get(name)
        if problem is not None:
            raise self._broken(name, problem)
        return row

    def _broken(self, name: str, problem: str) -> LedgerError:
        return LedgerError(
            f"ledger '{self.path}': the chain of dataset {name!r} is broken ({problem}); its budget "
            "cannot be trusted and nothing was charged. See 'dpmtv budget verify'; restore the file "
            "from a backup or create a new dataset budget"
        )

    def _dataset_row(self, conn: sqlite3.Connection, name: str) -> _DatasetRow:
        row = conn.execute(
            "SELECT epsilon, delta, created_at, neighbouring_relation, privacy_unit FROM datasets "
            "WHERE name = ?",
            (name,),
        ).fetchone()
        if row is None:
            problem = ledger_chain.verify(conn).get(name)  # a row deleted outside dpmtv
            if problem is not None:
                raise self._broken(name, problem)
            known = [r[0] for r in conn.execute("SELECT name FROM datasets ORDER BY name")]
            raise ParameterError(
                f"no dataset {name!r} in ledger '{self.path}' (known: {known or 'none'}); "
                f"create it with 'dpmtv budget init {name} --epsilon E --delta D'"
            )
        return _DatasetRow(float(row[0]), float(row[1]), str(row[2]), str(row[3]), str(row[4]))

    def _charges(self, conn: sqlite3.Connection, name: str, problem: str | None = None) -> list[Charge]:
        rows = conn.execute(
            "SELECT charge_id, event_json, parameters_json, artifact, charged_at, epsilon_after, "
            "written_at, tensors_sha256 FROM charges WHERE dataset = ? ORDER BY seq",
            (name,),
        ).fetchall()
        return [
            Charge(cid, name, self._read(ev, cid, problem, event=True), self._read(par, cid, problem), *rest)
            for cid, ev, par, *rest in rows
        ]

    def _voids(self, conn: sqlite3.Connection, name: str, problem: str | None = None) -> list[Void]:
        rows = conn.execute(
            "SELECT void_id, reason, parameters_json, artifact, voided_at, written_at, tensors_sha256 "
            "FROM voids WHERE dataset = ? ORDER BY seq",
            (name,),
        ).fetchall()
        return [
            Void(vid, name, reason, self._read(par, vid, problem), *rest) for vid, reason, par, *rest in rows
        ]

    def _read(self, text: str, entry_id: str, problem: str | None, *, event: bool = False) -> Any:
        """A stored JSON column (an event, or parameters); an unreadable one is one error line
        naming the ledger and the row, not a traceback."""
        try:
            value = json.loads(text)
            return charged_event_from_json(value) if event else value
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            broken = f"; its dataset's chain is broken ({problem})" if problem else ""
            raise LedgerError(
                f"ledger '{self.path}': entry {entry_id} holds invalid {'event' if event else 'parameters'} "
                f"JSON ({type(exc).__name__}: {exc}){broken}; nothing was charged"
            ) from None


def _check_same_relation(name: str, row: _DatasetRow | DatasetStatus, relation: str, unit: str) -> None:
    fixed = (row.neighbouring_relation, row.privacy_unit)
    if (relation, unit) != fixed:
        raise ParameterError(
            f"dataset {name!r} was created for {fixed[0]} per {fixed[1]}, and this build "
            f"is {relation} per {unit}: releases under different neighbouring relations or "
            f"privacy units do not compose into one guarantee. Build with --neighbouring-relation "
            f"{fixed[0]} --privacy-unit {fixed[1]}, or use another dataset budget"
        )


def _check_fits(name: str, row: _DatasetRow, previous: list[ChargedEvent], event: ChargedEvent) -> float:
    after = composed_epsilon([*previous, event], delta=row.delta)
    if not after <= row.epsilon:  # also refuses NaN and inf (a non-private event)
        before = composed_epsilon(previous, delta=row.delta)  # for the message only
        raise BudgetExceededError(_refusal(name, row.epsilon, row.delta, before, after, len(previous)))
    return after


def _refusal(name: str, budget: float, delta: float, before: float, after: float, count: int) -> str:
    headroom = max(0.0, budget - before)
    return (
        f"budget exceeded for dataset {name!r}: its {count} previous charge(s) spent epsilon = "
        f"{before:.6g} of its budget epsilon = {budget:g} at delta = {delta:g} (remaining "
        f"{headroom:.6g}); this release would bring the total to epsilon = {after:.6g}. Nothing "
        "was charged and no noise was drawn; use a smaller --epsilon or a new dataset budget"
    )


def _absolute(artifact: str | Path | None) -> str | None:
    """Artifacts are recorded by absolute path: a relative one is ambiguous in a shared ledger."""
    return None if artifact is None else str(Path(artifact).resolve())


def _now() -> str:
    return now()
