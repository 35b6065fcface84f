"""The public candidate lists of ``--private-selection candidates`` (:mod:`dpmtv.selection.candidates`):
head sets that are functions of the public pool alone, never of data.

``layer-subsets``: all pool heads of each non-empty subset of the pool's layers (``2^L − 1`` sets; at
most :data:`MAX_LAYER_SUBSETS`); ``layer-blocks``: all pool heads of each contiguous block of layers
(``L(L+1)/2``); ``layer-groups``: every layer subset and each half and quarter of every layer's pool
heads by position (the same part in each layer of the subset; ``np.array_split``, repeats dropped; 105
sets for 4 layers of 8 heads).

Apart from the model-side utilities so that loading an artifact can re-derive its recorded list
from its recorded kind and pool (:mod:`dpmtv.artifact.claim`) without importing the model code.
"""

from __future__ import annotations

import itertools

import numpy as np

from dpmtv.errors import ParameterError
from dpmtv.heads import HeadSet

__all__ = ["CANDIDATE_LISTS", "MAX_CANDIDATES", "MAX_LAYER_SUBSETS", "candidate_head_sets"]

CANDIDATE_LISTS = ("layer-subsets", "layer-blocks", "layer-groups")
MAX_CANDIDATES = 1024  # one forward row per candidate per chunk
MAX_LAYER_SUBSETS = 255  # 2^8 − 1: beyond 8 pool layers use layer-blocks


def candidate_head_sets(kind: str, pool: HeadSet) -> list[HeadSet]:
    """The public candidate list ``kind`` over ``pool`` in a fixed order."""
    layers = list(pool.layers)
    if kind == "layer-subsets":
        if 2 ** len(layers) - 1 > MAX_LAYER_SUBSETS:
            raise ParameterError(
                f"layer-subsets of {len(layers)} pool layers is {2 ** len(layers) - 1} candidates (at most "
                f"{MAX_LAYER_SUBSETS}); use --selection-candidates layer-blocks or a smaller --select-pool"
            )
        groups = [c for r in range(1, len(layers) + 1) for c in itertools.combinations(layers, r)]
    elif kind == "layer-blocks":
        groups = [tuple(layers[i:j]) for i in range(len(layers)) for j in range(i + 1, len(layers) + 1)]
    elif kind == "layer-groups":
        return _layer_groups(pool)
    else:
        raise ParameterError(
            f"--selection-candidates must be one of {', '.join(CANDIDATE_LISTS)}, got {kind!r}"
        )
    return [HeadSet.of((layer, head) for layer in group for head in pool.heads_in(layer)) for group in groups]


def _layer_groups(pool: HeadSet) -> list[HeadSet]:
    """For every layer subset: all its pool heads, then each half, then each quarter of every
    layer's pool heads by position (``np.array_split``; the same part in every layer of the
    subset), repeats dropped: smaller sets whose release noise is smaller."""
    out: list[HeadSet] = []
    seen: set[tuple[tuple[int, int], ...]] = set()
    for parts in (1, 2, 4):
        for subset in candidate_head_sets("layer-subsets", pool):
            for part in range(parts):
                pairs = [
                    (layer, int(h))
                    for layer in subset.layers
                    for h in np.array_split(np.asarray(pool.heads_in(layer)), parts)[part]
                ]
                if pairs and tuple(sorted(pairs)) not in seen:
                    seen.add(tuple(sorted(pairs)))
                    out.append(HeadSet.of(pairs))
    if len(out) > MAX_CANDIDATES:
        raise ParameterError(f"layer-groups of this pool is {len(out)} candidates (at most {MAX_CANDIDATES})")
    return out
