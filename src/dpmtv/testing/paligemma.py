"""Tiny random-weight PaliGemma: SigLIP tower + linear projector + Gemma, no chat template.

PaliGemma checkpoints ship no chat template: the processor puts every image first, then
``<bos>`` and one prefix line (see ``dpmtv.models.families.paligemma``). 16 px images of 8 px
patches give 4 image tokens.
"""

from __future__ import annotations

from pathlib import Path

from transformers import (
    PaliGemmaConfig,
    PaliGemmaForConditionalGeneration,
    PaliGemmaProcessor,
    SiglipImageProcessorPil,
)

from dpmtv.testing._common import save, text_config, vision_config
from dpmtv.testing._tokenizer import char_tokenizer

IMAGE_SIZE, PATCH_SIZE = 16, 8
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH_SIZE) ** 2


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<image>"],
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        extra_special_tokens={"image_token": "<image>"},
    )
    image_processor = SiglipImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    image_processor.image_seq_length = IMAGE_SEQ_LEN  # saved with it, as in the hub checkpoints
    processor = PaliGemmaProcessor(image_processor=image_processor, tokenizer=tokenizer)
    # The processor adds PaliGemma's location and segmentation tokens to the vocabulary.
    config = PaliGemmaConfig(
        vision_config=vision_config("siglip_vision_model", IMAGE_SIZE, PATCH_SIZE),
        text_config=text_config(tokenizer, "gemma", head_dim=8),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        projection_dim=32,
    )
    return save(PaliGemmaForConditionalGeneration, config, processor, out_dir, seed=seed)
