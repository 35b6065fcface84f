"""Tiny random-weight Qwen3.5: the Qwen3-VL vision tower + Qwen3.5's hybrid text model, whose
layer 0 is a gated-DeltaNet linear-attention layer and layer 1 a full-attention layer (the real
checkpoints repeat three linear layers and one full layer).

dpmtv refuses this family: linear-attention layers have no per-head outputs to read or patch.
The builder exists so a test can show that refusal on the real layout.
"""

from __future__ import annotations

from pathlib import Path

from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

from dpmtv.models.families.qwen3_vl import ImageOnlyQwen3VLProcessor
from dpmtv.testing._common import LAYERS, save, text_config
from dpmtv.testing.qwen2_vl import CHAT_TEMPLATE, qwen_image_processor, qwen_token_ids, qwen_tokenizer
from dpmtv.testing.qwen3_vl import HEAD_DIM, ROPE, vision_config


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = qwen_tokenizer()
    text = text_config(
        tokenizer,
        "qwen3_5_text",
        head_dim=HEAD_DIM,
        rope_parameters=ROPE,
        layer_types=["linear_attention", "full_attention"][:LAYERS],
        linear_num_key_heads=2,
        linear_num_value_heads=2,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
    )
    vision = vision_config()
    vision.pop("deepstack_visual_indexes")
    config = Qwen3_5Config(text_config=text, vision_config=vision, **qwen_token_ids(tokenizer))
    processor = ImageOnlyQwen3VLProcessor(
        image_processor=qwen_image_processor(), tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )
    return save(
        Qwen3_5ForConditionalGeneration,
        config,
        processor,
        out_dir,
        seed=seed,
        eos_token_ids=[tokenizer.eos_token_id, tokenizer.pad_token_id],
    )
