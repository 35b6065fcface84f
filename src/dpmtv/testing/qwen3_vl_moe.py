"""Tiny random-weight Qwen3-VL-MoE: the Qwen3-VL vision tower and a mixture-of-experts Qwen3 text
model (4 experts, 2 per token). Saved without a video processor; loads through the generic
image-only processor route (no family file)."""

from __future__ import annotations

from pathlib import Path

from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration, Qwen3VLProcessor

from dpmtv.models.processors import image_only_class
from dpmtv.testing._common import HIDDEN, save, text_config
from dpmtv.testing.qwen2_vl import CHAT_TEMPLATE, qwen_image_processor, qwen_token_ids, qwen_tokenizer
from dpmtv.testing.qwen3_vl import HEAD_DIM, ROPE, vision_config


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = qwen_tokenizer()
    text = text_config(
        tokenizer,
        "qwen3_vl_moe_text",
        head_dim=HEAD_DIM,
        rope_parameters=ROPE,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=HIDDEN,
        decoder_sparse_step=1,
    )
    config = Qwen3VLMoeConfig(text_config=text, vision_config=vision_config(), **qwen_token_ids(tokenizer))
    processor = image_only_class(Qwen3VLProcessor)(
        image_processor=qwen_image_processor(), tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )
    return save(
        Qwen3VLMoeForConditionalGeneration,
        config,
        processor,
        out_dir,
        seed=seed,
        eos_token_ids=[tokenizer.eos_token_id, tokenizer.pad_token_id],
    )
