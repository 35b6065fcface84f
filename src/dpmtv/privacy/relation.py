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


class AdjacencyRelation(str, Enum):
    """Which change to the private dataset the (epsilon, delta) guarantee covers: which datasets
    are adjacent (neighbours).

    Named apart from dp-accounting's ``NeighboringRelation`` on purpose: that enum has other
    members (``ADD_OR_REMOVE_ONE``, ``REPLACE_ONE``, ``REPLACE_SPECIAL``) and describes how an
    event's sensitivity is read, whereas this one is the user's choice; how one maps onto the
    other is :mod:`dpmtv.privacy.events`' convention. User-facing spellings (``--neighbouring-
    relation``, the artifact's ``neighbouring_relation``) keep the word "neighbouring"."""

    REPLACE_ONE = "replace-one"
    ADD_REMOVE_ONE = "add-remove-one"


def parse_relation(value: str | AdjacencyRelation) -> AdjacencyRelation:
    """Return the relation named by ``value`` (``"replace-one"`` or ``"add-remove-one"``).

    Raises:
        ParameterError: ``value`` names no relation; the message lists the valid values.
    """
    if isinstance(value, AdjacencyRelation):
        return value
    try:
        return AdjacencyRelation(value)
    except ValueError:
        valid = ", ".join(repr(r.value) for r in AdjacencyRelation)
        raise ParameterError(f"unknown neighbouring relation {value!r}; valid values are {valid}") from None
