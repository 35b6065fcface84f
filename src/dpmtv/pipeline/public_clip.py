"""Clip norms chosen from PUBLIC records: the ``--l2-clip-norm auto`` of ``build`` and ``attack``.

C_l bounds each chunk's contribution in layer l, so it enters Δ and σ; a C chosen from private
data would itself leak. Here it is a quantile of the selected heads' per-layer norms over chunk
prompts made from public records only, so the chosen C is public and is stored in the artifact
like any other C (docs/design.md §2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from dpmtv.data.prompts import DEFAULT_QUERY_QUESTION, chunk_prompt
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError, RecordError
from dpmtv.forward.extract import extract_selected_heads, iter_batches
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.defaults import DEFAULT_CLIP_QUANTILE

__all__ = ["DEFAULT_CLIP_QUANTILE", "public_clip_norms"]


def public_clip_norms(
    loaded: LoadedModel,
    public: Sequence[Record],
    heads: HeadSet,
    *,
    shots_per_chunk: int,
    query: str = "record",
    query_question: str = DEFAULT_QUERY_QUESTION,
    quantile: float = DEFAULT_CLIP_QUANTILE,
    batch_size: int = 4,
    reference: Mapping[int, np.ndarray] | None = None,
) -> tuple[float, ...]:
    """Per-layer clip norms from PUBLIC records: the ``quantile`` of the selected heads'
    chunk-vector L2 norms over disjoint chunks of ``shots_per_chunk`` public records, in sorted
    layer order (the order :func:`dpmtv.privacy.parse_l2_clip_norms` expects).

    ``reference`` (a public centering reference, ``{layer: (k_l*d,)}``) is subtracted first, as
    the build does before it clips, so C bounds the same quantity the build clips."""
    if not 0.0 < quantile <= 1.0:
        raise ParameterError(f"clip quantile must be in (0, 1], got {quantile!r}")
    size = shots_per_chunk
    if len(public) < size:
        raise RecordError(f"{len(public)} public records cannot fill one chunk of {size}")
    prompts = [
        chunk_prompt(public[start : start + size], query=query, query_question=query_question)
        for start in range(0, len(public) - size + 1, size)
    ]
    norms: dict[int, list[np.ndarray]] = {}
    for batch in iter_batches(prompts, batch_size):
        for layer, values in extract_selected_heads(loaded.adapter, batch, heads).items():  # (B, k_l*d)
            if reference is not None:
                values = values - np.asarray(reference[layer])
            norms.setdefault(layer, []).append(np.linalg.norm(values, axis=1))  # (B,)
    return tuple(float(np.quantile(np.concatenate(norms[layer]), quantile)) for layer in sorted(norms))
