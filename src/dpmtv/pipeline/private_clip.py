"""A build's release with its clip norms chosen privately (``--l2-clip-norm private``;
docs/design.md §2, "A private clip norm").

One forward pass per release chunk, as for a given C: the chunks' centered vectors are held in
this process's memory (never written), each layer's per-chunk norm feeds ONE ε_clip-DP choice of
a multiplier ``c`` (:func:`dpmtv.privacy.clip_quantile.private_clip_multiplier`), each layer is
clipped at ``C_l = c·g_l`` and the rows are summed; the build then noises the mean once, as in
every build (:mod:`dpmtv.pipeline.release`).

``g_l`` is public: the released heads' norm in layer ``l`` on one blank-image prompt
(:func:`dpmtv.pipeline.reference.public_layer_scales`), given to it. The accounted event was fixed
in the plan (the clip's pure round composed with the Gaussian of a multiplier that does not
depend on Δ); the release plan made from the chosen norms is checked to carry that same event
before any noise is drawn (:func:`dpmtv.pipeline.plan.plan_chosen_clip`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpmtv.data.records import Record
from dpmtv.errors import ParameterError
from dpmtv.forward.executor import Executor, LocalExecutor
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.reference import PublicReference
from dpmtv.pipeline.settings import BuildSettings, PrivateClipSettings
from dpmtv.pipeline.tasks import CenteredRows, ChunkJob, clipped_sum_of_rows
from dpmtv.privacy import (
    ClippedSumAccumulator,
    Partition,
    derive_insecure_seed,
    seeded_rng,
)
from dpmtv.privacy.clip_quantile import private_clip_multiplier

__all__ = ["ClipChoice", "clip_round_norms", "private_clip_sums"]


@dataclass(frozen=True)
class ClipChoice:
    """What the artifact records of a private clip norm: the public settings and scales, the
    chosen multiplier (an ε_clip-DP output, released like the vector) and the round's event."""

    settings: PrivateClipSettings
    layer_scales: dict[int, float]
    multiplier: float
    epsilon: float

    @property
    def l2_clip_norms(self) -> dict[int, float]:
        return {layer: self.multiplier * scale for layer, scale in self.layer_scales.items()}

    def to_metadata(self) -> dict[str, Any]:
        return {
            **self.settings.to_metadata(),
            "epsilon": self.epsilon,
            "layer_scales": [self.layer_scales[layer] for layer in sorted(self.layer_scales)],
            "multiplier": self.multiplier,
        }


def private_clip_sums(
    loaded: LoadedModel,
    records: Sequence[Record],
    partition: Partition,
    heads: HeadSet,
    settings: BuildSettings,
    public: PublicReference,
    *,
    epsilon: float | None,
    charge: Callable[[], None],
    executor: Executor | None,
) -> tuple[ClipChoice, ClippedSumAccumulator]:
    """The release chunks' (``partition``) rows, centered at ``public.centering`` → ``charge()`` →
    the ``epsilon``-DP multiplier (the plan's ``clip_epsilon``) → each row clipped at
    ``C_l = c·g_l`` (``g``: ``public.layer_scales``) and summed. Returns the choice and the clipped
    sums (un-noised: the caller plans Δ from the chosen norms and noises the mean once)."""
    clip, scales = settings.private_clip, public.layer_scales
    if clip is None or scales is None or epsilon is None or settings.non_private:
        raise ParameterError("a private clip norm needs private clip settings and a private release")
    task = CenteredRows(ChunkJob(heads, settings, public.centering, l2_clip_norms={}))
    rows = (executor or LocalExecutor()).run(loaded, records, partition, task, progress=settings.progress)
    charge()  # before the clip's noise, the build's first draw on the release chunks
    choice = _choose(rows, heads, scales, clip, settings, epsilon)
    return choice, clipped_sum_of_rows(rows, heads.layers, choice.l2_clip_norms)


def _choose(
    rows: dict[int, np.ndarray],
    heads: HeadSet,
    scales: dict[int, float],
    clip: PrivateClipSettings,
    settings: BuildSettings,
    epsilon: float,
) -> ClipChoice:
    """The ε_clip-DP multiplier from the rows' per-layer norms (seeded only in seeded builds)."""
    seed = settings.insecure_seed
    rng = None if seed is None else seeded_rng(derive_insecure_seed(seed, "private-clip-norm"))
    norms = clip_round_norms(rows, heads)
    multiplier = private_clip_multiplier(
        norms,
        layer_scales=[scales[layer] for layer in heads.layers],
        candidates=clip.multipliers,
        epsilon=epsilon,
        alpha=clip.quantile,
        utility=clip.utility,
        tolerance=clip.tolerance,
        rng=rng,
    )
    return ClipChoice(clip, scales, multiplier, epsilon)


def clip_round_norms(rows: dict[int, np.ndarray], heads: HeadSet) -> np.ndarray:
    """``(m, L)``: each release chunk's norm in each released layer, what the clip round scores
    (shared with the sensitivity audit, :mod:`dpmtv.audit.sensitivity`)."""
    return np.stack([np.linalg.norm(rows[layer], axis=1) for layer in heads.layers], axis=1)
