"""Real-size random-weight checkpoints with published geometries, built in code (no download).

- ``smolvlm-256m``: SmolVLM-256M-Instruct (Idefics3 architecture): Llama text model, hidden 576,
  30 layers, 9 heads (3 KV), MLP 1536, vocab 49,280; SigLIP vision 768 wide, 12 layers, patch 16,
  512 px tiles, pixel-shuffle scale factor 4 (64 image tokens per tile).
- ``qwen2-vl-2b``: Qwen2-VL-2B-Instruct: text hidden 1536, 28 layers, 12 heads (2 KV), MLP 8960,
  vocab 151,936; vision 32 layers, 1280 wide, 16 heads, patch 14, 2x2 spatial merge.

Weights are random (the cost of a forward pass does not depend on their values); the tokenizer is
dpmtv's tiny character tokenizer (its ids are a subset of the real vocabulary; the embedding
matrix has the real vocabulary size). ``image_px`` sets the processor's image size: the published
512 px tile for SmolVLM, or smaller for short CPU runs (stated in every result).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

SMOLVLM_256M_TEXT = {
    "model_type": "llama", "vocab_size": 49280, "hidden_size": 576, "intermediate_size": 1536,
    "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
    "max_position_embeddings": 8192, "rope_theta": 100000.0, "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
}  # fmt: skip
SMOLVLM_256M_VISION = {
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
    "num_attention_heads": 12, "image_size": 512, "patch_size": 16,
}  # fmt: skip
QWEN2_VL_2B_TEXT = {
    "vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
    "num_attention_heads": 12, "num_key_value_heads": 2, "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "bos_token_id": None,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
}  # fmt: skip
QWEN2_VL_2B_VISION = {
    "depth": 32, "embed_dim": 1280, "hidden_size": 1536, "num_heads": 16, "mlp_ratio": 4,
    "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_chans": 3,
}  # fmt: skip

BUILDERS = {}


def builder(name):
    def register(function):
        BUILDERS[name] = function
        return function

    return register


@builder("smolvlm-256m")
def build_smolvlm_256m(out_dir: Path, *, image_px: int = 512, seed: int = 0) -> Path:
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration, SmolVLMImageProcessorPil

    from dpmtv.testing import smolvlm
    from dpmtv.testing._tokenizer import char_tokenizer
    from dpmtv.testing.idefics3 import IMAGE_TOKENS, ROW_COL_TOKENS

    scale_factor, patch = 4, SMOLVLM_256M_VISION["patch_size"]
    tokenizer = char_tokenizer(
        special_tokens=["<|im_start|>", *IMAGE_TOKENS, *ROW_COL_TOKENS],
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )
    text = dict(SMOLVLM_256M_TEXT, pad_token_id=tokenizer.pad_token_id)
    text.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    config = SmolVLMConfig(
        vision_config=SMOLVLM_256M_VISION,
        text_config=text,
        scale_factor=scale_factor,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = SmolVLMForConditionalGeneration(config).eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    SmolVLMImageProcessorPil(
        size={"longest_edge": image_px}, max_image_size={"longest_edge": image_px}, do_image_splitting=False
    ).save_pretrained(out_dir)
    image_seq_len = (image_px // patch) ** 2 // scale_factor**2
    _write_json(
        out_dir / "processor_config.json",
        {"image_seq_len": image_seq_len, "processor_class": "SmolVLMProcessor"},
    )
    _write_json(out_dir / "chat_template.json", {"chat_template": smolvlm.CHAT_TEMPLATE})
    return out_dir


@builder("qwen2-vl-2b")
def build_qwen2_vl_2b(out_dir: Path, *, image_px: int = 224, seed: int = 0) -> Path:
    """Built in bfloat16 (4.4 GB instead of 8.8 GB in RAM and on disk). Qwen2-VL's processor
    resizes to multiples of 28 px; ``image_px`` squared is both its min and max area."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessorPil

    from dpmtv.models.families.qwen2_vl import ImageOnlyQwen2VLProcessor
    from dpmtv.testing import qwen2_vl

    tokenizer = qwen2_vl.qwen_tokenizer()
    text = dict(QWEN2_VL_2B_TEXT, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    config = Qwen2VLConfig(
        text_config=text, vision_config=QWEN2_VL_2B_VISION, **qwen2_vl.qwen_token_ids(tokenizer)
    )
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = Qwen2VLForConditionalGeneration(config).eval()
    finally:
        torch.set_default_dtype(default)
    image_processor = Qwen2VLImageProcessorPil(
        size={"shortest_edge": image_px * image_px, "longest_edge": image_px * image_px},
        patch_size=14, merge_size=2, temporal_patch_size=2,
    )  # fmt: skip
    processor = ImageOnlyQwen2VLProcessor(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=qwen2_vl.CHAT_TEMPLATE
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    return qwen2_vl.save(model, processor, tokenizer, out_dir)


def _write_json(path: Path, content: dict) -> None:
    path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
