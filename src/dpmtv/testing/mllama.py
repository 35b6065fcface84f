"""Tiny random-weight Llama 3.2 Vision (Mllama): tiled vision encoder read through gated
cross-attention layers in a Llama text model, Llama 3 chat format.

Text layer 0 is self-attention, layer 1 cross-attention (``cross_attn.o_proj``, also
``num_heads * head_dim`` wide, so its heads are read and patched like the others). One 16 px
tile per image (``max_image_tiles`` 1) of 8 px patches.
"""

from __future__ import annotations

from pathlib import Path

from transformers import (
    MllamaConfig,
    MllamaForConditionalGeneration,
    MllamaImageProcessorPil,
    MllamaProcessor,
)

from dpmtv.testing._common import HIDDEN, save, text_config
from dpmtv.testing._tokenizer import char_tokenizer

IMAGE_SIZE, PATCH_SIZE = 16, 8
SPECIAL_TOKENS = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|image|>", "<|python_tag|>"]

# meta-llama/Llama-3.2-11B-Vision-Instruct's template, shortened to the parts dpmtv's prompts use.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<|image|>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{{ '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=SPECIAL_TOKENS,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|finetune_right_pad_id|>",
    )
    vision = {
        "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN, "num_hidden_layers": 2,
        "num_global_layers": 1, "attention_heads": 2, "image_size": IMAGE_SIZE,
        "patch_size": PATCH_SIZE, "max_num_tiles": 1, "intermediate_layers_indices": [0],
        "vision_output_dim": 2 * HIDDEN, "supported_aspect_ratios": [[1, 1]],
    }  # fmt: skip
    config = MllamaConfig(
        vision_config=vision,
        text_config=text_config(tokenizer, "mllama_text_model", cross_attention_layers=[1]),
        image_token_index=tokenizer.convert_tokens_to_ids("<|image|>"),
    )
    image_processor = MllamaImageProcessorPil(
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, max_image_tiles=1
    )
    processor = MllamaProcessor(image_processor, tokenizer, chat_template=CHAT_TEMPLATE)
    eos = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|eot_id|>")]
    return save(MllamaForConditionalGeneration, config, processor, out_dir, seed=seed, eos_token_ids=eos)
