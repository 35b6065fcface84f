"""LLaVA-OneVision (``LlavaOnevisionForConditionalGeneration``): SigLIP + Qwen2, o_proj at
``model.language_model.layers[i]``.

The stock processor requires a video processor, which needs torchvision; dpmtv only feeds
images, so it loads an image-only subclass. Images go to the processor as one list per prompt:
the family tiles ("anyres") a prompt's image only when it is the prompt's sole image, so the
processor must see which images belong together.
"""

from __future__ import annotations

from typing import Any

from transformers import LlavaOnevisionProcessor

from dpmtv.models.families._image_only import load_image_only
from dpmtv.models.generic import GenericAdapter
from dpmtv.models.registry import register


class ImageOnlyLlavaOnevisionProcessor(LlavaOnevisionProcessor):
    """``LlavaOnevisionProcessor`` without the video processor (the processor's sub-processors
    are read from the ``__init__`` signature, so leaving ``video_processor`` out drops it; the
    other arguments must be named there too, or ``from_pretrained`` does not pass them)."""

    def __init__(
        self,
        image_processor=None,
        tokenizer=None,
        num_image_tokens=None,
        vision_feature_select_strategy=None,
        chat_template=None,
        image_token="<image>",
        video_token="<video>",
        vision_aspect_ratio="anyres_max_9",
        **kwargs,
    ):
        super().__init__(
            image_processor,
            tokenizer,
            None,
            num_image_tokens=num_image_tokens,
            vision_feature_select_strategy=vision_feature_select_strategy,
            chat_template=chat_template,
            image_token=image_token,
            video_token=video_token,
            vision_aspect_ratio=vision_aspect_ratio,
            **kwargs,
        )

    def to_dict(self) -> dict[str, Any]:
        # Saved folders name the stock class, so they stay standard checkpoints.
        return {**super().to_dict(), "processor_class": LlavaOnevisionProcessor.__name__}


@register
class LlavaOnevisionAdapter(GenericAdapter):
    display_name = "LLaVA-OneVision"
    model_types = ("llava_onevision",)
    special_reason = "image-only processor: the stock processor requires a torchvision video processor"

    @classmethod
    def load_processor(cls, path: str) -> Any:
        return load_image_only(ImageOnlyLlavaOnevisionProcessor, path, cls.display_name)
