"""Idefics3 (``Idefics3ForConditionalGeneration``): o_proj at ``model.text_model.layers[i]``.

The stock processor is image-only (no video processor), so the base loading path works; images
go to it as one list per prompt.
"""

from __future__ import annotations

from dpmtv.models.base import ModelAdapter
from dpmtv.models.registry import register


@register
class Idefics3Adapter(ModelAdapter):
    family = "idefics3"
    display_name = "Idefics3"
    model_types = ("idefics3",)
    decoder_layers_path = "model.text_model.layers"
