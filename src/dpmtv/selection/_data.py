"""Public selection data: zero-shot queries with their first answer token, and the public mean
activation of every head (model plumbing, public data only)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from dpmtv.data.prompts import DEFAULT_QUERY_QUESTION, Example, Prompt, chunk_prompt, zero_shot
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError, RecordError
from dpmtv.forward.extract import mean_selected_heads
from dpmtv.heads import HeadSet
from dpmtv.models.base import HeadGeometry, ModelAdapter
from dpmtv.models.loading import LoadedModel


@dataclass(frozen=True)
class Query:
    """A zero-shot prompt and the token id its answer starts with."""

    prompt: Prompt
    target: int


@dataclass(frozen=True)
class PublicTask:
    """What every public search needs: ``means`` (L, H, d) float32 — the mean last-token output of
    every head over public many-shot prompts — and disjoint train / dev query sets."""

    means: torch.Tensor
    train: tuple[Query, ...]
    dev: tuple[Query, ...]
    shots: int
    num_chunks: int


def all_heads(geometry: HeadGeometry) -> HeadSet:
    return HeadSet.of(
        (layer, head) for layer in range(geometry.num_layers) for head in range(geometry.num_heads)
    )


def prepare_public_task(
    loaded: LoadedModel,
    records: Sequence[Record],
    *,
    shots: int,
    num_dev: int | None = None,
    seed: int = 0,
    query: str = "record",
    query_question: str = DEFAULT_QUERY_QUESTION,
    batch_size: int = 4,
) -> PublicTask:
    """Shuffle the PUBLIC records (seeded), hold out ``num_dev`` (default 20 %, at least 1) as dev
    queries, and use the rest both as train queries and, in chunks of ``shots``, as the many-shot
    prompts (the build's own format, :func:`dpmtv.data.prompts.chunk_prompt`) whose mean is patched."""
    if shots < 1:
        raise ParameterError(f"shots must be >= 1, got {shots}")
    order = np.random.default_rng(seed).permutation(len(records))
    shuffled = [records[int(i)] for i in order]
    num_dev = max(1, len(records) // 5) if num_dev is None else num_dev
    if not 1 <= num_dev <= len(records) - 2:
        raise RecordError(
            f"{len(records)} public records leave no room for {num_dev} dev queries and >= 2 train "
            "records; add public records or lower num_dev"
        )
    train, dev = shuffled[num_dev:], shuffled[:num_dev]
    size = min(shots, len(train))
    prompts = [
        chunk_prompt(train[start : start + size], query=query, query_question=query_question)
        for start in range(0, len(train) - size + 1, size)
    ]
    adapter = loaded.adapter
    return PublicTask(
        means=public_means(adapter, prompts, batch_size=batch_size),
        train=tuple(make_queries(adapter, train)),
        dev=tuple(make_queries(adapter, dev)),
        shots=size,
        num_chunks=len(prompts),
    )


def public_means(adapter: ModelAdapter, prompts: Sequence[Prompt], *, batch_size: int) -> torch.Tensor:
    """Mean last-token output of every head over ``prompts``: (L, H, d) float32."""
    geometry = adapter.geometry
    per_layer = mean_selected_heads(adapter, prompts, all_heads(geometry), batch_size=batch_size)
    stacked = np.stack([per_layer[layer] for layer in range(geometry.num_layers)])  # (L, H*d)
    return torch.from_numpy(stacked.reshape(geometry.num_layers, geometry.num_heads, -1)).float()


def make_queries(adapter: ModelAdapter, records: Sequence[Record]) -> list[Query]:
    queries = []
    for record in records:
        prompt = zero_shot(Example(record.load_images(), record.question))
        queries.append(Query(prompt, first_answer_token(adapter, prompt, record.answer, where=record.where)))
    return queries


def first_answer_token(adapter: ModelAdapter, prompt: Prompt, answer: str, *, where: str = "") -> int:
    """The first non-whitespace token the chat template puts after the generation prompt.

    Renders the conversation with the assistant's answer and without it; the answer's tokens are
    what follows the common prefix (so BPE merges such as ``" Paris"`` come out as the model would
    generate them). Whitespace-only tokens are skipped: answers are compared stripped.
    """
    tokenizer = adapter.tokenizer
    prefix = tokenizer(adapter.render_text(prompt), add_special_tokens=False)["input_ids"]
    full = tokenizer(adapter.render_with_answer(prompt, answer), add_special_tokens=False)["input_ids"]
    start = next((i for i, (a, b) in enumerate(zip(prefix, full)) if a != b), min(len(prefix), len(full)))
    for token in full[start:]:
        if tokenizer.decode([token]).strip() and token not in tokenizer.all_special_ids:
            return int(token)
    raise RecordError(f"{where}: the answer {answer!r} has no non-whitespace token")
