"""Per-layer L2 clipping of the chunk activation vectors (docs/design.md §2).

For chunk ``j`` and selected layer ``l``::

    â_j^(l) = a_j^(l) · min(1, C_l / ‖a_j^(l)‖₂)

so ``‖â_j^(l)‖₂ <= C_l`` for every row, which is what the sensitivity bound in
:mod:`dpmtv.privacy.sensitivity` rests on. Rows above ``C_l`` are scaled to ``C_l·(1 − 2⁻⁴⁰)``
so that floating-point rounding in the norm can never push a clipped row above ``C_l``.
Clip norms are public: given by the user or derived from public data, never from the private
records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from dpmtv.errors import NumericalError, ParameterError
from dpmtv.privacy._checks import check_positive

__all__ = ["clip_l2_per_layer", "parse_l2_clip_norms"]

# Clipped rows are scaled to C_l·(1 − 2⁻⁴⁰): a computed norm of a D-vector is off by at most
# ~log2(D)·1.1e-16 relative (pairwise summation), far below 2⁻⁴⁰ ≈ 9.1e-13, so no way of
# computing the norm of a clipped row can exceed C_l, while utility changes by < 1e-12.
_CLIP_MARGIN = 1.0 - 2.0**-40


def parse_l2_clip_norms(values: Sequence[float], layers: Sequence[int]) -> dict[int, float]:
    """Map each layer to its clip norm ``C_l``.

    One value applies to every layer; ``len(layers)`` values are taken one per layer in sorted
    layer order.

    Raises:
        ParameterError: the wrong number of values (says how many were expected), a duplicate
            layer, or a norm that is not finite and > 0 (names the layer).
    """
    ordered = sorted(layers)
    if len(set(ordered)) != len(ordered):
        raise ParameterError(f"layers must be distinct, got {list(layers)}")
    values = list(values)
    if len(values) == 1:
        values = values * len(ordered)
    elif len(values) != len(ordered):
        raise ParameterError(
            f"expected 1 clip norm or {len(ordered)} (one per layer {ordered}), got {len(values)}"
        )
    return {
        layer: check_positive(f"clip norm for layer {layer}", value)
        for layer, value in zip(ordered, values, strict=True)
    }


def clip_l2_per_layer(
    layer_vectors: Mapping[int, np.ndarray], *, l2_clip_norms: Mapping[int, float]
) -> dict[int, np.ndarray]:
    """Clip every row of every layer to L2 norm ``C_l``, in float64.

    Args:
        layer_vectors: layer -> array ``(B, D_l)``, one row per chunk.
        l2_clip_norms: layer -> ``C_l`` (> 0, finite); must cover every layer.

    Returns:
        layer -> float64 array ``(B, D_l)`` with row norms ``min(‖row‖₂, C_l)`` (to 1e-12
        relative, never above ``C_l``); rows keep their direction and a zero row stays zero.

    Raises:
        ParameterError: a layer has no clip norm or an invalid one, or an array is not 2-D.
        NumericalError: a NaN/inf entry; names the layer and the row index.
    """
    clipped = {}
    for layer, vectors in layer_vectors.items():
        if layer not in l2_clip_norms:
            raise ParameterError(f"no clip norm given for layer {layer}")
        clip_norm = check_positive(f"clip norm for layer {layer}", l2_clip_norms[layer])
        clipped[layer] = _clip_rows(layer, np.asarray(vectors, dtype=np.float64), clip_norm)
    return clipped


def _clip_rows(layer: int, rows: np.ndarray, clip_norm: float) -> np.ndarray:
    if rows.ndim != 2:
        raise ParameterError(f"layer {layer}: expected a (B, D) array, got shape {rows.shape}")
    _check_finite(layer, rows)
    norms = _row_norms(rows)  # (B,)
    with np.errstate(divide="ignore"):
        scale = np.where(norms > clip_norm, clip_norm * _CLIP_MARGIN / norms, 1.0)
    return rows * scale[:, None]


def _row_norms(rows: np.ndarray) -> np.ndarray:
    """Row L2 norms without overflow for huge finite entries (scaled by the row's max |x|)."""
    peak = np.max(np.abs(rows), axis=1, initial=0.0)  # (B,)
    safe = np.where(peak > 0, peak, 1.0)
    norms: np.ndarray = peak * np.sqrt(np.sum((rows / safe[:, None]) ** 2, axis=1))
    return norms


def _check_finite(layer: int, rows: np.ndarray) -> None:
    bad = np.flatnonzero(~np.isfinite(rows).all(axis=1))
    if bad.size:
        raise NumericalError(
            f"layer {layer}: row {int(bad[0])} contains NaN or inf activations "
            f"({bad.size} bad row(s)); check the model's dtype and inputs"
        )
