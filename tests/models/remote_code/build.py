"""Build the tiny remote-code checkpoints: config with ``auto_map``, the modeling files copied
into the folder (as on the hub), safetensors weights and a tokenizer; loadable offline only with
``trust_remote_code=True``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from dpmtv.testing._tokenizer import char_tokenizer
from tests.models.remote_code.configuration_qwen_style import QWenStyleConfig
from tests.models.remote_code.configuration_vila_style import VilaStyleConfig
from tests.models.remote_code.modeling_qwen_style import QWenStyleLMHeadModel
from tests.models.remote_code.modeling_vila_style import LlavaLlamaModel

HERE = Path(__file__).parent
IMAGE_SIZE, PATCH_SIZE = 16, 8
IMAGE_TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH_SIZE) ** 2

QWEN_SPEC = {
    "name": "qwen-vl-style",
    "layer_path": "transformer.h.{i}.attn.c_proj",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "head_dim": "kv_channels",
    "prompt": {
        "prefix": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n",
        "demonstration": (
            "<|im_start|>user\n{images}{question}<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>\n"
        ),
        "query": "<|im_start|>user\n{images}{question}<|im_end|>\n<|im_start|>assistant\n",
        "image": "Picture {n}: <img>{pad}</img>\n",
    },
    "images": {
        "kind": "pixel_values",
        "input_name": "images",
        "size": IMAGE_SIZE,
        "mean": [0.48145466, 0.4578275, 0.40821073],
        "std": [0.26862954, 0.26130258, 0.27577711],
        "pad_token": "<imgpad>",
        "pad_count": IMAGE_TOKENS_PER_IMAGE,
    },
}

VILA_SPEC = {
    "name": "vila-style",
    "layer_path": "llm.model.layers.{i}.self_attn.o_proj",
    "num_layers": "llm_cfg.num_hidden_layers",
    "num_heads": "llm_cfg.num_attention_heads",
    "head_dim": None,
    "hidden_size": "llm_cfg.hidden_size",
    "prompt": {
        "prefix": "<s>A chat between a curious human and an artificial intelligence assistant. ",
        "demonstration": "USER: {images}{question} ASSISTANT: {answer}</s>",
        "query": "USER: {images}{question} ASSISTANT:",
        "image": "{pad}\n",
    },
    "images": {
        "kind": "pixel_values",
        "input_name": "images",
        "size": IMAGE_SIZE,
        "pad_token": "<image>",
        "pad_count": IMAGE_TOKENS_PER_IMAGE,
    },
}


def build_qwen_style(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<|im_start|>", "<|im_end|>", "<img>", "</img>", "<imgpad>"],
        bos_token=None,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    config = QWenStyleConfig(
        vocab_size=len(tokenizer),
        visual={"image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE},
        image_pad_id=tokenizer.convert_tokens_to_ids("<imgpad>"),
    )
    return _save(QWenStyleLMHeadModel, config, tokenizer, "qwen_style", out_dir, seed)


def build_vila_style(out_dir: Path, *, seed: int = 0) -> Path:
    tokenizer = char_tokenizer(
        special_tokens=["<image>"], bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    llm_cfg = {
        "vocab_size": len(tokenizer),
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "pad_token_id": tokenizer.pad_token_id,
    }
    config = VilaStyleConfig(
        llm_cfg=llm_cfg,
        vision={"image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE, "hidden_size": 16},
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
    )
    return _save(LlavaLlamaModel, config, tokenizer, "vila_style", out_dir, seed)


def _save(model_cls, config, tokenizer, stem: str, out_dir: Path, seed: int) -> Path:
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    config_file = out_dir / "config.json"
    saved = json.loads(config_file.read_text())
    saved["auto_map"] = {
        "AutoConfig": f"configuration_{stem}.{type(config).__name__}",
        "AutoModelForCausalLM": f"modeling_{stem}.{model_cls.__name__}",
    }
    config_file.write_text(json.dumps(saved, indent=2))
    for name in (f"configuration_{stem}.py", f"modeling_{stem}.py"):
        shutil.copy(HERE / name, out_dir / name)
    return out_dir


def write_spec(spec: dict, path: Path) -> Path:
    path.write_text(json.dumps(spec, indent=2))
    return path
