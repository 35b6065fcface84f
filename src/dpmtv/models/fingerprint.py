"""Model identity: what an artifact records about the model it was built for."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpmtv.models.lora import CONFIG_KEY as LORA_CONFIG_KEY

if TYPE_CHECKING:  # torch loads on first use: reading an artifact's identity fields needs none
    from dpmtv.models.base import ModelAdapter

# Keys that change with how a model is loaded or saved, not with what it computes.
_VOLATILE_CONFIG_KEYS = {
    "_name_or_path",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "_attn_implementation",
    "_attn_implementation_autoset",
    "attn_implementation",
    "use_cache",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "_commit_hash",
}


def config_sha256(config: Any) -> str:
    return _sha256_json(_strip_volatile(config.to_dict()))


def attention_weights_sha256(adapter: ModelAdapter) -> str:
    """SHA-256 of every layer's o_proj weight, rounded to bfloat16.

    Rounding makes a float32 and a bfloat16 load of the same checkpoint agree; a float16 load
    may differ (double rounding), which the mismatch message points out. A quantised weight
    (a tensor subclass such as torchao's ``Int8Tensor``) is hashed as it is stored: each inner
    tensor (the integer data, the scales) by name, dtype, shape and bytes, so the fingerprint
    covers the quantised values themselves and differs from the unquantised checkpoint's.
    """
    digest = hashlib.sha256()
    for o_proj in adapter.o_projs:
        _hash_weight(digest, _weight_on_cpu(o_proj))
    return digest.hexdigest()


def _hash_weight(digest, weight) -> None:
    import torch
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if not is_traceable_wrapper_subclass(weight):
        digest.update(weight.to(dtype=torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes())
        return
    digest.update(type(weight).__name__.encode())
    names, _ = weight.__tensor_flatten__()
    for name in sorted(names):
        inner = getattr(weight, name).detach().to("cpu").contiguous()
        digest.update(f"{name}:{inner.dtype}:{tuple(inner.shape)}".encode())
        digest.update(inner.reshape(-1).view(torch.uint8).numpy().tobytes())


def _weight_on_cpu(linear):
    """The layer's weight on the CPU, also when a device map offloaded it (accelerate keeps it on
    disk or in CPU memory and leaves a meta tensor in the module; its hook loads it)."""
    import torch

    if linear.weight.device.type != "meta":
        return linear.weight.detach().to("cpu")
    from accelerate.utils import align_module_device

    with align_module_device(linear, torch.device("cpu")):
        return linear.weight.detach().to("cpu").clone()


def model_identity(adapter: ModelAdapter, name_or_path: str) -> dict[str, Any]:
    config = adapter.model.config
    geometry = adapter.geometry
    return {
        "architecture": type(adapter.model).__name__,
        "model_type": config.model_type,
        "family": adapter.family,
        "name_or_path": name_or_path,
        "hub_id": hub_id(name_or_path),
        "revision": getattr(config, "_commit_hash", None),
        "num_layers": geometry.num_layers,
        "num_heads": geometry.num_heads,
        "head_dim": geometry.head_dim,
        "config_sha256": config_sha256(config),
        "attention_weights_sha256": attention_weights_sha256(adapter),
        # informative; both are inside config_sha256, which is checked
        "quantization": _quantization(config),
        "lora_adapter": getattr(config, LORA_CONFIG_KEY, None),
    }


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # org/name, as the hub spells its repositories


def hub_id(name_or_path: str) -> str | None:
    """The hub repository the checkpoint comes from, when it records one: ``name_or_path`` itself
    when it is an ``org/name`` id and no local path, else the ``_name_or_path`` that the local
    folder's ``config.json`` records, when that is such an id; None otherwise (a local checkpoint
    of unknown origin), so a model card never names a local folder as its hub base model."""
    if _looks_like_hub_id(name_or_path):
        return name_or_path
    try:
        recorded = json.loads((Path(name_or_path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    named = recorded.get("_name_or_path") if isinstance(recorded, dict) else None
    return named if isinstance(named, str) and _looks_like_hub_id(named) else None


def _looks_like_hub_id(name: str) -> bool:
    return bool(_HUB_ID.fullmatch(name)) and not Path(name).exists()


def _quantization(config: Any) -> str | None:
    """The quantisation method and type of a quantised checkpoint (e.g. ``torchao
    Int8WeightOnlyConfig``), else None."""
    quantization = getattr(config, "quantization_config", None)
    if quantization is None:
        return None
    fields = quantization if isinstance(quantization, dict) else quantization.to_dict()
    method = str(getattr(fields.get("quant_method"), "value", fields.get("quant_method")))
    kind = fields.get("quant_type")
    if isinstance(kind, dict):  # torchao: {"default": {"_type": "Int8WeightOnlyConfig", ...}}
        kind = ",".join(
            sorted({str(v.get("_type", v)) if isinstance(v, dict) else str(v) for v in kind.values()})
        )
    return f"{method} {kind}" if kind else method


# Fields that must match for a vector to be applied; name/path and revision are informative.
IDENTITY_FIELDS_CHECKED = (
    "model_type",
    "num_layers",
    "num_heads",
    "head_dim",
    "config_sha256",
    "attention_weights_sha256",
)


def _strip_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_volatile(v) for k, v in value.items() if k not in _VOLATILE_CONFIG_KEYS}
    if isinstance(value, list):
        return [_strip_volatile(v) for v in value]
    return value


def _sha256_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()
