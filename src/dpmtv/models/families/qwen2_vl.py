"""Qwen2-VL and Qwen2.5-VL (``Qwen2VLForConditionalGeneration``,
``Qwen2_5_VLForConditionalGeneration``): o_proj at ``model.language_model.layers[i]``.

Both stock processors require a video processor, which needs torchvision; dpmtv only feeds
images, so it loads image-only subclasses (tokenizer + image processor + chat template). Left
padding needs no help: the model computes the multimodal RoPE (M-RoPE) positions from the
attention mask and ``mm_token_type_ids``, which the processor returns.
"""

from __future__ import annotations

from typing import Any

from transformers import Qwen2_5_VLProcessor, Qwen2VLProcessor

from dpmtv.models.families._image_only import load_image_only
from dpmtv.models.generic import GenericAdapter
from dpmtv.models.registry import register


class ImageOnlyQwen2VLProcessor(Qwen2VLProcessor):
    """``Qwen2VLProcessor`` without the video processor (the processor's sub-processors are read
    from the ``__init__`` signature, so leaving ``video_processor`` out of it drops it)."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        # Saved folders name the stock class, so they stay standard checkpoints.
        return {**super().to_dict(), "processor_class": Qwen2VLProcessor.__name__}


class ImageOnlyQwen2_5_VLProcessor(Qwen2_5_VLProcessor):  # noqa: N801 (transformers' spelling)
    """``Qwen2_5_VLProcessor`` without the video processor (see ``ImageOnlyQwen2VLProcessor``)."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "processor_class": Qwen2_5_VLProcessor.__name__}


class _QwenVLAdapter(GenericAdapter):
    special_reason = "image-only processor: the stock processor requires a torchvision video processor"
    processor_cls: type

    @classmethod
    def load_processor(cls, path: str) -> Any:
        return load_image_only(cls.processor_cls, path, cls.display_name)


@register
class Qwen2VLAdapter(_QwenVLAdapter):
    display_name = "Qwen2-VL"
    model_types = ("qwen2_vl",)
    processor_cls = ImageOnlyQwen2VLProcessor


@register
class Qwen2_5_VLAdapter(_QwenVLAdapter):  # noqa: N801 (transformers' spelling)
    display_name = "Qwen2.5-VL"
    model_types = ("qwen2_5_vl",)
    processor_cls = ImageOnlyQwen2_5_VLProcessor
