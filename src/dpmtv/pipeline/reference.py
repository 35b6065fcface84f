"""The build's public centering reference (``--center``): what is subtracted from each chunk's
head outputs before clipping and added back to the release (docs/design.md §2, step 4). It is
computed from public inputs only (a blank image, or public records checked not to be private by
:mod:`dpmtv.pipeline.public_inputs`), so it costs no privacy."""

from __future__ import annotations

import numpy as np

from dpmtv.data.records import load_records
from dpmtv.extract import mean_selected_heads
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.settings import BuildSettings, Centering
from dpmtv.prompts import Example, Prompt, blank_image, chunk_prompt

__all__ = ["reference_activations"]


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


def _reference_prompts(settings: BuildSettings) -> list[Prompt]:
    """A blank image with the public question, or the public records cut into chunk prompts."""
    if settings.center is Centering.BLANK:
        return [Prompt((), Example((blank_image(),), settings.query_question))]
    public, question = load_records(str(settings.center_records)), settings.query_question
    size = max(1, min(settings.shots_per_chunk, len(public)))
    return [
        chunk_prompt(public[start : start + size], query=settings.query_source, query_question=question)
        for start in range(0, len(public) - size + 1, size)
    ]
