"""The defaults of private head selection, resolved in one place for the library and the CLI.

A selection's share of ε and a candidate choice's utility are left ``None`` by whoever does not
choose them; :class:`~dpmtv.pipeline.settings.PrivateSelectionSettings` fills them from here, and
the build's settings refill them at user level, where the choice on the release cannot run
(docs/design.md §3).
"""

from __future__ import annotations

from dpmtv.privacy.noisy_top_k import (
    DEFAULT_CANDIDATE_SELECTION_FRACTION,
    DEFAULT_RELEASED_SELECTION_FRACTION,
    DEFAULT_SELECTION_FRACTION,
)
from dpmtv.privacy.units import PrivacyUnit

__all__ = ["default_selection_fraction", "default_selection_utility"]


def default_selection_utility(*, composition: str, privacy_unit: PrivacyUnit | str) -> str:
    """The choice on the release, except where it cannot run: at user level (a user's records
    would each add a term to a candidate's total) and with parallel halves (it scores every chunk)."""
    chunk_utility = PrivacyUnit(privacy_unit) is PrivacyUnit.USER or composition == "parallel"
    return "noisy-probability" if chunk_utility else "released-probability"


def default_selection_fraction(*, method: str, utility: str) -> float:
    """The selection's share of ε: noisy top-k over votes runs k rounds and takes the most; one
    candidate choice by chunk utilities less; one on the release, scored on N records, least."""
    if method != "candidates":
        return DEFAULT_SELECTION_FRACTION
    if utility.startswith("released-"):
        return DEFAULT_RELEASED_SELECTION_FRACTION
    return DEFAULT_CANDIDATE_SELECTION_FRACTION
