"""Tiny random-weight DeepSeek-VL: SigLIP tower + MLP aligner + Llama, DeepSeek chat format.

16 px images of 8 px patches: 4 ``<image_placeholder>`` tokens per image.
"""

from __future__ import annotations

from pathlib import Path

from transformers import (
    DeepseekVLConfig,
    DeepseekVLForConditionalGeneration,
    DeepseekVLImageProcessorPil,
    DeepseekVLProcessor,
)

from dpmtv.testing._common import save, text_config, vision_config
from dpmtv.testing._tokenizer import char_tokenizer

IMAGE_SIZE, PATCH_SIZE = 16, 8
NUM_IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2

# deepseek-community/deepseek-vl-1.3b-chat's format, shortened to the parts dpmtv's prompts use.
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ 'User: ' }}"
    "{% else %}{{ 'Assistant: ' }}{% endif %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<image_placeholder>' }}{% elif item['type'] == 'text' %}"
    "{{ item['text'] }}{% endif %}{% endfor %}"
    "{% if message['role'] == 'user' %}{{ '\\n\\n' }}{% else %}{{ eos_token }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<image_placeholder>"],
        bos_token="<｜begin▁of▁sentence｜>",
        eos_token="<｜end▁of▁sentence｜>",
        pad_token="<｜pad｜>",
        extra_special_tokens={"image_token": "<image_placeholder>"},
    )
    config = DeepseekVLConfig(
        vision_config=vision_config("siglip_vision_model", IMAGE_SIZE, PATCH_SIZE),
        text_config=text_config(tokenizer, "llama"),
        image_token_id=tokenizer.convert_tokens_to_ids("<image_placeholder>"),
    )
    processor = DeepseekVLProcessor(
        DeepseekVLImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}),
        tokenizer,
        chat_template=CHAT_TEMPLATE,
        num_image_tokens=NUM_IMAGE_TOKENS,
    )
    return save(DeepseekVLForConditionalGeneration, config, processor, out_dir, seed=seed)
