"""Tiny random-weight LLaVA-NeXT-Video: the tiny LLaVA-NeXT (CLIP tower with "anyres" tiling +
Mistral, [INST] chat) with the video family's config and processor, fed images only."""

from __future__ import annotations

from pathlib import Path

from transformers import (
    LlavaNextImageProcessorPil,
    LlavaNextVideoConfig,
    LlavaNextVideoForConditionalGeneration,
)

from dpmtv.models.families.llava_next_video import ImageOnlyLlavaNextVideoProcessor
from dpmtv.testing._common import save, text_config, vision_config
from dpmtv.testing._tokenizer import char_tokenizer
from dpmtv.testing.llava_next import CHAT_TEMPLATE, GRID_PINPOINTS, PATCH_SIZE, TILE


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<image>", "<video>"],
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        extra_special_tokens={"image_token": "<image>", "video_token": "<video>"},
    )
    config = LlavaNextVideoConfig(
        vision_config=vision_config("clip_vision_model", TILE, PATCH_SIZE),
        text_config=text_config(tokenizer, "mistral"),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        video_token_index=tokenizer.convert_tokens_to_ids("<video>"),
        image_grid_pinpoints=GRID_PINPOINTS,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    processor = ImageOnlyLlavaNextVideoProcessor(
        image_processor=LlavaNextImageProcessorPil(
            size={"shortest_edge": TILE},
            crop_size={"height": TILE, "width": TILE},
            image_grid_pinpoints=GRID_PINPOINTS,
        ),
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )
    return save(LlavaNextVideoForConditionalGeneration, config, processor, out_dir, seed=seed)
