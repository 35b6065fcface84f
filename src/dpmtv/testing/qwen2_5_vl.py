"""Tiny random-weight Qwen2.5-VL: windowed-attention vision tower + M-RoPE Qwen2 text model.

Same tokenizer, chat template, image processor and text config as the tiny Qwen2-VL (the real
families share them too); the vision tower has one windowed and one full-attention block.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

from dpmtv.models.families.qwen2_vl import ImageOnlyQwen2_5_VLProcessor
from dpmtv.testing.qwen2_vl import (
    CHAT_TEMPLATE,
    MERGE_SIZE,
    PATCH_SIZE,
    TEMPORAL_PATCH_SIZE,
    TEXT_HIDDEN,
    qwen_image_processor,
    qwen_text_config,
    qwen_token_ids,
    qwen_tokenizer,
    save,
)

# Attention windows of 16 px = 2×2 merged patches; block 1 attends globally.
WINDOW_SIZE = 16


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = qwen_tokenizer()
    vision = dict(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=4,
        out_hidden_size=TEXT_HIDDEN,
        patch_size=PATCH_SIZE,
        spatial_merge_size=MERGE_SIZE,
        temporal_patch_size=TEMPORAL_PATCH_SIZE,
        window_size=WINDOW_SIZE,
        fullatt_block_indexes=[1],
    )
    config = Qwen2_5_VLConfig(
        text_config=qwen_text_config(tokenizer), vision_config=vision, **qwen_token_ids(tokenizer)
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    processor = ImageOnlyQwen2_5_VLProcessor(
        image_processor=qwen_image_processor(), tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )
    return save(model, processor, tokenizer, out_dir)
