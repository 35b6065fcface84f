"""Tiny random-weight Video-LLaVA: CLIP image tower + Llama, LLaVA-1.5-style chat, fed images
only (16 px images of 8 px patches + CLS: 4 image tokens with the "default" strategy)."""

from __future__ import annotations

from pathlib import Path

from transformers import VideoLlavaConfig, VideoLlavaForConditionalGeneration, VideoLlavaImageProcessor

from dpmtv.models.families.video_llava import ImageOnlyVideoLlavaProcessor
from dpmtv.testing._common import save, text_config, vision_config
from dpmtv.testing._tokenizer import char_tokenizer
from dpmtv.testing.llava import CHAT_TEMPLATE

IMAGE_SIZE, PATCH_SIZE = 16, 8


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<image>", "<video>"],
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        extra_special_tokens={"image_token": "<image>", "video_token": "<video>"},
    )
    config = VideoLlavaConfig(
        vision_config=vision_config("clip_vision_model", IMAGE_SIZE, PATCH_SIZE),
        text_config=text_config(tokenizer, "llama"),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        video_token_index=tokenizer.convert_tokens_to_ids("<video>"),
        vision_feature_layer=-1,
    )
    image_processor = VideoLlavaImageProcessor(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    processor = ImageOnlyVideoLlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        chat_template=CHAT_TEMPLATE,
    )
    return save(VideoLlavaForConditionalGeneration, config, processor, out_dir, seed=seed)
