"""The public N of a replace-one dataset, recorded with its charges.

Under replace-one the number of records N is public (a neighbour has the same N), and every
guarantee composed on one dataset name is about neighbours of ONE dataset. A build on N = 20
records and another on N = 21 are not builds on neighbours of one dataset: composing them under
one name would state a guarantee no relation covers. So a replace-one build records its N in the
charge's parameters (hash-chained like every charge row), and a later charge whose N differs from
the dataset's earlier ones is refused. Under add-remove-one N is private and never recorded.
Charges without a recorded N (ledgers written before dpmtv recorded it, or a caller that passes
none) are not compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dpmtv.errors import ParameterError
from dpmtv.ledger.records import Charge
from dpmtv.privacy.disjoint import ChargedEvent

__all__ = ["NUM_RECORDS", "same_num_records"]

NUM_RECORDS = "num_records"  # the key of a replace-one charge's parameters that holds its N


def same_num_records(
    name: str, relation: str, charges: Sequence[Charge], parameters: Mapping[str, Any]
) -> list[ChargedEvent]:
    """The events of the dataset's earlier ``charges``, once the new charge's N (in
    ``parameters``) is checked against theirs under replace-one.

    Raises:
        ParameterError: a replace-one charge whose N differs from the N its dataset was first
            charged with.
    """
    num_records = parameters.get(NUM_RECORDS)
    recorded = [c.parameters.get(NUM_RECORDS) for c in charges]
    first = next((n for n in recorded if n is not None), None)
    if relation == "replace-one" and num_records is not None and first is not None and num_records != first:
        raise ParameterError(
            f"dataset {name!r} was first charged with N = {first} records (replace-one, where N is "
            f"public) and this build has N = {num_records}: replace-one guarantees compose only over "
            "neighbours of one dataset, which have the same N. Build on the same records, or give "
            "these records their own budget (dpmtv budget init)"
        )
    return [c.event for c in charges]
