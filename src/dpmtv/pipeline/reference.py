"""What the release needs of the released heads from public inputs only, so it costs no privacy:

* the centering reference (``--center``): what is subtracted from each chunk's head outputs
  before clipping and added back to the release (docs/design.md §2, step 4), from a blank image
  or public records checked not to be private by :mod:`dpmtv.pipeline.public_inputs`;
* with ``--l2-clip-norm private``, each layer's public scale ``g_l`` (the clip norms are then
  ``C_l = c·g_l``, :mod:`dpmtv.pipeline.private_clip`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpmtv.data.prompts import Example, Prompt, blank_image, chunk_prompt
from dpmtv.data.records import load_records
from dpmtv.errors import ParameterError
from dpmtv.forward.extract import mean_selected_heads
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.settings import BuildSettings, Centering

__all__ = ["PublicReference", "public_layer_scales", "public_reference", "reference_activations"]


@dataclass(frozen=True)
class PublicReference:
    """The release's public inputs over the released heads: the centering reference per layer
    (zero when not centering) and the private clip's layer scales (None without one)."""

    centering: dict[int, np.ndarray]
    layer_scales: dict[int, float] | None


def public_reference(loaded: LoadedModel, heads: HeadSet, settings: BuildSettings) -> PublicReference:
    """The centering reference, then (with a private clip norm) the layer scales; with
    ``--center blank`` both come from the one blank-image pass (the same prompt)."""
    centering = reference_activations(loaded, heads, settings)
    if settings.private_clip is None:
        return PublicReference(centering, None)
    blank = centering if settings.center is Centering.BLANK else _blank_outputs(loaded, heads, settings)
    return PublicReference(centering, _layer_scales(blank))


def reference_activations(
    loaded: LoadedModel, heads: HeadSet, settings: BuildSettings
) -> dict[int, np.ndarray]:
    """Public centering reference per layer (zero when not centering)."""
    if settings.center is not Centering.NONE:
        prompts = _reference_prompts(settings)
        return mean_selected_heads(loaded.adapter, prompts, heads, batch_size=settings.batch_size)
    return {
        layer: np.zeros(width)
        for layer, width in heads.layer_widths(loaded.adapter.geometry.head_dim).items()
    }


def public_layer_scales(loaded: LoadedModel, heads: HeadSet, settings: BuildSettings) -> dict[int, float]:
    """``g_l``: the L2 norm of the released heads' outputs in each layer on one blank-image prompt
    (public: no record is read). A zero scale cannot set a clip norm: refused before the release
    chunks are read (and so, without private selection, before the charge)."""
    return _layer_scales(_blank_outputs(loaded, heads, settings))


def _blank_outputs(loaded: LoadedModel, heads: HeadSet, settings: BuildSettings) -> dict[int, np.ndarray]:
    return mean_selected_heads(loaded.adapter, [_blank_prompt(settings)], heads, batch_size=1)


def _layer_scales(outputs: dict[int, np.ndarray]) -> dict[int, float]:
    scales = {layer: float(np.linalg.norm(values)) for layer, values in outputs.items()}
    zero = [layer for layer, scale in scales.items() if not (np.isfinite(scale) and scale > 0)]
    if zero:
        raise ParameterError(
            f"--l2-clip-norm private: the released heads' outputs on a blank image have norm 0 (or not "
            f"finite) in layer(s) {zero}, so no clip norm can be scaled from them; give C as a number"
        )
    return scales


def _reference_prompts(settings: BuildSettings) -> list[Prompt]:
    """A blank image with the public question, or the public records cut into chunk prompts."""
    if settings.center is Centering.BLANK:
        return [_blank_prompt(settings)]
    public, question = load_records(str(settings.center_records)), settings.query_question
    size = max(1, min(settings.shots_per_chunk, len(public)))
    return [
        chunk_prompt(public[start : start + size], query=settings.query_source, query_question=question)
        for start in range(0, len(public) - size + 1, size)
    ]


def _blank_prompt(settings: BuildSettings) -> Prompt:
    """The public query question on a blank image, no demonstrations."""
    return Prompt((), Example((blank_image(),), settings.query_question))
