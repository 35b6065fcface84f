"""Signal against noise per layer, from public numbers only.

The released mean of layer ``l`` has norm at most ``C_l`` (a mean of vectors clipped to ``C_l``),
and the Gaussian noise added to its ``D_l = k_l·d`` coordinates has root-mean-square norm
``sqrt(E‖z‖²) = σ·sqrt(D_l)``. Their ratio ``C_l / (σ·sqrt(D_l))`` bounds how much of the
released layer can be signal: well below 1, the vector is mostly noise. Every input is public
(clip norms, head geometry, σ), so the check runs before any private value is touched.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["LayerSignalToNoise", "signal_to_noise_per_layer", "weak_signal_warnings"]


@dataclass(frozen=True)
class LayerSignalToNoise:
    layer: int
    num_coordinates: int  # D_l = k_l·d
    l2_clip_norm: float  # C_l: the largest norm the layer's released mean can have
    noise_rms_norm: float  # σ·sqrt(D_l)

    @property
    def ratio(self) -> float:
        """``C_l / (σ·sqrt(D_l))``; infinite without noise."""
        return self.l2_clip_norm / self.noise_rms_norm if self.noise_rms_norm > 0 else math.inf


def signal_to_noise_per_layer(
    *, noise_std: float, l2_clip_norms: Mapping[int, float], num_coordinates: Mapping[int, int]
) -> list[LayerSignalToNoise]:
    """One :class:`LayerSignalToNoise` per layer of ``num_coordinates``, in layer order."""
    return [
        LayerSignalToNoise(layer, size, float(l2_clip_norms[layer]), noise_std * math.sqrt(size))
        for layer, size in sorted(num_coordinates.items())
    ]


def weak_signal_warnings(layers: list[LayerSignalToNoise], *, min_ratio: float = 1.0) -> list[str]:
    """A warning naming the numbers when some layer's signal bound is below ``min_ratio`` times
    its expected noise norm (one line for all such layers)."""
    weak = [entry for entry in layers if entry.ratio < min_ratio]
    if not weak:
        return []
    worst = min(weak, key=lambda entry: entry.ratio)
    return [
        f"the noise swamps the signal in {len(weak)} of {len(layers)} layers: e.g. layer {worst.layer} "
        f"has expected noise norm {worst.noise_rms_norm:.3g} against a signal of at most "
        f"{worst.l2_clip_norm:.3g} (ratio {worst.ratio:.3g}); use more records (more chunks), a larger "
        "epsilon or fewer heads — `dpmtv plan` gives the smallest N for a target ratio"
    ]
