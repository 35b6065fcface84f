"""Tiny random-weight VipLLaVA: CLIP tower read at two layers + Llama, LLaVA-1.5-style chat."""

from __future__ import annotations

from pathlib import Path

from transformers import (
    CLIPImageProcessorPil,
    LlavaProcessor,
    VipLlavaConfig,
    VipLlavaForConditionalGeneration,
)

from dpmtv.testing._common import save, text_config, vision_config
from dpmtv.testing._tokenizer import char_tokenizer
from dpmtv.testing.llava import CHAT_TEMPLATE

IMAGE_SIZE, PATCH_SIZE = 16, 8


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<image>"],
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        extra_special_tokens={"image_token": "<image>"},
    )
    config = VipLlavaConfig(
        vision_config=vision_config("clip_vision_model", IMAGE_SIZE, PATCH_SIZE, num_hidden_layers=2),
        text_config=text_config(tokenizer, "llama"),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_layers=[-2, -1],
    )
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessorPil(
            size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
        ),
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )
    return save(VipLlavaForConditionalGeneration, config, processor, out_dir, seed=seed)
