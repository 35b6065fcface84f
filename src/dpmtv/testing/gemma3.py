"""Tiny random-weight Gemma 3: SigLIP tower + average-pooled projector + Gemma 3 text model.

16 px images of 4 px patches (4×4) are pooled to 2×2 = 4 soft tokens. The text config sets an
explicit ``head_dim`` (16) that differs from hidden/heads (8), as the real checkpoints do.
"""

from __future__ import annotations

from pathlib import Path

from transformers import (
    Gemma3Config,
    Gemma3ForConditionalGeneration,
    Gemma3ImageProcessorPil,
    Gemma3Processor,
)

from dpmtv.testing._common import save, text_config, vision_config
from dpmtv.testing._tokenizer import char_tokenizer

IMAGE_SIZE, PATCH_SIZE, IMAGE_SEQ_LEN = 16, 4, 4

# google/gemma-3-4b-it's template, shortened to the parts dpmtv's prompts use.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' }}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<start_of_image>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] | trim }}{% endif %}{% endfor %}"
    "{{ '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
IMAGE_TOKENS = {
    "boi_token": "<start_of_image>",
    "eoi_token": "<end_of_image>",
    "image_token": "<image_soft_token>",
}


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<start_of_turn>", "<end_of_turn>", *IMAGE_TOKENS.values()],
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        extra_special_tokens=IMAGE_TOKENS,
    )
    ids = tokenizer.convert_tokens_to_ids
    config = Gemma3Config(
        text_config=text_config(tokenizer, "gemma3_text", head_dim=16, sliding_window=64),
        vision_config=vision_config("siglip_vision_model", IMAGE_SIZE, PATCH_SIZE),
        mm_tokens_per_image=IMAGE_SEQ_LEN,
        boi_token_index=ids("<start_of_image>"),
        eoi_token_index=ids("<end_of_image>"),
        image_token_index=ids("<image_soft_token>"),
    )
    processor = Gemma3Processor(
        image_processor=Gemma3ImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}),
        tokenizer=tokenizer,
        image_seq_length=IMAGE_SEQ_LEN,
        chat_template=CHAT_TEMPLATE,
    )
    return save(
        Gemma3ForConditionalGeneration,
        config,
        processor,
        out_dir,
        seed=seed,
        eos_token_ids=[tokenizer.eos_token_id, ids("<end_of_turn>")],
    )
