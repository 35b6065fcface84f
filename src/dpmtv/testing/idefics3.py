"""Tiny random-weight Idefics3: SigLIP-style vision tower + pixel-shuffle connector + Llama.

Chat format of ``HuggingFaceM4/Idefics3-8B-Llama3``::

    <|begin_of_text|>User:<image>What is it?<end_of_utterance>
    Assistant: a cat<end_of_utterance>
    User:<image>What is it?<end_of_utterance>
    Assistant:

Image splitting is on, as in the real checkpoints: a 20 px image is resized to ``LONGEST_EDGE``,
cut into 2x2 tiles of ``TILE`` px plus a global view, and the processor writes each tile as
``<fake_token_around_image><row_r_col_c>`` + ``IMAGE_SEQ_LEN`` image tokens and the global view as
``<fake_token_around_image><global-img>`` + image tokens + ``<fake_token_around_image>``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3ImageProcessorPil,
    Idefics3Processor,
)

from dpmtv.testing._tokenizer import char_tokenizer

TILE, PATCH_SIZE, SCALE_FACTOR = 16, 4, 2
LONGEST_EDGE = 2 * TILE  # images become 2x2 tiles + 1 global view
IMAGE_SEQ_LEN = (TILE // PATCH_SIZE) ** 2 // SCALE_FACTOR**2  # image tokens per tile: 4

IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"]
ROW_COL_TOKENS = [f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7)]

CHAT_TEMPLATE = (
    "<|begin_of_text|>{% for message in messages %}{{ message['role'].capitalize() }}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def tiny_configs(vocab_size: int, pad_token_id: int) -> tuple[dict, dict]:
    """Vision and Llama text configs shared by the tiny Idefics3 and SmolVLM."""
    vision = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "image_size": TILE,
        "patch_size": PATCH_SIZE,
    }
    text = {
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "pad_token_id": pad_token_id,
    }
    return vision, text


def image_processor_kwargs() -> dict:
    return {
        "size": {"longest_edge": LONGEST_EDGE},
        "max_image_size": {"longest_edge": TILE},
        "do_image_splitting": True,
    }


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<|begin_of_text|>", *IMAGE_TOKENS, *ROW_COL_TOKENS],
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<pad>",
    )
    vision, text = tiny_configs(len(tokenizer), tokenizer.pad_token_id)
    text.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    config = Idefics3Config(
        vision_config=vision,
        text_config=text,
        scale_factor=SCALE_FACTOR,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(config).eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = [
        tokenizer.convert_tokens_to_ids("<end_of_utterance>"),
        tokenizer.eos_token_id,
    ]
    processor = Idefics3Processor(
        image_processor=Idefics3ImageProcessorPil(**image_processor_kwargs()),
        tokenizer=tokenizer,
        image_seq_len=IMAGE_SEQ_LEN,
        chat_template=CHAT_TEMPLATE,
    )
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir
