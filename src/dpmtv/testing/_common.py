"""Pieces shared by the tiny builders of the newer families: really tiny configs (hidden 32,
2 layers, 4 heads), a square random-image-friendly processor size, and the save step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

HIDDEN, HEADS, LAYERS = 32, 4, 2


def text_config(tokenizer: Any, model_type: str, **overrides: Any) -> dict:
    """A two-layer, four-head decoder config of ``model_type`` for ``tokenizer``'s vocabulary."""
    config = {
        "model_type": model_type,
        "vocab_size": len(tokenizer),
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    config.update(overrides)
    return config


def vision_config(model_type: str, image_size: int, patch_size: int, **overrides: Any) -> dict:
    config = {
        "model_type": model_type,
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "image_size": image_size,
        "patch_size": patch_size,
    }
    config.update(overrides)
    return config


def save(
    model_cls: type,
    config: Any,
    processor: Any,
    out_dir: Path,
    *,
    seed: int,
    eos_token_ids: list[int] | None = None,
) -> Path:
    """Build the random-weight model, then save model and processor with ``save_pretrained``."""
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    tokenizer = processor.tokenizer
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = eos_token_ids or tokenizer.eos_token_id
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir


def save_model_only(model: Any, tokenizer: Any, out_dir: Path) -> Path:
    """For families whose processor cannot be built here: model and tokenizer only."""
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
