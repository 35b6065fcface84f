r"""Parallel composition: releases computed on DISJOINT parts of a dataset, and what they cost.

A build with ``--selection-composition parallel`` runs private head selection on one half of the
chunks and the Gaussian release on the other half. :class:`DisjointReleases` records such a
build as its alternatives ``(E_1, …, E_r)``, one dp-accounting event per disjoint part.

Why the cost of a disjoint charge is the WORSE alternative, and why the ledger keeps all of them
===============================================================================================

Take neighbouring datasets ``D, D'`` (one record, or one user's records, changed). The partition
is fixed before the data is read, so the change lies in at most one part ``i``. The other parts
have identical inputs; the release on part ``j != i`` depends on part ``i`` only through the
already-released output of part ``i`` (the selected heads), i.e. it is post-processing. So the
pair of outputs on ``D, D'`` is dominated by alternative ``E_i``'s pair, for the ``i`` the change
falls into: the build is ``(max_i ε_i(δ), δ)``-DP, never the composition of the ``E_i``.

With OTHER charges of the same dataset (each on the whole dataset), the same argument gives, for
a fixed neighbouring pair, the adaptive composition of the other charges with ``E_i`` for that
pair's ``i`` — one choice per disjoint charge. The ledger must hold for every pair, so its ε is
the MAXIMUM over those choices of the composed ε (:func:`composed_epsilon`). Replacing a
disjoint charge by its single worst-at-δ alternative is NOT sound: a pure-ε selection event with
ε = 1.00 and a Gaussian with ε = 1.01 at δ = 1e-5, each composed with four Gaussians of
multiplier 3, give 3.60 and 3.00 — the alternative that is worse alone is the milder one in
composition (``tests/ledger/test_ledger.py`` checks this). Both alternatives are kept.

Cost: one PLD per choice, ``Π_i r_i`` of them (composed depth-first, sharing prefixes).
Beyond :data:`MAX_CHOICES` (four two-way disjoint charges), the oldest disjoint charges are
composed in full instead (their alternatives composed together: an upper bound, as
``E_1 ∘ E_2`` dominates each ``E_i``).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import dp_accounting
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

from dpmtv.errors import ParameterError
from dpmtv.privacy.events import epsilon_of, event_from_json, event_to_json, make_accountant

__all__ = [
    "MAX_CHOICES",
    "ChargedEvent",
    "DisjointReleases",
    "charged_event_from_json",
    "charged_event_to_json",
    "composed_epsilon",
]

MAX_CHOICES = 16
_PARALLEL_KEY = "parallel_alternatives"


@dataclass(frozen=True)
class DisjointReleases:
    """Releases on disjoint parts of one dataset: a change touches one part, so it costs one
    alternative (the worse one), not their composition (module docstring)."""

    alternatives: tuple[dp_accounting.DpEvent, ...]

    def __post_init__(self) -> None:
        if len(self.alternatives) < 2 or not all(
            isinstance(e, dp_accounting.DpEvent) for e in self.alternatives
        ):
            raise ParameterError(
                f"DisjointReleases needs at least two dp-accounting events, got {self.alternatives!r}"
            )

    def epsilon(self, *, delta: float) -> float:
        """ε at ``delta`` of this build alone: the worse alternative."""
        return max(epsilon_of(event, delta=delta) for event in self.alternatives)


ChargedEvent = Union[dp_accounting.DpEvent, DisjointReleases]  # noqa: UP007 (a runtime alias)


def composed_epsilon(charges: Sequence[ChargedEvent], *, delta: float) -> float:
    """ε at ``delta`` of all ``charges`` composed (PLD accountant); 0.0 for none.

    Disjoint charges contribute one alternative each; the result is the maximum over all
    choices (module docstring), with the oldest disjoint charges composed in full once the
    number of choices would exceed :data:`MAX_CHOICES`.
    """
    fixed: list[dp_accounting.DpEvent] = []
    choices: list[tuple[dp_accounting.DpEvent, ...]] = []
    for charge in reversed(charges):  # newest first: they keep their exact alternatives
        if isinstance(charge, DisjointReleases):
            if _product([*choices, charge.alternatives]) <= MAX_CHOICES:
                choices.append(charge.alternatives)
            else:
                fixed.extend(charge.alternatives)
        else:
            fixed.append(charge)
    if not fixed and not choices:
        return 0.0
    if not choices:
        return epsilon_of(dp_accounting.ComposedDpEvent(fixed), delta=delta)
    for event in [*fixed, *itertools.chain.from_iterable(choices)]:
        epsilon_of(event, delta=delta)  # refuses an event the accountant cannot account for
    accountant = make_accountant()
    accountant.compose(dp_accounting.ComposedDpEvent(fixed))
    return _max_over_choices(accountant, choices, float(delta))


def _max_over_choices(
    accountant: PLDAccountant, choices: Sequence[tuple[dp_accounting.DpEvent, ...]], delta: float
) -> float:
    """Depth-first over one alternative per disjoint charge; branches share their composed
    prefix (a copy of the accountant), so ``2·Π r_i`` compositions instead of ``p·Π r_i``."""
    if not choices:
        return float(accountant.get_epsilon(delta))
    worst = 0.0
    for event in choices[0]:
        branch = copy.deepcopy(accountant)
        branch.compose(event)
        worst = max(worst, _max_over_choices(branch, choices[1:], delta))
    return worst


def charged_event_to_json(charge: ChargedEvent) -> dict[str, Any]:
    """A plain event as :func:`~dpmtv.privacy.events.event_to_json`; a disjoint charge as
    ``{"parallel_alternatives": [event, ...]}``."""
    if isinstance(charge, DisjointReleases):
        return {_PARALLEL_KEY: [event_to_json(event) for event in charge.alternatives]}
    return event_to_json(charge)


def charged_event_from_json(data: Mapping[str, Any]) -> ChargedEvent:
    """Inverse of :func:`charged_event_to_json` (refuses unknown event types)."""
    if isinstance(data, Mapping) and set(data) == {_PARALLEL_KEY}:
        return DisjointReleases(tuple(event_from_json(event) for event in data[_PARALLEL_KEY]))
    return event_from_json(data)


def _product(choices: Sequence[tuple[dp_accounting.DpEvent, ...]]) -> int:
    count = 1
    for alternatives in choices:
        count *= len(alternatives)
    return count
