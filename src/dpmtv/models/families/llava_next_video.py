"""LLaVA-NeXT-Video (``LlavaNextVideoForConditionalGeneration``): sites discovered; the stock
``LlavaNextVideoProcessor`` requires a torchvision video processor, so dpmtv loads an
image-only subclass."""

from __future__ import annotations

from typing import Any

from transformers import LlavaNextVideoProcessor, ProcessorMixin

from dpmtv.models.families._image_only import load_image_only
from dpmtv.models.generic import GenericAdapter
from dpmtv.models.registry import register


class ImageOnlyLlavaNextVideoProcessor(LlavaNextVideoProcessor):
    def __init__(
        self,
        image_processor=None,
        tokenizer=None,
        chat_template=None,
        patch_size=None,
        vision_feature_select_strategy=None,
        video_token="<video>",
        image_token="<image>",
        num_additional_image_tokens=0,
        **kwargs,
    ):
        # The stock __init__ passes (video_processor, image_processor, tokenizer) positionally,
        # which ProcessorMixin maps onto this signature's two sub-processors; so set its fields
        # here and call ProcessorMixin directly.
        self.patch_size = patch_size
        self.num_additional_image_tokens = num_additional_image_tokens
        self.vision_feature_select_strategy = vision_feature_select_strategy
        self.image_token = getattr(tokenizer, "image_token", None) or image_token
        self.video_token = getattr(tokenizer, "video_token", None) or video_token
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "processor_class": LlavaNextVideoProcessor.__name__}


@register
class LlavaNextVideoAdapter(GenericAdapter):
    display_name = "LLaVA-NeXT-Video"
    model_types = ("llava_next_video",)
    special_reason = "image-only processor: the stock processor requires a torchvision video processor"

    @classmethod
    def load_processor(cls, path: str) -> Any:
        return load_image_only(ImageOnlyLlavaNextVideoProcessor, path, cls.display_name)
