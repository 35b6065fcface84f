"""Tiny random-weight SmolVLM: Idefics3's architecture (pixel-shuffle connector, Llama text model)
with SmolVLM's tokenizer, chat format and checkpoint layout.

Chat format of ``HuggingFaceTB/SmolVLM-Instruct``::

    <|im_start|>User:<image>What is it?<end_of_utterance>
    Assistant: a cat<end_of_utterance>
    User:<image>What is it?<end_of_utterance>
    Assistant:

The folder is laid out like the hub checkpoints (``preprocessor_config.json``,
``processor_config.json`` naming ``SmolVLMProcessor``, ``chat_template.json``) but without a video
processor config: transformers' ``SmolVLMProcessor`` needs torchvision and num2words, so dpmtv
loads an image-only processor instead (see ``dpmtv.models.families.smolvlm``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration, SmolVLMImageProcessorPil

from dpmtv.testing._tokenizer import char_tokenizer
from dpmtv.testing.idefics3 import (
    IMAGE_SEQ_LEN,
    IMAGE_TOKENS,
    ROW_COL_TOKENS,
    SCALE_FACTOR,
    image_processor_kwargs,
    tiny_configs,
)

CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<|im_start|>", *IMAGE_TOKENS, *ROW_COL_TOKENS],
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )
    vision, text = tiny_configs(len(tokenizer), tokenizer.pad_token_id)
    text.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    config = SmolVLMConfig(
        vision_config=vision,
        text_config=text,
        scale_factor=SCALE_FACTOR,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = SmolVLMForConditionalGeneration(config).eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    SmolVLMImageProcessorPil(**image_processor_kwargs()).save_pretrained(out_dir)
    _write_json(
        out_dir / "processor_config.json",
        {"image_seq_len": IMAGE_SEQ_LEN, "processor_class": "SmolVLMProcessor"},
    )
    _write_json(out_dir / "chat_template.json", {"chat_template": CHAT_TEMPLATE})
    return out_dir


def _write_json(path: Path, content: dict) -> None:
    path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
