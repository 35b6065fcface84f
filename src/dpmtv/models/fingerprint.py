"""Model identity: what an artifact records about the model it was built for."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

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
    may differ (double rounding), which the mismatch message points out.
    """
    import torch

    digest = hashlib.sha256()
    for o_proj in adapter.o_projs:
        weight = _weight_on_cpu(o_proj).to(dtype=torch.bfloat16).contiguous()
        digest.update(weight.view(torch.int16).numpy().tobytes())
    return digest.hexdigest()


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
        "revision": getattr(config, "_commit_hash", None),
        "num_layers": geometry.num_layers,
        "num_heads": geometry.num_heads,
        "head_dim": geometry.head_dim,
        "config_sha256": config_sha256(config),
        "attention_weights_sha256": attention_weights_sha256(adapter),
    }


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
