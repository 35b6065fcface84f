"""InternVL (``InternVLForConditionalGeneration``): sites discovered; the stock
``InternVLProcessor`` requires a torchvision video processor, so dpmtv loads an image-only
subclass."""

from __future__ import annotations

from typing import Any

from transformers import InternVLProcessor

from dpmtv.models.families._image_only import load_image_only
from dpmtv.models.generic import GenericAdapter
from dpmtv.models.registry import register


class ImageOnlyInternVLProcessor(InternVLProcessor):
    def __init__(
        self, image_processor=None, tokenizer=None, image_seq_length=256, chat_template=None, **kwargs
    ):
        super().__init__(
            image_processor,
            tokenizer,
            None,
            image_seq_length=image_seq_length,
            chat_template=chat_template,
            **kwargs,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "processor_class": InternVLProcessor.__name__}


@register
class InternVLAdapter(GenericAdapter):
    display_name = "InternVL"
    model_types = ("internvl",)
    special_reason = "image-only processor: the stock processor requires a torchvision video processor"

    @classmethod
    def load_processor(cls, path: str) -> Any:
        return load_image_only(ImageOnlyInternVLProcessor, path, cls.display_name)
