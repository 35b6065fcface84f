"""Idefics2 (``Idefics2ForConditionalGeneration``): o_proj at ``model.text_model.layers[i]``.

The stock processor is image-only (no video processor), so the base loading path works; images
go to it as one list per prompt.
"""

from __future__ import annotations

from dpmtv.models.base import ModelAdapter
from dpmtv.models.registry import register


@register
class Idefics2Adapter(ModelAdapter):
    family = "idefics2"
    display_name = "Idefics2"
    model_types = ("idefics2",)
    decoder_layers_path = "model.text_model.layers"
