"""The neighbouring relation: which pairs of datasets the guarantee compares.

dpmtv supports two relations (docs/design.md §1):

* ``replace-one`` (default): the neighbour has the same number of records ``N`` with one record
  replaced. ``N`` is public, so the number of chunks ``m = floor(N / s)`` is public too.
* ``add-remove-one``: the neighbour has one record more or one fewer. ``N`` is private; the
  number of chunks ``m`` is a fixed public parameter, and each record is assigned to a chunk by
  a keyed hash of its id (:func:`dpmtv.privacy.partition.partition_add_remove_one`).

The relation is a parameter everywhere it matters (partition, sensitivity, artifact metadata).
The accounting convention that turns either relation into a dp-accounting event is documented
in :mod:`dpmtv.privacy.events`.
"""

from __future__ import annotations

from enum import Enum

from dpmtv.errors import ParameterError


class NeighbouringRelation(str, Enum):
    """Which change to the private dataset the (epsilon, delta) guarantee covers."""

    REPLACE_ONE = "replace-one"
    ADD_REMOVE_ONE = "add-remove-one"


def parse_relation(value: str | NeighbouringRelation) -> NeighbouringRelation:
    """Return the relation named by ``value`` (``"replace-one"`` or ``"add-remove-one"``).

    Raises:
        ParameterError: ``value`` names no relation; the message lists the valid values.
    """
    if isinstance(value, NeighbouringRelation):
        return value
    try:
        return NeighbouringRelation(value)
    except ValueError:
        valid = ", ".join(repr(r.value) for r in NeighbouringRelation)
        raise ParameterError(f"unknown neighbouring relation {value!r}; valid values are {valid}") from None
