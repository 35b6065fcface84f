"""Qwen3-VL (``Qwen3VLForConditionalGeneration``): sites discovered; ``Qwen3VLProcessor``
requires a torchvision video processor, so dpmtv loads an image-only subclass (see
``_image_only``)."""

from __future__ import annotations

from typing import Any

from transformers import Qwen3VLProcessor

from dpmtv.models.families._image_only import load_image_only
from dpmtv.models.generic import GenericAdapter
from dpmtv.models.registry import register


class ImageOnlyQwen3VLProcessor(Qwen3VLProcessor):
    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "processor_class": Qwen3VLProcessor.__name__}


@register
class Qwen3VLAdapter(GenericAdapter):
    display_name = "Qwen3-VL"
    model_types = ("qwen3_vl",)
    special_reason = "image-only processor: the stock processor requires a torchvision video processor"

    @classmethod
    def load_processor(cls, path: str) -> Any:
        return load_image_only(ImageOnlyQwen3VLProcessor, path, cls.display_name)
