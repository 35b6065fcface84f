"""Tiny random-weight GLM-4V: GLM-4V vision tower + M-RoPE GLM-4 text model, GLM chat format.

The text model has 2 heads of 16 (GLM-4V reads head_dim as hidden/heads), so the rotary
half-dimension 4 splits over (time, height, width) as [2, 1, 1].

Images are resized to sides that are multiples of patch·merge = 8 px (Qwen2-VL-style smart
resize), a 4×4 patch grid per 16 px image merged 2×2 into 4 ``<|image|>`` tokens.
"""

from __future__ import annotations

from pathlib import Path

from transformers import Glm4vConfig, Glm4vForConditionalGeneration, Glm4vImageProcessorPil

from dpmtv.models.families.glm4v import ImageOnlyGlm4vProcessor
from dpmtv.testing._common import HIDDEN, save, text_config
from dpmtv.testing._tokenizer import char_tokenizer

PATCH_SIZE, MERGE_SIZE, TEMPORAL_PATCH_SIZE = 4, 2, 2
SPECIAL_TOKENS = [
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|video|>",
]

# THUDM/GLM-4.1V-9B-Thinking's template, shortened to the parts dpmtv's prompts use.
CHAT_TEMPLATE = (
    "[gMASK]<sop>{% for message in messages %}{{ '<|' + message['role'] + '|>\n' }}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}"
    "{{ '<|begin_of_image|><|image|><|end_of_image|>' }}{% elif item['type'] == 'text' %}"
    "{{ item['text'] }}{% endif %}{% endfor %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


def build(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=SPECIAL_TOKENS,
        bos_token=None,
        eos_token="<|endoftext|>",
        pad_token="<pad>",
        extra_special_tokens={"image_token": "<|image|>", "video_token": "<|video|>"},
    )
    ids = tokenizer.convert_tokens_to_ids
    rope = {
        "rope_type": "default",
        "rope_theta": 1e4,
        "mrope_section": [2, 1, 1],
        "partial_rotary_factor": 0.5,
    }
    config = Glm4vConfig(
        text_config=text_config(
            tokenizer, "glm4v_text", num_attention_heads=2, num_key_value_heads=1, rope_parameters=rope
        ),
        vision_config=dict(
            depth=2,
            hidden_size=HIDDEN,
            intermediate_size=2 * HIDDEN,
            num_heads=2,
            out_hidden_size=HIDDEN,
            patch_size=PATCH_SIZE,
            spatial_merge_size=MERGE_SIZE,
            temporal_patch_size=TEMPORAL_PATCH_SIZE,
            image_size=16,
        ),
        image_token_id=ids("<|image|>"),
        video_token_id=ids("<|video|>"),
        image_start_token_id=ids("<|begin_of_image|>"),
        image_end_token_id=ids("<|end_of_image|>"),
        video_start_token_id=ids("<|begin_of_video|>"),
        video_end_token_id=ids("<|end_of_video|>"),
    )
    image_processor = Glm4vImageProcessorPil(
        size={"shortest_edge": 16 * 16, "longest_edge": 32 * 32},
        patch_size=PATCH_SIZE,
        merge_size=MERGE_SIZE,
        temporal_patch_size=TEMPORAL_PATCH_SIZE,
    )
    processor = ImageOnlyGlm4vProcessor(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )
    return save(
        Glm4vForConditionalGeneration,
        config,
        processor,
        out_dir,
        seed=seed,
        eos_token_ids=[tokenizer.eos_token_id, ids("<|user|>")],
    )
