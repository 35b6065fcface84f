"""Tiny random-weight LLaVA-NeXT: CLIP tower with "anyres" tiling + Mistral, [INST] chat.

16 px tiles of 8 px patches (4 tokens per tile); images are tiled on grids up to 32×32.
"""

from __future__ import annotations

from pathlib import Path

from transformers import (
    LlavaNextConfig,
    LlavaNextForConditionalGeneration,
    LlavaNextImageProcessorPil,
    LlavaNextProcessor,
)

from dpmtv.testing._common import save, text_config, vision_config
from dpmtv.testing._tokenizer import char_tokenizer

TILE, PATCH_SIZE = 16, 8
GRID_PINPOINTS = [[16, 16], [16, 32], [32, 16], [32, 32]]

# llava-hf/llava-v1.6-mistral-7b-hf's template, shortened to the parts dpmtv's prompts use.
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' }}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<image>\n' }}"
    "{% else %}{{ item['text'] }}{% endif %}{% endfor %}{{ ' [/INST]' }}"
    "{% else %}{% for item in message['content'] %}{{ ' ' + item['text'] }}{% endfor %}"
    "{{ eos_token }}{% endif %}{% endfor %}"
)


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<image>"],
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        extra_special_tokens={"image_token": "<image>"},
    )
    config = LlavaNextConfig(
        vision_config=vision_config("clip_vision_model", TILE, PATCH_SIZE),
        text_config=text_config(tokenizer, "mistral"),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        image_grid_pinpoints=GRID_PINPOINTS,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    processor = LlavaNextProcessor(
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
    return save(LlavaNextForConditionalGeneration, config, processor, out_dir, seed=seed)
