"""Tiny random-weight Qwen3.5: the Qwen3-VL vision tower + Qwen3.5's hybrid text model (gated
DeltaNet linear-attention layers between full-attention layers).

Only full-attention layers have per-head outputs: dpmtv reads layers whose attention block has an
output projection, so the tiny model uses full attention in every layer (``layer_types``).
"""

from __future__ import annotations

from pathlib import Path

from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

from dpmtv.models.families.qwen3_vl import ImageOnlyQwen3VLProcessor
from dpmtv.models.tiny._common import LAYERS, save, text_config
from dpmtv.models.tiny.qwen2_vl import CHAT_TEMPLATE, qwen_image_processor, qwen_token_ids, qwen_tokenizer
from dpmtv.models.tiny.qwen3_vl import HEAD_DIM, ROPE, vision_config


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = qwen_tokenizer()
    text = text_config(tokenizer, "qwen3_5_text", head_dim=HEAD_DIM, rope_parameters=ROPE,
                       layer_types=["full_attention"] * LAYERS)
    vision = vision_config()
    vision.pop("deepstack_visual_indexes")
    config = Qwen3_5Config(text_config=text, vision_config=vision, **qwen_token_ids(tokenizer))
    processor = ImageOnlyQwen3VLProcessor(
        image_processor=qwen_image_processor(), tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )
    return save(Qwen3_5ForConditionalGeneration, config, processor, out_dir, seed=seed,
                eos_token_ids=[tokenizer.eos_token_id, tokenizer.pad_token_id])
