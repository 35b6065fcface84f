"""Tiny random-weight Qwen3-VL: ViT with learned, interpolated position embeddings and
"deepstack" features injected into the first text layers + M-RoPE Qwen3 text model.

Images are resized to sides that are multiples of patch·merge = 8 px, with an area between 16²
and 32² px, so a 20×20 image becomes 16×16: a 4×4 patch grid, merged 2×2 into 4 image tokens.
"""

from __future__ import annotations

from pathlib import Path

from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

from dpmtv.models.families.qwen3_vl import ImageOnlyQwen3VLProcessor
from dpmtv.testing._common import HIDDEN, save, text_config
from dpmtv.testing.qwen2_vl import (
    CHAT_TEMPLATE,
    MERGE_SIZE,
    PATCH_SIZE,
    TEMPORAL_PATCH_SIZE,
    qwen_image_processor,
    qwen_token_ids,
    qwen_tokenizer,
)

HEAD_DIM = 16  # explicit, twice hidden/heads, as in the real checkpoints' head_dim 128
# M-RoPE splits head_dim/2 = 8 rotary frequencies over (time, height, width), interleaved.
ROPE = {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [2, 3, 3], "mrope_interleaved": True}


def vision_config() -> dict:
    return dict(
        depth=2,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_heads=2,
        out_hidden_size=HIDDEN,
        patch_size=PATCH_SIZE,
        spatial_merge_size=MERGE_SIZE,
        temporal_patch_size=TEMPORAL_PATCH_SIZE,
        num_position_embeddings=16,
        deepstack_visual_indexes=[0],
    )


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = qwen_tokenizer()
    config = Qwen3VLConfig(
        text_config=text_config(tokenizer, "qwen3_vl_text", head_dim=HEAD_DIM, rope_parameters=ROPE),
        vision_config=vision_config(),
        **qwen_token_ids(tokenizer),
    )
    processor = ImageOnlyQwen3VLProcessor(
        image_processor=qwen_image_processor(), tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )
    return save(
        Qwen3VLForConditionalGeneration,
        config,
        processor,
        out_dir,
        seed=seed,
        eos_token_ids=[tokenizer.eos_token_id, tokenizer.pad_token_id],
    )
