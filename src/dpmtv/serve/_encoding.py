"""Each request encoded once, when it is admitted; a batch is its rows' tensors joined.

The chat template is rendered and the processor (tokenizer and image processor) runs for one row
in the server's prepare pool, off the event loop and off the generation thread, so a batch
starts as soon as the previous one ends and never re-tokenises what its rows already hold.

Joining is what the processor's own batched call does with left padding: tensors shaped like
``input_ids`` (the attention mask, token-type ids) are left-padded to the longest row — with the
pad token for ``input_ids`` and 0 elsewhere — and every other tensor (pixel values, image sizes,
image grids) is concatenated along its first dimension, in row order. A family whose batched
processor does something else (pads its image patches to a common count) gives tensors that do
not concatenate: :func:`join_rows` returns None and the batch is encoded whole instead
(``tests/serve/test_encoding.py`` checks equality with the batched call).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import torch

from dpmtv.models.base import ModelAdapter
from dpmtv.prompts import Example, zero_shot

RowInputs = Mapping[str, torch.Tensor]  # one row's processor output, batch dimension 1


def encode_rows(adapter: ModelAdapter, examples: Sequence[Example], lock: threading.Lock) -> dict:
    """The processor's batched, left-padded inputs for ``examples`` (the tokenizer is not safe
    to call from two threads at once: its padding state is mutable, hence the lock)."""
    with lock:
        return adapter.encode([zero_shot(example) for example in examples])


def join_rows(rows: Sequence[RowInputs], *, pad_token_id: int | None) -> dict[str, torch.Tensor] | None:
    """The batch of ``rows`` as the batched processor call would give it, or None where the
    rows' tensors do not join (different keys, or shapes that differ beyond the first dimension)."""
    keys = set(rows[0])
    if "input_ids" not in keys or any(set(row) != keys for row in rows):
        return None
    length = max(row["input_ids"].shape[1] for row in rows)
    joined = {}
    for key in rows[0]:
        tensors = [row[key] for row in rows]
        if all(t.shape == row["input_ids"].shape for t, row in zip(tensors, rows, strict=True)):
            fill = pad_token_id if key == "input_ids" and pad_token_id is not None else 0
            tensors = [_left_pad(t, length, fill) for t in tensors]
        elif any(t.dim() == 0 or t.shape[1:] != tensors[0].shape[1:] for t in tensors):
            return None
        joined[key] = torch.cat(tensors, dim=0)
    return joined


def _left_pad(tensor: torch.Tensor, length: int, fill: int) -> torch.Tensor:
    missing = length - tensor.shape[1]
    if missing == 0:
        return tensor
    pad = torch.full((tensor.shape[0], missing), fill, dtype=tensor.dtype, device=tensor.device)
    return torch.cat([pad, tensor], dim=1)
