"""Tiny random-weight Mistral 3 model (no processor): Pixtral vision tower + patch merger +
Mistral text model.

transformers' ``PixtralProcessor`` imports the torchvision image-processor module, which cannot
be installed beside this torch, so the folder holds the model and tokenizer but no processor;
tests run the adapter checks that need no images on it.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import Mistral3Config, Mistral3ForConditionalGeneration

from dpmtv.testing._common import save_model_only, text_config, vision_config
from dpmtv.testing._tokenizer import char_tokenizer


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["[INST]", "[/INST]", "[IMG]", "[IMG_BREAK]", "[IMG_END]"],
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    config = Mistral3Config(
        vision_config=vision_config("pixtral", 32, 4, head_dim=16),
        text_config=text_config(tokenizer, "mistral"),
        image_token_index=tokenizer.convert_tokens_to_ids("[IMG]"),
        spatial_merge_size=2,
        vision_feature_layer=-1,
    )
    torch.manual_seed(seed)
    return save_model_only(Mistral3ForConditionalGeneration(config).eval(), tokenizer, out_dir)
