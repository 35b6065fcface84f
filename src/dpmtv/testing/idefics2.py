"""Tiny random-weight Idefics2: SigLIP-style vision tower + perceiver resampler + Mistral.

Chat format of ``HuggingFaceM4/idefics2-8b``::

    User:<image>What is it?<end_of_utterance>
    Assistant: a cat<end_of_utterance>
    User:<image>What is it?<end_of_utterance>
    Assistant:

The processor expands each ``<image>`` to ``<fake_token_around_image>`` + ``IMAGE_SEQ_LEN`` image
tokens + ``<fake_token_around_image>``; the perceiver resamples every image to that many latents.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    Idefics2Config,
    Idefics2ForConditionalGeneration,
    Idefics2ImageProcessorPil,
    Idefics2Processor,
)

from dpmtv.testing._tokenizer import char_tokenizer

IMAGE_SIZE, PATCH_SIZE = 16, 4
IMAGE_SEQ_LEN = 4  # perceiver latents per image = image tokens per image

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'].capitalize() }}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<fake_token_around_image>", "<image>", "<end_of_utterance>"],
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    end_of_utterance = tokenizer.convert_tokens_to_ids("<end_of_utterance>")
    config = Idefics2Config(
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "image_size": IMAGE_SIZE,
            "patch_size": PATCH_SIZE,
        },
        perceiver_config={
            "hidden_size": 64,
            "resampler_n_latents": IMAGE_SEQ_LEN,
            "resampler_depth": 1,
            "resampler_n_heads": 2,
            "resampler_head_dim": 16,
            "num_key_value_heads": 1,
        },
        text_config={
            "model_type": "mistral",
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 2048,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
    )
    torch.manual_seed(seed)
    model = Idefics2ForConditionalGeneration(config).eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = [end_of_utterance, tokenizer.eos_token_id]
    # Aspect ratio kept (longest edge 16, shortest >= 8), so batches of images need pixel padding.
    image_processor = Idefics2ImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE // 2, "longest_edge": IMAGE_SIZE},
        do_image_splitting=False,
    )
    processor = Idefics2Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_len=IMAGE_SEQ_LEN,
        chat_template=CHAT_TEMPLATE,
    )
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir
