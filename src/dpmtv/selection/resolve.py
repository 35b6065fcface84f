"""The released head set of a build, known before it starts: ``--heads`` or ``--heads-from``
(a public selection run now, or a saved selection file). Private selection happens inside the
build (:mod:`dpmtv.selection.private`), not here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dpmtv.data.records import load_records
from dpmtv.errors import ParameterError
from dpmtv.heads import HeadSet, parse_head_spec
from dpmtv.models.loading import LoadedModel
from dpmtv.selection.public import select_public
from dpmtv.selection.result import SelectionResult

__all__ = ["resolve_heads"]


def resolve_heads(
    loaded: LoadedModel,
    *,
    head_spec: str | None,
    heads_from: str | None,
    method: str = "greedy",
    shots_per_chunk: int,
    pool: str = "all",
    batch_size: int = 4,
    progress: bool = True,
) -> tuple[HeadSet, dict[str, Any]]:
    """The released head set and how it was chosen (for the artifact's metadata): ``head_spec``
    (the ``--heads`` syntax), or ``heads_from``: ``public:FILE`` (a public selection by ``method``
    run now on those public records: no privacy cost) or a selection file saved by
    ``dpmtv select``. Private selection happens inside the build, not here.

    Raises:
        ParameterError: ``heads_from`` is none of those.
        HeadSpecError: a head outside the model's geometry.
    """
    geometry = loaded.adapter.geometry
    if head_spec is not None:
        return parse_head_spec(head_spec, geometry), {"method": "user", "spec": head_spec}
    if heads_from is None:
        raise ParameterError("give the heads: --heads or --heads-from")
    if heads_from.startswith("public:"):
        result = select_public(
            loaded,
            load_records(heads_from[len("public:") :]),
            method=method,
            shots=shots_per_chunk,
            pool=parse_head_spec(pool, geometry),
            batch_size=batch_size,
            progress=progress,
        )
    elif Path(heads_from).is_file():
        result = SelectionResult.load(heads_from)
    else:
        raise ParameterError(
            f"--heads-from '{heads_from}' is not 'public:FILE', 'private' or a saved selection file"
        )
    return result.heads.check(geometry), result.to_metadata()
