"""Preview a release from public settings alone: Δ, σ and signal against noise per layer, and the
number of chunks needed for a target ratio (``dpmtv plan``; docs/design.md §2).

The numbers come from the same functions the build calls (``l2_sensitivity``,
``plan_gaussian_release``), so a preview and a build with the same settings agree exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dpmtv.errors import ParameterError
from dpmtv.heads import HeadSet
from dpmtv.models.base import HeadGeometry
from dpmtv.privacy import l2_sensitivity, make_sampler, parse_l2_clip_norms, plan_gaussian_release
from dpmtv.privacy.release import GaussianReleasePlan
from dpmtv.privacy.signal import LayerSignalToNoise, signal_to_noise_per_layer

__all__ = ["ReleasePreview", "preview_release", "smallest_num_chunks"]

_MAX_SEARCH_STEPS = 64


@dataclass(frozen=True)
class ReleasePreview:
    num_chunks: int
    plan: GaussianReleasePlan
    layers: tuple[LayerSignalToNoise, ...]

    @property
    def min_ratio(self) -> float:
        return min(entry.ratio for entry in self.layers)


def preview_release(
    *,
    geometry: HeadGeometry,
    heads: HeadSet,
    l2_clip_norm: Sequence[float],
    num_chunks: int,
    epsilon: float,
    delta: float,
    relation: str,
    noise_sampler: str = "opendp",
) -> ReleasePreview:
    """Δ, σ and per-layer signal/noise of a release with these public settings."""
    if num_chunks < 1:
        raise ParameterError(f"the number of chunks must be >= 1, got {num_chunks}")
    clip_norms = parse_l2_clip_norms(list(l2_clip_norm), heads.layers)
    sensitivity = l2_sensitivity(
        l2_clip_norms=[clip_norms[layer] for layer in heads.layers], num_chunks=num_chunks, relation=relation
    )
    plan = plan_gaussian_release(
        l2_sensitivity=sensitivity, epsilon=epsilon, delta=delta, sampler=make_sampler(noise_sampler)
    )
    sizes = heads.layer_widths(geometry.head_dim)
    layers = signal_to_noise_per_layer(
        noise_std=plan.noise_std, l2_clip_norms=clip_norms, num_coordinates=sizes
    )
    return ReleasePreview(num_chunks, plan, tuple(layers))


def smallest_num_chunks(target_ratio: float, **settings: Any) -> ReleasePreview:
    """The preview at the smallest ``m`` whose every layer reaches ``target_ratio``.

    σ is proportional to Δ ∝ 1/m for the accountant's calibration, so ``m`` scales linearly with
    the target; the sampler's own map can round differently, so the guess is checked (and stepped
    up) with the real plan. ``settings`` are :func:`preview_release`'s, ``num_chunks`` the start.
    """
    if not target_ratio > 0:
        raise ParameterError(f"the target signal/noise ratio must be > 0, got {target_ratio}")
    start = preview_release(**settings)
    guess = max(1, math.ceil(start.num_chunks * target_ratio / start.min_ratio))
    for _ in range(_MAX_SEARCH_STEPS):
        preview = preview_release(**{**settings, "num_chunks": guess})
        if preview.min_ratio >= target_ratio:
            while guess > 1:  # the linear guess may overshoot by a rounding step
                smaller = preview_release(**{**settings, "num_chunks": guess - 1})
                if smaller.min_ratio < target_ratio:
                    break
                guess, preview = guess - 1, smaller
            return preview
        guess = max(guess + 1, math.ceil(guess * target_ratio / preview.min_ratio))
    raise ParameterError(f"no number of chunks reaches signal/noise {target_ratio} within the search")
