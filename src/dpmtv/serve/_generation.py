"""Greedy generation for one batch of requests, each row patched with its own vector.

Rows for different vectors share one left-padded batch: per layer, every row gets its vector's
values where its mask is 1 and keeps its own activation elsewhere
(:func:`dpmtv.forward.hooks.blend_heads_per_row`), in the model's patch mode. Zero-shot rows have an
all-zero mask. A batch without any vector runs with no hooks at all.

The batch is encoded in one processor call (one call for 32 rows costs a quarter of 32 calls of
one row each on the embedded model). Rows stop on their own ``max_new_tokens``, an end token, or
when their client has gone (the row's ``cancelled`` event; a stopping criterion per row), and
``on_text`` receives a streaming row's new text as soon as its token is decoded (rows that do
not stream decode once, at the end).
Generation ends when every row has stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from dpmtv.data.prompts import Example, zero_shot
from dpmtv.forward.hooks import blend_heads_per_row
from dpmtv.inference import greedy_new_tokens
from dpmtv.serve._served import ServedModel, ServedVector


@dataclass(frozen=True)
class RowRequest:
    example: Example
    vector: ServedVector | None  # None: zero-shot
    max_new_tokens: int
    cancelled: threading.Event  # set when the client disconnects: the row stops at its next token
    stream: bool = False  # on_text receives this row's text as it decodes


@dataclass(frozen=True)
class RowResult:
    text: str
    finish_reason: str  # "stop" (end token), "length" (max_new_tokens) or "cancelled" (client gone)
    prompt_tokens: int
    completion_tokens: int


OnText = Callable[[int, str], None]  # (row, new text)
OnFirstToken = Callable[[int], None]  # (row)


def generate_rows(
    served: ServedModel,
    rows: Sequence[RowRequest],
    on_text: OnText | None = None,
    on_first_token: OnFirstToken | None = None,
) -> list[RowResult]:
    adapter = served.loaded.adapter
    inputs = adapter.encode([zero_shot(row.example) for row in rows])
    prompt_tokens = inputs["attention_mask"].sum(dim=1).tolist()
    tracker = _RowTracker(
        adapter.tokenizer,
        [r.max_new_tokens for r in rows],
        [r.cancelled for r in rows],
        adapter.eos_token_ids,
        [r.stream for r in rows],
        on_text,
        on_first_token,
    )
    with _row_patches(served, rows):
        greedy_new_tokens(
            served.loaded.model,
            inputs,
            pad_token_id=adapter.tokenizer.pad_token_id,
            max_new_tokens=max(row.max_new_tokens for row in rows),
            stopping_criteria=StoppingCriteriaList([tracker]),
        )
    return [
        RowResult(
            tracker.text(row), tracker.finish_reasons[row], int(prompt_tokens[row]), len(tracker.tokens[row])
        )
        for row in range(len(rows))
    ]


def _row_patches(served: ServedModel, rows: Sequence[RowRequest]):
    vectors = [row.vector for row in rows]
    if all(vector is None for vector in vectors):
        return nullcontext()
    adapter = served.loaded.adapter
    geometry = adapter.geometry
    device = adapter.input_device
    layers = sorted({layer for vector in vectors if vector is not None for layer in vector.values})
    zeros = torch.zeros(geometry.num_heads, geometry.head_dim, device=device)
    values = {
        layer: torch.stack([v.values.get(layer, zeros) if v is not None else zeros for v in vectors])
        for layer in layers
    }  # layer → (B, H, d)
    no_heads = torch.zeros(geometry.num_layers, geometry.num_heads, device=device)
    masks = torch.stack([v.mask if v is not None else no_heads for v in vectors])  # (B, L, H)
    return blend_heads_per_row(adapter, values, masks, mode=served.patch_mode)


class _RowTracker(StoppingCriteria):
    """Collects each row's new tokens, streams their text, and stops rows independently."""

    def __init__(
        self,
        tokenizer,
        limits: list[int],
        cancelled: list[threading.Event],
        eos_ids: list[int],
        streaming: list[bool],
        on_text: OnText | None,
        on_first_token: OnFirstToken | None,
    ):
        self.tokenizer = tokenizer
        self.limits = limits
        self.streaming = streaming
        self.cancelled = cancelled
        self.eos_ids = set(eos_ids)
        self.on_text = on_text
        self.on_first_token = on_first_token
        self.tokens: list[list[int]] = [[] for _ in limits]
        self.finish_reasons: list[str] = ["length" for _ in limits]
        self.done = [False for _ in limits]
        self.sent: list[str] = ["" for _ in limits]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        newest = input_ids[:, -1].tolist()
        for row, token in enumerate(newest):
            if self.done[row]:
                continue
            if self.cancelled[row].is_set():
                self.done[row], self.finish_reasons[row] = True, "cancelled"
                continue
            if token in self.eos_ids:
                self.done[row], self.finish_reasons[row] = True, "stop"
                continue
            self.tokens[row].append(token)
            if len(self.tokens[row]) == 1 and self.on_first_token is not None:
                self.on_first_token(row)
            self._stream(row)
            if len(self.tokens[row]) >= self.limits[row]:
                self.done[row] = True
        return torch.tensor(self.done, dtype=torch.bool, device=input_ids.device)

    def text(self, row: int) -> str:
        return self.tokenizer.decode(self.tokens[row], skip_special_tokens=True).strip()

    def _stream(self, row: int) -> None:
        if self.on_text is None or not self.streaming[row]:
            return
        text = self.tokenizer.decode(self.tokens[row], skip_special_tokens=True).lstrip()
        # Byte-level tokenizers can produce a partial character; wait until the text extends.
        if (
            text.startswith(self.sent[row])
            and len(text) > len(self.sent[row])
            and not text.endswith("\ufffd")
        ):
            self.on_text(row, text[len(self.sent[row]) :])
            self.sent[row] = text
