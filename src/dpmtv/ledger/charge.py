"""A build's ledger callback: preview, charge once right before the first noise draw, record the
written artifact (the "Ledger first" protocol of :mod:`dpmtv.ledger.book`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpmtv._build_time import build_timestamp
from dpmtv.errors import BudgetExceededError
from dpmtv.ledger.book import Ledger
from dpmtv.ledger.format import check_name, check_relation, check_unit
from dpmtv.ledger.public_n import NUM_RECORDS, same_num_records
from dpmtv.ledger.records import ChargeReceipt, DatasetStatus, Void
from dpmtv.privacy.disjoint import ChargedEvent

__all__ = ["LedgerCharge"]


class LedgerCharge:
    """A build's ``before_noise`` callback: charge the build's event to ``dataset`` once.

    ``build_task_vector(..., before_noise=LedgerCharge(ledger, name, ...))`` calls
    :meth:`preview` right after planning (before any forward pass: an unknown dataset, another
    relation or an overrun is refused there) and the callback itself with the build's event
    right before the first noise draw; a refusal raises there, so no noise is drawn. After the
    artifact is written, :meth:`mark_written` records its path and tensor hash. Calling it a
    second time raises (one charge per build).

    With ``void_reason`` (a build without a guarantee: non-private or seeded noise), the callback
    VOIDS the dataset instead of charging it (:meth:`Ledger.void_dataset`).

    ``started_at`` (default: now, when the charge is made) is the ONE time stored for the build:
    as the charge time, the write time, and (through the build) the artifact's ``created_at``.
    Create the charge before reading the records: a time taken during or after the private
    computation would let its duration, which grows with the private N, be read back.
    """

    def __init__(
        self,
        ledger: Ledger,
        dataset: str,
        *,
        neighbouring_relation: str,
        privacy_unit: str,
        parameters: Mapping[str, Any],
        artifact: str | Path | None,
        void_reason: str | None = None,
        started_at: str | None = None,
    ):
        self.started_at = started_at or build_timestamp()
        self.ledger, self.dataset = ledger, check_name(dataset)
        self.neighbouring_relation = check_relation(neighbouring_relation)
        self.privacy_unit = check_unit(privacy_unit)
        self.parameters, self.artifact, self.void_reason = dict(parameters), artifact, void_reason
        self.receipt: ChargeReceipt | Void | None = None

    @classmethod
    def for_build(
        cls,
        ledger: Ledger,
        dataset: str,
        settings: Any,
        *,
        model: str,
        library_version: str,
        artifact: str | Path | None,
        void_reason: str | None = None,
        started_at: str | None = None,
        num_records: int | None = None,
    ) -> LedgerCharge:
        """The charge of one build, recording the build's PUBLIC parameters only (never data):
        its ``settings`` (a :class:`dpmtv.pipeline.settings.BuildSettings`), the model's name, the
        library version and, under replace-one only (where it is public), ``num_records``, the N
        that later charges of the dataset must share (:mod:`dpmtv.ledger.public_n`)."""
        relation, unit = settings.relation.value, settings.privacy_unit.value
        parameters = {
            "epsilon": settings.epsilon,
            "delta": settings.delta,
            "l2_clip_norm": list(settings.l2_clip_norm),
            "shots_per_chunk": settings.shots_per_chunk,
            "num_chunks": settings.num_chunks,
            "neighbouring_relation": relation,
            "privacy_unit": unit,
            "noise_sampler": settings.noise_sampler,
            "insecure_seed": settings.insecure_seed,
            "non_private": settings.non_private,
            "model": model,
            "head_selection": settings.head_selection,
            "dpmtv": library_version,
        }
        if relation == "replace-one" and num_records is not None:  # add-remove-one: N is private
            parameters[NUM_RECORDS] = int(num_records)
        return cls(
            ledger,
            dataset,
            neighbouring_relation=relation,
            privacy_unit=unit,
            parameters=parameters,
            artifact=artifact,
            void_reason=void_reason,
            started_at=started_at,
        )

    def check(self) -> DatasetStatus:
        """Refuse before the build reads anything (:meth:`Ledger.check_dataset`); a voiding
        build only needs the dataset to exist."""
        if self.void_reason is not None:
            return self.ledger.status(self.dataset)
        return self.ledger.check_dataset(
            self.dataset, neighbouring_relation=self.neighbouring_relation, privacy_unit=self.privacy_unit
        )

    def preview(self, event: ChargedEvent) -> float | None:
        """:meth:`Ledger.check_charge`: refuse early (before forward passes), without charging."""
        if self.void_reason is not None:
            self.ledger.status(self.dataset)
            return None
        charges = self.ledger.status(self.dataset).charges
        same_num_records(self.dataset, self.neighbouring_relation, charges, self.parameters)
        return self.ledger.check_charge(
            self.dataset,
            event,
            neighbouring_relation=self.neighbouring_relation,
            privacy_unit=self.privacy_unit,
        )

    def __call__(self, event: ChargedEvent) -> ChargeReceipt | Void:
        if self.receipt is not None:
            raise BudgetExceededError(f"this build already charged dataset {self.dataset!r} once")
        if self.void_reason is not None:
            self.receipt = self.ledger.void_dataset(
                self.dataset,
                reason=self.void_reason,
                parameters=self.parameters,
                artifact=self.artifact,
                voided_at=self.started_at,
            )
        else:
            self.receipt = self.ledger.charge(
                self.dataset,
                event,
                neighbouring_relation=self.neighbouring_relation,
                privacy_unit=self.privacy_unit,
                parameters=self.parameters,
                artifact=self.artifact,
                charged_at=self.started_at,
            )
        return self.receipt

    def mark_written(self, artifact: str | Path | None = None, *, tensors_sha256: str | None = None) -> None:
        """Record that the artifact was written (no-op if nothing was charged)."""
        if self.receipt is not None:
            self.ledger.mark_written(
                self.receipt, artifact=artifact, tensors_sha256=tensors_sha256, written_at=self.started_at
            )
