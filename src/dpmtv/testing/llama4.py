"""Tiny random-weight Llama 4 model (no processor): MoE text model with chunked attention and
NoPE layers + pixel-shuffle vision encoder.

transformers' ``Llama4ImageProcessor`` exists only for the torchvision backend, which cannot be
installed beside this torch, so the folder holds the model, tokenizer and chat template but no
image processor; tests run the adapter checks that need no images on it.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import Llama4Config, Llama4ForConditionalGeneration

from dpmtv.testing._common import HIDDEN, save_model_only, text_config
from dpmtv.testing._tokenizer import char_tokenizer


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<|header_start|>", "<|header_end|>", "<|eot|>", "<|image|>"],
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|finetune_right_pad|>",
    )
    text = text_config(
        tokenizer, "llama4_text", head_dim=16, num_local_experts=2, num_experts_per_tok=1,
        intermediate_size_mlp=2 * HIDDEN, interleave_moe_layer_step=2, attention_chunk_size=64,
        no_rope_layers=[1, 0],
    )  # fmt: skip
    vision = {
        "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN, "num_hidden_layers": 1,
        "num_attention_heads": 2, "image_size": 16, "patch_size": 8, "vision_output_dim": HIDDEN,
        "projector_input_dim": HIDDEN, "projector_output_dim": HIDDEN, "pixel_shuffle_ratio": 0.5,
    }  # fmt: skip
    config = Llama4Config(
        vision_config=vision, text_config=text, image_token_index=tokenizer.convert_tokens_to_ids("<|image|>")
    )
    torch.manual_seed(seed)
    return save_model_only(Llama4ForConditionalGeneration(config).eval(), tokenizer, out_dir)
