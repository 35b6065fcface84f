"""A build's release with its clip norms chosen privately (``--l2-clip-norm private``, issue 28).

One forward pass per release chunk, as for a given C: the chunks' centered vectors are held in
this process's memory (never written), each layer's per-chunk norm feeds ONE ε_clip-DP choice of
a multiplier ``c`` (:func:`dpmtv.privacy.clip_quantile.private_clip_multiplier`), each layer is
clipped at ``C_l = c·g_l`` and the rows are summed, and the mean is noised once as in every build.

``g_l`` is public: the released heads' norm in layer ``l`` on one blank-image prompt, computed
before the charge. The accounted event was fixed in the plan (the clip's pure round composed
with the Gaussian of a multiplier that does not depend on Δ); the release plan made here from the
chosen norms is checked to carry that same event before any noise is drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dpmtv.data.records import Record
from dpmtv.errors import NumericalError, ParameterError
from dpmtv.executor import Executor, LocalExecutor
from dpmtv.extract import mean_selected_heads
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.plan import BuildLayout, BuildPlan, plan_release, private_clip_events, release_sensitivity
from dpmtv.pipeline.settings import BuildSettings, PrivateClipSettings
from dpmtv.pipeline.tasks import CenteredRows, ChunkJob
from dpmtv.privacy import (
    ClippedSumAccumulator,
    clip_l2_per_layer,
    derive_insecure_seed,
    event_to_json,
    seeded_rng,
)
from dpmtv.privacy.clip_quantile import private_clip_multiplier
from dpmtv.privacy.release import NoisedVector, release_clipped_sum
from dpmtv.prompts import Example, Prompt, blank_image

__all__ = ["ClipChoice", "public_layer_scales", "release_with_private_clip"]


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


def public_layer_scales(loaded: LoadedModel, heads: HeadSet, settings: BuildSettings) -> dict[int, float]:
    """``g_l``: the L2 norm of the released heads' outputs in each layer on one blank-image prompt
    (public: no record is read). A zero scale cannot set a clip norm: refused before the charge."""
    prompt = Prompt((), Example((blank_image(),), settings.query_question))
    outputs = mean_selected_heads(loaded.adapter, [prompt], heads, batch_size=1)
    scales = {layer: float(np.linalg.norm(outputs[layer])) for layer in heads.layers}
    zero = [layer for layer, scale in scales.items() if not (np.isfinite(scale) and scale > 0)]
    if zero:
        raise ParameterError(
            f"--l2-clip-norm private: the released heads' outputs on a blank image have norm 0 (or not "
            f"finite) in layer(s) {zero}, so no clip norm can be scaled from them; give C as a number"
        )
    return scales


def release_with_private_clip(
    loaded: LoadedModel,
    records: Sequence[Record],
    heads: HeadSet,
    settings: BuildSettings,
    plan: BuildPlan,
    reference: dict[int, np.ndarray],
    charge: Callable[[], None],
    executor: Executor | None,
) -> tuple[BuildLayout, NoisedVector, ClipChoice]:
    """The release chunks' rows → ``charge()`` → the private C → clip, sum, noise once.
    Returns the layout with the chosen norms and Δ, the noised release and the choice."""
    clip = settings.private_clip
    if clip is None or plan.release is None:
        raise ParameterError("a private clip norm needs private clip settings and a private release")
    layout = plan.layout
    scales = public_layer_scales(loaded, heads, settings)  # public, before the charge
    task = CenteredRows(ChunkJob(heads, settings, reference, l2_clip_norms={}))
    rows = (executor or LocalExecutor()).run(
        loaded, records, layout.release_part, task, progress=settings.progress
    )
    charge()  # before the clip's noise, the build's first draw on the release chunks
    choice = _choose(rows, heads, scales, clip, settings)
    clip_norms = choice.l2_clip_norms
    sensitivity = release_sensitivity(clip_norms, heads, settings, layout.release_part.num_chunks)
    release = plan_release(settings, sensitivity, plan.sampler, plan.selection)
    if release is None or event_to_json(release.event) != event_to_json(plan.release.event):
        raise NumericalError("the release planned from the chosen clip norms is not the charged event")
    accumulator = ClippedSumAccumulator({layer: rows[layer].shape[1] for layer in heads.layers})
    for j in range(len(rows[heads.layers[0]])):
        accumulator.add(
            clip_l2_per_layer(
                {layer: rows[layer][j : j + 1] for layer in heads.layers}, l2_clip_norms=clip_norms
            )
        )
    noised = release_clipped_sum(
        accumulator,
        num_chunks=layout.release_part.num_chunks,
        plan=release,
        sampler=plan.sampler,
        before_noise=charge,
        l2_sensitivity=sensitivity,
    )
    return replace(layout, l2_clip_norms=clip_norms, l2_sensitivity=sensitivity), noised, choice


def _choose(
    rows: dict[int, np.ndarray],
    heads: HeadSet,
    scales: dict[int, float],
    clip: PrivateClipSettings,
    settings: BuildSettings,
) -> ClipChoice:
    """The ε_clip-DP multiplier from the rows' per-layer norms (seeded only in seeded builds)."""
    seed = settings.insecure_seed
    rng = None if seed is None else seeded_rng(derive_insecure_seed(seed, "private-clip-norm"))
    (event,) = private_clip_events(settings)
    epsilon = float(event.noise_parameter)
    norms = np.stack([np.linalg.norm(rows[layer], axis=1) for layer in heads.layers], axis=1)  # (m, L)
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
