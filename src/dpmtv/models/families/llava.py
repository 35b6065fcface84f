"""LLaVA (``LlavaForConditionalGeneration``): o_proj at ``model.language_model.layers[i]``."""

from __future__ import annotations

from dpmtv.models.base import ModelAdapter
from dpmtv.models.registry import register


@register
class LlavaAdapter(ModelAdapter):
    family = "llava"
    display_name = "LLaVA"
    model_types = ("llava",)
    decoder_layers_path = "model.language_model.layers"

    def processor_images(self, prompts):
        # LlavaProcessor takes a flat list of images in prompt order.
        return [image for prompt in prompts for image in prompt.all_images()]
