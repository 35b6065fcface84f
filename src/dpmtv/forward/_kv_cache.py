"""Where a model's KV cache goes in and comes out, across transformers versions.

transformers >= 5.2x renamed ``past_key_values`` to ``cache`` (both the forward argument and the
output attribute); the decoding loops of the membership attack and the head search read both.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

_CACHE_NAMES = ("cache", "past_key_values")  # new name first


def output_cache(output: Any) -> Any:
    """The KV cache a forward call returned (None if it returned none)."""
    for name in _CACHE_NAMES:
        cache = getattr(output, name, None)
        if cache is not None:
            return cache
    return None


def cache_argument(model: torch.nn.Module) -> str:
    """The name under which ``model.forward`` takes a KV cache."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
