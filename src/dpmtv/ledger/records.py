"""What the ledger reports: its charges, voids, receipts and per-dataset status (read-only
records; :class:`~dpmtv.ledger.book.Ledger` writes and reads them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpmtv.ledger.format import DEFAULT_RELATION, DEFAULT_UNIT
from dpmtv.privacy.disjoint import ChargedEvent, charged_event_to_json


@dataclass(frozen=True)
class Charge:
    """One charge as stored. ``written_at`` is None until :meth:`Ledger.mark_written`."""

    charge_id: str
    dataset: str
    event: ChargedEvent
    parameters: Mapping[str, Any]
    artifact: str | None  # absolute path
    charged_at: str
    epsilon_after: float  # composed ε at the dataset's δ after this charge
    written_at: str | None
    tensors_sha256: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "dataset"}
        data["event"] = charged_event_to_json(self.event)
        data["parameters"] = dict(self.parameters)
        return data


@dataclass(frozen=True)
class Void:
    """A build without a guarantee that named the dataset: the dataset's guarantee is void."""

    void_id: str
    dataset: str
    reason: str
    parameters: Mapping[str, Any]
    artifact: str | None
    voided_at: str
    written_at: str | None
    tensors_sha256: str | None

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "dataset"}
        data["parameters"] = dict(self.parameters)
        return data


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
    """A dataset's budget, what its charges have spent, and whether its guarantee is void.

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
    neighbouring_relation: str = DEFAULT_RELATION
    privacy_unit: str = DEFAULT_UNIT
    voids: tuple[Void, ...] = ()

    @property
    def epsilon_headroom(self) -> float:
        return max(0.0, self.epsilon_budget - self.epsilon_spent)

    @property
    def void(self) -> bool:
        """True for good once any build without a guarantee was recorded against the dataset."""
        return bool(self.voids)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "epsilon_budget": self.epsilon_budget,
            "delta": self.delta,
            "neighbouring_relation": self.neighbouring_relation,
            "privacy_unit": self.privacy_unit,
            "created_at": self.created_at,
            "epsilon_spent": self.epsilon_spent,
            "epsilon_headroom": self.epsilon_headroom,
            "void": self.void,
            "charges": [c.to_json() for c in self.charges],
            "voids": [v.to_json() for v in self.voids],
        }


@dataclass(frozen=True)
class _DatasetRow:
    epsilon: float
    delta: float
    created_at: str
    neighbouring_relation: str
    privacy_unit: str
