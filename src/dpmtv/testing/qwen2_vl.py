"""Tiny random-weight Qwen2-VL: Qwen2-VL vision tower + M-RoPE Qwen2 text model, ChatML chat.

Images are resized to sides that are multiples of patch·merge = 8 px, with an area between 16² and
32² px, so a 20×20 image becomes 16×16: a 4×4 patch grid, merged 2×2 into 4 image tokens.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessorPil,
)

from dpmtv.models.families.qwen2_vl import ImageOnlyQwen2VLProcessor
from dpmtv.testing._tokenizer import char_tokenizer

PATCH_SIZE, MERGE_SIZE, TEMPORAL_PATCH_SIZE = 4, 2, 2
MIN_SIDE, MAX_SIDE = 16, 32
TEXT_HIDDEN, NUM_HEADS = 64, 4
# M-RoPE splits head_dim/2 = 8 rotary frequencies over (time, height, width).
MROPE_SECTION = [2, 3, 3]

# The Qwen2-VL-Instruct chat template (default system turn, vision placeholders in user turns).
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

SPECIAL_TOKENS = [
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]


def qwen_tokenizer():
    return char_tokenizer(
        special_tokens=SPECIAL_TOKENS,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )


def qwen_text_config(tokenizer) -> dict:
    """Text config shared by the tiny Qwen2-VL and Qwen2.5-VL (no ``head_dim`` field there)."""
    return dict(
        vocab_size=len(tokenizer),
        hidden_size=TEXT_HIDDEN,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": MROPE_SECTION},
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def qwen_token_ids(tokenizer) -> dict:
    ids = tokenizer.convert_tokens_to_ids
    return dict(
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
    )


def qwen_image_processor() -> Qwen2VLImageProcessorPil:
    return Qwen2VLImageProcessorPil(
        size={"shortest_edge": MIN_SIDE * MIN_SIDE, "longest_edge": MAX_SIDE * MAX_SIDE},
        patch_size=PATCH_SIZE,
        merge_size=MERGE_SIZE,
        temporal_patch_size=TEMPORAL_PATCH_SIZE,
    )


def save(model, processor, tokenizer, out_dir: Path) -> Path:
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, tokenizer.pad_token_id]
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = qwen_tokenizer()
    vision = dict(
        depth=2,
        embed_dim=32,
        hidden_size=TEXT_HIDDEN,
        mlp_ratio=2,
        num_heads=4,
        patch_size=PATCH_SIZE,
        spatial_merge_size=MERGE_SIZE,
        temporal_patch_size=TEMPORAL_PATCH_SIZE,
    )
    config = Qwen2VLConfig(
        text_config=qwen_text_config(tokenizer), vision_config=vision, **qwen_token_ids(tokenizer)
    )
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config).eval()
    processor = ImageOnlyQwen2VLProcessor(
        image_processor=qwen_image_processor(), tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )
    return save(model, processor, tokenizer, out_dir)
