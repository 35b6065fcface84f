"""Batched extraction of the selected heads' last-token outputs (model plumbing, no privacy)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from dpmtv.errors import ParameterError
from dpmtv.heads import HeadSet
from dpmtv.hooks import capture_last_token
from dpmtv.models.base import ModelAdapter
from dpmtv.prompts import Prompt


def extract_selected_heads(
    adapter: ModelAdapter, prompts: Sequence[Prompt], heads: HeadSet
) -> dict[int, np.ndarray]:
    """One forward pass over ``prompts``; per layer the selected heads, flattened: (B, k_l*d)."""
    layers = heads.layers
    with torch.no_grad(), capture_last_token(adapter, layers) as capture:
        adapter.model(**adapter.encode(prompts))
    out: dict[int, np.ndarray] = {}
    for layer in layers:
        selected = capture.activations[layer][:, heads.heads_in(layer), :]  # (B, k_l, d)
        out[layer] = selected.reshape(selected.shape[0], -1).double().numpy()
    return out


def iter_batches(prompts: Sequence[Prompt], batch_size: int) -> Iterator[Sequence[Prompt]]:
    if batch_size < 1:
        raise ParameterError(f"batch_size must be >= 1, got {batch_size}")
    for start in range(0, len(prompts), batch_size):
        yield prompts[start : start + batch_size]


def mean_selected_heads(
    adapter: ModelAdapter, prompts: Sequence[Prompt], heads: HeadSet, *, batch_size: int
) -> dict[int, np.ndarray]:
    """Plain mean over prompts — for PUBLIC data only (references, non-private baselines)."""
    sums: dict[int, np.ndarray] = {}
    for batch in iter_batches(prompts, batch_size):
        for layer, values in extract_selected_heads(adapter, batch, heads).items():
            sums[layer] = sums.get(layer, 0) + values.sum(axis=0)
    return {layer: total / len(prompts) for layer, total in sums.items()}
