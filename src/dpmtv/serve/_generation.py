"""Generation for one batch of requests, each row patched with its own vector.

Rows for different vectors share one left-padded batch: per layer, every row gets its vector's
values where its mask is 1 and keeps its own activation elsewhere
(:func:`dpmtv.forward.hooks.blend_heads_per_row`), in the model's patch mode. Zero-shot rows have an
all-zero mask. A batch without any vector runs with no hooks at all.

The batch is encoded in one processor call (one call for 32 rows costs a quarter of 32 calls of
one row each on the embedded model). Greedy and sampled rows share the batch: each row picks its
token its own way (:mod:`dpmtv.serve._decoding`) and stops on its own
(:mod:`dpmtv.serve._tracker`: its ``max_new_tokens``, an end token, a stop string, or its client
gone). Generation ends when every row has stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
from transformers import LogitsProcessorList, StoppingCriteriaList

from dpmtv.data.prompts import Prompt
from dpmtv.forward.hooks import blend_heads_per_row
from dpmtv.inference import greedy_new_tokens
from dpmtv.serve._decoding import GREEDY, Decoding, RowDecoding
from dpmtv.serve._served import ServedModel, ServedVector
from dpmtv.serve._tracker import CONTEXT_TOKENS, OnFirstToken, OnText, RowTracker, TokenLogprob

if TYPE_CHECKING:
    from dpmtv.models.base import ModelAdapter


@dataclass(frozen=True)
class RowRequest:
    # a conversation (demonstrations: its earlier turns) ending with the query's turn, through the
    # chat template; or a text prompt (/v1/completions), tokenized as it is
    prompt: Prompt | str
    vector: ServedVector | None  # None: zero-shot
    max_new_tokens: int
    cancelled: threading.Event  # set when the client disconnects: the row stops at its next token
    stream: bool = False  # on_text receives this row's text as it decodes
    decoding: Decoding = GREEDY
    stop: tuple[str, ...] = ()
    echo_logprobs: bool = False  # also the prompt tokens' log-probabilities

    @property
    def image_count(self) -> int:
        return 0 if isinstance(self.prompt, str) else len(self.prompt.all_images())

    @property
    def layout(self) -> tuple[int, bool]:
        """Rows of one batch share it: one processor call needs a uniform image layout, and text
        prompts skip the chat template."""
        return self.image_count, isinstance(self.prompt, str)


@dataclass(frozen=True)
class RowResult:
    text: str
    finish_reason: str  # "stop" (end token or stop string), "length" or "cancelled" (client gone)
    prompt_tokens: int
    completion_tokens: int
    logprobs: tuple[TokenLogprob, ...] = ()  # the answer's tokens, when the row asked for them
    prompt_logprobs: tuple[TokenLogprob, ...] = ()  # with echo_logprobs


def generate_rows(
    served: ServedModel,
    rows: Sequence[RowRequest],
    on_text: OnText | None = None,
    on_first_token: OnFirstToken | None = None,
) -> list[RowResult]:
    adapter = served.loaded.adapter
    inputs = _encode(adapter, rows)
    prompt_tokens = inputs["attention_mask"].sum(dim=1).tolist()
    decoding = RowDecoding([row.decoding for row in rows], prompt_length=inputs["input_ids"].shape[1])
    tracker = RowTracker(
        adapter.tokenizer,
        [
            (r.max_new_tokens, r.cancelled, r.stop, r.decoding, r.stream, isinstance(r.prompt, str))
            for r in rows
        ],
        adapter.eos_token_ids,
        decoding,
        on_text,
        on_first_token,
    )
    with row_patches(served, [row.vector for row in rows]):
        echoed = _prompt_logprobs(served, rows, inputs, tracker)
        greedy_new_tokens(
            served.loaded.model,
            inputs,
            pad_token_id=adapter.tokenizer.pad_token_id,
            max_new_tokens=max(1, *(row.max_new_tokens for row in rows)),
            stopping_criteria=StoppingCriteriaList([tracker]),
            logits_processor=LogitsProcessorList([decoding]),
        )
    generated = tracker.rows
    return [
        RowResult(
            tracker.text(i),
            row.finish_reason,
            int(prompt_tokens[i]),
            len(row.tokens),
            tuple(row.logprobs) if rows[i].decoding.logprobs else (),
            echoed[i],
        )
        for i, row in enumerate(generated)
    ]


def _encode(adapter: ModelAdapter, rows: Sequence[RowRequest]) -> dict[str, torch.Tensor]:
    prompts = [row.prompt for row in rows]
    if not isinstance(prompts[0], str):
        return adapter.encode(cast("list[Prompt]", prompts))  # one layout per batch: all chat
    tokenizer = adapter.tokenizer
    tokenizer.padding_side = "left"
    batch = tokenizer(prompts, padding=True, return_tensors="pt")
    device = adapter.input_device
    return {key: batch[key].to(device) for key in ("input_ids", "attention_mask")}


def _prompt_logprobs(
    served: ServedModel, rows: Sequence[RowRequest], inputs: dict[str, torch.Tensor], tracker: RowTracker
) -> list[tuple[TokenLogprob, ...]]:
    """Each echoing row's prompt tokens scored by one forward pass over the batch (position ``p``
    predicts token ``p + 1``); the first token has no log-probability."""
    if not any(row.echo_logprobs for row in rows):
        return [() for _ in rows]
    with torch.no_grad():
        logits = served.loaded.model(**inputs).logits.float()
    scored: list[tuple[TokenLogprob, ...]] = []
    for index, row in enumerate(rows):
        if not row.echo_logprobs:
            scored.append(())
            continue
        real = inputs["attention_mask"][index].nonzero().flatten().tolist()
        ids = inputs["input_ids"][index].tolist()
        logprobs = torch.log_softmax(logits[index], dim=-1)
        top = row.decoding.top_logprobs
        first = TokenLogprob(tracker.token_text(ids[real[0]]), None, ())
        entries = (
            tracker.entry(logprobs[p - 1], ids[p], top, context=ids[max(real[0], p - CONTEXT_TOKENS) : p])
            for p in real[1:]
        )
        scored.append((first, *entries))
    return scored


def row_patches(served: ServedModel, vectors: Sequence[ServedVector | None]) -> AbstractContextManager[None]:
    """Row ``b`` of the batches run inside gets ``vectors[b]`` (None: no patch), in the model's
    patch mode; the vectors were checked against the model when the server started."""
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
