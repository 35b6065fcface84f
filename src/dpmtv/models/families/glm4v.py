"""GLM-4V (``Glm4vForConditionalGeneration``): sites discovered; the stock ``Glm4vProcessor``
requires a torchvision video processor, so dpmtv loads an image-only subclass."""

from __future__ import annotations

from typing import Any

from transformers import Glm4vProcessor

from dpmtv.models.families._image_only import load_image_only
from dpmtv.models.generic import GenericAdapter
from dpmtv.models.registry import register


class ImageOnlyGlm4vProcessor(Glm4vProcessor):
    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "processor_class": Glm4vProcessor.__name__}


@register
class Glm4vAdapter(GenericAdapter):
    display_name = "GLM-4V"
    model_types = ("glm4v",)
    special_reason = "image-only processor: the stock processor requires a torchvision video processor"

    @classmethod
    def load_processor(cls, path: str) -> Any:
        return load_image_only(ImageOnlyGlm4vProcessor, path, cls.display_name)
