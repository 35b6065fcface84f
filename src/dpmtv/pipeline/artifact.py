"""The released task vector of a build: the noisy per-layer means as per-head rows, the public
reference added back, and the artifact metadata (:mod:`dpmtv.pipeline.metadata`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dpmtv.artifact.vector import TaskVector
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.metadata import artifact_metadata
from dpmtv.pipeline.plan import BuildLayout
from dpmtv.pipeline.settings import BuildSettings, Centering
from dpmtv.privacy.release import NoisedVector

__all__ = ["per_head_rows", "released_task_vector"]


def released_task_vector(
    loaded: LoadedModel,
    heads: HeadSet,
    settings: BuildSettings,
    layout: BuildLayout,
    reference: dict[int, np.ndarray],
    noised: NoisedVector,
    head_selection: dict[str, Any],
    *,
    workers: int = 1,
    created_at: str | None = None,
    clip_norm_selection: dict[str, Any] | None = None,
) -> TaskVector:
    """The released vector: the noisy per-layer means as per-head rows, the reference added back."""
    head_dim = loaded.adapter.geometry.head_dim
    reference_rows = per_head_rows(reference, heads, head_dim)
    return TaskVector(
        heads=heads,
        values=(per_head_rows(noised.layers, heads, head_dim) + reference_rows).astype(np.float32),
        metadata=artifact_metadata(
            loaded,
            heads,
            settings,
            noised.plan,
            layout,
            head_selection,
            workers=workers,
            created_at=created_at,
            clip_norm_selection=clip_norm_selection,
        ),
        reference=None if settings.center is Centering.NONE else reference_rows.astype(np.float32),
    )


def per_head_rows(per_layer: Mapping[int, np.ndarray], heads: HeadSet, head_dim: int) -> np.ndarray:
    """Per-layer flat vectors (k_l*d,) → rows (K, d) in the head set's order."""
    return np.concatenate([np.asarray(per_layer[layer]).reshape(-1, head_dim) for layer in heads.layers])
