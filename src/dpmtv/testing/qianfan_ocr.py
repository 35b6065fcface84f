"""Tiny random-weight Qianfan-OCR: InternViT-style tower + pixel-shuffle projector + Qwen3,
ChatML chat with ``<image>`` placeholders the processor expands to ``<img>`` + 4
``<IMG_CONTEXT>`` + ``</img>`` (16 px images of 4 px patches, pixel-shuffled by 0.5)."""

from __future__ import annotations

from pathlib import Path

from transformers import (
    GotOcr2ImageProcessorPil,
    QianfanOCRConfig,
    QianfanOCRForConditionalGeneration,
    QianfanOCRProcessor,
)

from dpmtv.testing._common import save, text_config, vision_config
from dpmtv.testing._tokenizer import char_tokenizer

IMAGE_SIZE, PATCH_SIZE, IMAGE_SEQ_LEN = 16, 4, 4
IMAGE_TOKENS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
}

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<image>\\n' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}"
    "{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<|im_start|>", "<|im_end|>", "<image>", *IMAGE_TOKENS.values()],
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=IMAGE_TOKENS,
    )
    config = QianfanOCRConfig(
        vision_config=vision_config("qianfan_ocr_vision", [IMAGE_SIZE, IMAGE_SIZE], [PATCH_SIZE, PATCH_SIZE]),
        text_config=text_config(tokenizer, "qwen3", head_dim=16),
        image_token_id=tokenizer.convert_tokens_to_ids("<IMG_CONTEXT>"),
        image_seq_length=IMAGE_SEQ_LEN,
        downsample_ratio=0.5,
    )
    processor = QianfanOCRProcessor(
        image_processor=GotOcr2ImageProcessorPil(
            size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, crop_to_patches=False
        ),
        tokenizer=tokenizer,
        image_seq_length=IMAGE_SEQ_LEN,
        chat_template=CHAT_TEMPLATE,
    )
    return save(QianfanOCRForConditionalGeneration, config, processor, out_dir, seed=seed)
