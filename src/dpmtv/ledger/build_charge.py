"""The ledger's rules for one build: whether it is charged to a dataset or voids it, the checks
made before the build does any work, the ``before_noise`` callback, what a failure means for the
charge, and the record of the written artifact.

A build that names a dataset is charged right before its first noise draw
(:class:`~dpmtv.ledger.charge.LedgerCharge`). A build without a guarantee (non-private, seeded
noise) cannot be charged: it is refused, or, with ``void_budget``, recorded as voiding the
dataset for good. A failure before the charge leaves the ledger untouched; after it, the charge
stands (noise was drawn) and the caller is told so.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpmtv.errors import LedgerError, ParameterError
from dpmtv.ledger.access import check_ledger_writable
from dpmtv.ledger.book import Ledger
from dpmtv.ledger.charge import LedgerCharge
from dpmtv.ledger.records import DatasetStatus, Void

__all__ = ["BuildCharge", "void_reason"]


def void_reason(
    *, non_private: bool, insecure_seed: int | None, dataset: str | None, void_budget: bool
) -> str | None:
    """Why a build that names ``dataset`` voids it (None: it is charged, or names no dataset),
    or a refusal: such a build cannot be charged, and ``void_budget`` is only for such a build."""
    reason = (
        "a --non-private build (no noise)"
        if non_private
        else f"an --insecure-seeded-noise {insecure_seed} build (its noise can be regenerated)"
        if insecure_seed is not None
        else None
    )
    if void_budget and (reason is None or dataset is None):
        raise ParameterError(
            "--void-budget is only for a --non-private or --insecure-seeded-noise build that names --dataset"
        )
    if reason is not None and dataset is not None and not void_budget:
        raise ParameterError(
            f"{reason} has no privacy guarantee, so it cannot be charged to dataset {dataset!r}: drop "
            f"--dataset, or add --void-budget to record it and mark the dataset's guarantee VOID for good"
        )
    return reason if dataset is not None else None


class BuildCharge:
    """One build's account with ``ledger``'s ``dataset``: check it first, then hand the build its
    ``before_noise`` callback (:meth:`callback`), then record what the build did."""

    def __init__(self, ledger: Ledger, dataset: str, *, void_reason: str | None, timeout_s: float):
        self.ledger, self.dataset, self.void_reason = ledger, dataset, void_reason
        self.ledger.busy_timeout_s = self.timeout_s = timeout_s
        self.charge: LedgerCharge | None = None

    def check(self, *, neighbouring_relation: str, privacy_unit: str, on_wait: Callable[[str], None]) -> None:
        """Before any work: refuse an unknown dataset, another relation or unit, or a ledger that
        cannot be written now (waiting for another writer at most ``timeout_s``)."""
        if self.void_reason is not None:
            self.ledger.status(self.dataset)  # it must exist
        else:
            self.ledger.check_dataset(
                self.dataset, neighbouring_relation=neighbouring_relation, privacy_unit=privacy_unit
            )
        check_ledger_writable(self.ledger, timeout_s=self.timeout_s, on_wait=on_wait)

    def callback(
        self,
        settings: Any,
        *,
        model: str,
        library_version: str,
        artifact: Path | None,
        started_at: str | None = None,
        num_records: int | None = None,
    ) -> LedgerCharge:
        """The build's ``before_noise``: it charges (or voids) once, recording public parameters;
        ``started_at``: the build's one stored time (:class:`~dpmtv.ledger.charge.LedgerCharge`).
        ``settings`` is the build's :class:`~dpmtv.pipeline.settings.BuildSettings`, read and not
        imported: the ledger sits below the pipeline. ``num_records``: the records' N, recorded
        under replace-one only (:mod:`dpmtv.ledger.public_n`)."""
        self.charge = LedgerCharge.for_build(
            self.ledger,
            self.dataset,
            settings,
            model=model,
            library_version=library_version,
            artifact=artifact,
            void_reason=self.void_reason,
            started_at=started_at,
            num_records=num_records,
        )
        return self.charge

    def failure_message(self, exc: BaseException) -> str | None:
        """What a build that raised ``exc`` did to the ledger. Before the charge: an error (raised)
        for a ledger still locked at the charge, else None (nothing was charged; the caller says
        so). After it: the sentence saying that the charge stands."""
        receipt = None if self.charge is None else self.charge.receipt
        if receipt is None:
            if isinstance(exc, sqlite3.OperationalError):  # still locked at the charge
                raise LedgerError(f"ledger '{self.ledger.path}': {exc}; nothing was charged") from None
            return None
        spent = (
            f"dataset {self.dataset!r} was voided"
            if isinstance(receipt, Void)
            else f"ε was charged to dataset {self.dataset!r} (charge {receipt.charge_id}; "
            f"{receipt.epsilon_spent:.2f} of {receipt.epsilon_budget:.2f} now spent)"
        )
        return f"{spent} for a build that then failed; the charge stands (noise was drawn)"

    def mark_written(self, artifact: Path | None, *, tensors_sha256: str) -> str | None:
        """Record the written artifact and the hash of its tensors beside the charge. A ledger
        that cannot record it now (locked past the timeout, full, damaged) changes nothing that
        was charged or written: the sentence saying exactly that is returned for the caller to
        warn with (None: recorded), since stopping the build would only hide a valid artifact."""
        if self.charge is None or self.charge.receipt is None:
            return None
        receipt = self.charge.receipt
        try:
            self.charge.mark_written(artifact, tensors_sha256=tensors_sha256)
        except (sqlite3.Error, LedgerError) as exc:
            entry = f"void {receipt.void_id}" if isinstance(receipt, Void) else f"charge {receipt.charge_id}"
            return (
                f"{artifact} was written and is complete and its {entry} stands, but ledger "
                f"'{self.ledger.path}' could not record the write ({exc}): 'dpmtv budget show' lists "
                "it as not written"
            )
        return None

    def status(self) -> DatasetStatus:
        return self.ledger.status(self.dataset)
