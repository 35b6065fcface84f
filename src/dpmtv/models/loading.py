"""Load a VLM checkpoint (local folder or hub id) with its processor and adapter."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dpmtv.errors import ModelError
from dpmtv.models.base import HeadGeometry, ModelAdapter
from dpmtv.models.registry import adapter_for

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


DEFAULTS_FILE = "dpmtv_defaults.json"  # optional, public: a checkpoint's shipped dpmtv settings


@dataclass
class LoadedModel:
    model: nn.Module
    processor: Any
    adapter: ModelAdapter
    name_or_path: str
    defaults: dict = field(default_factory=dict)  # the checkpoint's dpmtv_defaults.json, if any

    @property
    def patch_mode(self) -> str:
        """How to patch at inference unless told otherwise: the checkpoint's recommendation, else
        MTV's every-call mode."""
        return self.defaults.get("patch_mode", "every-call")


def parse_dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise ModelError(f"unknown dtype '{name}'; use one of {', '.join(_DTYPES)}") from None


def resolve_model_path(name_or_path: str | Path) -> str:
    """``embedded`` names the packaged default model; anything else is a folder or hub id."""
    if str(name_or_path) == "embedded":
        from dpmtv.models.embedded import embedded_checkpoint_path

        return str(embedded_checkpoint_path())
    return str(name_or_path)


def read_head_geometry(name_or_path: str | Path) -> HeadGeometry:
    """The decoder's head geometry from the checkpoint's config alone (no weights loaded)."""
    from transformers import AutoConfig

    path = resolve_model_path(name_or_path)
    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read the model config at '{path}': {exc}") from exc
    return adapter_for(config.model_type).head_geometry(config)


def load_model(name_or_path: str | Path, *, dtype: str = "float32", device: str = "cpu") -> LoadedModel:
    """Load through ``AutoModelForImageTextToText`` and the family adapter's processor."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    path = resolve_model_path(name_or_path)
    if not Path(path).exists() and "/" not in path:
        raise ModelError(f"model '{path}' is neither a local folder nor a hub id (owner/name)")
    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read the model config at '{path}': {exc}") from exc
    adapter_cls = adapter_for(config.model_type)
    processor = adapter_cls.load_processor(path)
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=parse_dtype(dtype))
    model = model.to(device).eval()
    return LoadedModel(model, processor, adapter_cls(model, processor), path, _read_defaults(path))


def _read_defaults(path: str) -> dict:
    file = Path(path) / DEFAULTS_FILE
    return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
