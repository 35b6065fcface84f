"""Tiny random-weight InternVL: InternViT + pixel-shuffle MLP projector + Qwen2, ChatML chat.

16 px images (no dynamic tiling) of 4 px patches: a 4×4 grid, pixel-shuffled by 0.5 into 4
``<IMG_CONTEXT>`` tokens between ``<img>`` and ``</img>``.
"""

from __future__ import annotations

from pathlib import Path

from transformers import GotOcr2ImageProcessorPil, InternVLConfig, InternVLForConditionalGeneration

from dpmtv.models.families.internvl import ImageOnlyInternVLProcessor
from dpmtv.testing._common import save, text_config, vision_config
from dpmtv.testing._tokenizer import char_tokenizer

IMAGE_SIZE, PATCH_SIZE, IMAGE_SEQ_LEN = 16, 4, 4
IMAGE_TOKENS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}

# OpenGVLab/InternVL3-1B-hf's template, shortened to the parts dpmtv's prompts use.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<IMG_CONTEXT>\n' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}"
    "{{ '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<|im_start|>", "<|im_end|>", *IMAGE_TOKENS.values()],
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=IMAGE_TOKENS,
    )
    config = InternVLConfig(
        vision_config=vision_config("internvl_vision", [IMAGE_SIZE, IMAGE_SIZE], [PATCH_SIZE, PATCH_SIZE]),
        text_config=text_config(tokenizer, "qwen2"),
        image_token_id=tokenizer.convert_tokens_to_ids("<IMG_CONTEXT>"),
        downsample_ratio=0.5,
    )
    image_processor = GotOcr2ImageProcessorPil(
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, crop_to_patches=False
    )
    processor = ImageOnlyInternVLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_length=IMAGE_SEQ_LEN,
        chat_template=CHAT_TEMPLATE,
    )
    return save(InternVLForConditionalGeneration, config, processor, out_dir, seed=seed)
