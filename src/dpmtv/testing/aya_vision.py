"""Tiny random-weight Aya Vision: SigLIP tower + pixel-shuffle projector + Cohere2, Cohere chat.

16 px images (no tiling) of 4 px patches, downsampled 2×2: 4 ``<|IMG_PATCH|>`` tokens per image
after ``TILE_GLOBAL``, between ``<|START_OF_IMG|>`` and ``<|END_OF_IMG|>``.
"""

from __future__ import annotations

from pathlib import Path

from transformers import (
    AyaVisionConfig,
    AyaVisionForConditionalGeneration,
    AyaVisionProcessor,
    GotOcr2ImageProcessorPil,
)

from dpmtv.testing._common import save, text_config, vision_config
from dpmtv.testing._tokenizer import char_tokenizer

IMAGE_SIZE, PATCH_SIZE, DOWNSAMPLE = 16, 4, 2
TURN_TOKENS = ["<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>"]
IMAGE_TOKENS = [
    "<image>",
    "<|START_OF_IMG|>",
    "<|END_OF_IMG|>",
    "<|IMG_PATCH|>",
    "<|IMG_LINE_BREAK|>",
    "TILE",
    "TILE_GLOBAL",
]

# CohereForAI/aya-vision-8b's template, shortened to the parts dpmtv's prompts use.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'CHATBOT' if message['role'] == 'assistant' else message['role'] | upper %}"
    "{{ '<|START_OF_TURN_TOKEN|><|' + role + '_TOKEN|>' }}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<image>' }}{% elif item['type'] == 'text' %}"
    "{{ item['text'] }}{% endif %}{% endfor %}{{ '<|END_OF_TURN_TOKEN|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif %}"
)


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=[*TURN_TOKENS, *IMAGE_TOKENS],
        bos_token="<BOS_TOKEN>",
        eos_token="<|END_OF_TURN_TOKEN|>",
        pad_token="<PAD>",
    )
    config = AyaVisionConfig(
        vision_config=vision_config("siglip_vision_model", IMAGE_SIZE, PATCH_SIZE),
        text_config=text_config(tokenizer, "cohere2", sliding_window=64),
        image_token_index=tokenizer.convert_tokens_to_ids("<|IMG_PATCH|>"),
        downsample_factor=DOWNSAMPLE,
        vision_feature_layer=-1,
    )
    image_processor = GotOcr2ImageProcessorPil(
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, crop_to_patches=False
    )
    processor = AyaVisionProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        img_size=IMAGE_SIZE,
        downsample_factor=DOWNSAMPLE,
        chat_template=CHAT_TEMPLATE,
    )
    return save(AyaVisionForConditionalGeneration, config, processor, out_dir, seed=seed)
