"""Tiny random-weight LLaVA-OneVision: SigLIP vision tower + Qwen2 text model, ChatML chat.

The vision tower sees 16×16 tiles of 8 px patches (4 tokens per tile). A prompt's only image is
tiled "anyres" on a grid up to 32×32 (a 20×20 image: base tile + 2×2 tiles + newlines = 24
tokens); images of a multi-image prompt get the base tile only (4 tokens + 1 newline).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    LlavaOnevisionConfig,
    LlavaOnevisionForConditionalGeneration,
    LlavaOnevisionImageProcessorPil,
    Qwen2Config,
    SiglipVisionConfig,
)

from dpmtv.models.families.llava_onevision import ImageOnlyLlavaOnevisionProcessor
from dpmtv.testing._tokenizer import char_tokenizer

TILE_SIZE, PATCH_SIZE = 16, 8
GRID_PINPOINTS = [[16, 16], [16, 32], [32, 16], [32, 32]]
NUM_IMAGE_TOKENS = (TILE_SIZE // PATCH_SIZE) ** 2

# The llava-hf OneVision (Qwen2) chat template: a turn's images first, then its text.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + ' ' }}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>' }}{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}"
    "{{ '<video>' }}{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ '\\n' + content['text'] }}{% endfor %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<|im_start|>", "<|im_end|>", "<image>", "<video>"],
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens={"image_token": "<image>", "video_token": "<video>"},
    )
    vision = SiglipVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=TILE_SIZE,
        patch_size=PATCH_SIZE,
        vision_use_head=False,
    )
    # Explicit head_dim (32) differs from hidden/heads (16): o_proj takes 4·32 = 128 features.
    text = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    config = LlavaOnevisionConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        video_token_index=tokenizer.convert_tokens_to_ids("<video>"),
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        image_grid_pinpoints=GRID_PINPOINTS,
        vision_aspect_ratio="anyres_max_9",
    )
    torch.manual_seed(seed)
    model = LlavaOnevisionForConditionalGeneration(config).eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    image_processor = LlavaOnevisionImageProcessorPil(
        size={"height": TILE_SIZE, "width": TILE_SIZE}, image_grid_pinpoints=GRID_PINPOINTS
    )
    processor = ImageOnlyLlavaOnevisionProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        num_image_tokens=NUM_IMAGE_TOKENS,
        vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9",
        chat_template=CHAT_TEMPLATE,
    )
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir
