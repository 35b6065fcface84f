"""Extraction of the selected heads' last-token outputs (model plumbing, no privacy).

Two ways, for two kinds of data:

- :func:`extract_selected_heads` / :func:`mean_selected_heads`: batched, left-padded to the
  longest prompt of the batch — for PUBLIC prompts only (references, public selection);
- :func:`extract_each_chunk`: one forward pass per prompt, cut to a public token budget — for
  PRIVATE chunks. Batching makes a row's numerics depend on the other rows (their lengths set
  the padding, and the kernels chosen for the batch's shape), so a neighbouring dataset would
  move other chunks' values; a batch of one is a function of that chunk alone
  (``docs/design.md``, "Fixed-shape private forward passes").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch

from dpmtv._prefetch import DEFAULT_PREFETCH, PipelineTimings, prefetched
from dpmtv.errors import ParameterError
from dpmtv.failed_chunks import chunk_or_none, finite_or_none
from dpmtv.heads import HeadSet
from dpmtv.hooks import capture_last_token
from dpmtv.models.base import ModelAdapter
from dpmtv.prompt_budget import encode_one_within
from dpmtv.prompts import Prompt


def extract_selected_heads(
    adapter: ModelAdapter, prompts: Sequence[Prompt], heads: HeadSet
) -> dict[int, np.ndarray]:
    """One forward pass over ``prompts``; per layer the selected heads, flattened: (B, k_l*d)."""
    return selected_heads_of(adapter, adapter.encode(prompts), heads)


def selected_heads_of(
    adapter: ModelAdapter, inputs: Mapping[str, torch.Tensor], heads: HeadSet
) -> dict[int, np.ndarray]:
    """One forward pass over encoded ``inputs``; per layer the selected heads: (B, k_l*d)."""
    layers = heads.layers
    with torch.no_grad(), capture_last_token(adapter, layers) as capture:
        adapter.model(**inputs)
    out: dict[int, np.ndarray] = {}
    for layer in layers:
        selected = capture.activations[layer][:, heads.heads_in(layer), :]  # (B, k_l, d)
        out[layer] = selected.reshape(selected.shape[0], -1).double().numpy()
    return out


def extract_each_chunk(
    adapter: ModelAdapter,
    prompts: Iterable[Prompt],
    heads: HeadSet,
    *,
    max_prompt_tokens: int,
    prefetch: int = DEFAULT_PREFETCH,
    timings: PipelineTimings | None = None,
) -> Iterator[dict[int, np.ndarray] | None]:
    """Per private chunk prompt, its own forward pass: ``{layer: (1, k_l*d)}``, or None when the
    public rule of :mod:`dpmtv.prompt_budget` drops it (its query alone exceeds the budget) or
    the failed-chunk rule of :mod:`dpmtv.failed_chunks` applies (rendering, encoding or the pass
    raised, or gave NaN/inf): the chunk then contributes nothing.

    The next ``prefetch`` prompts are rendered (images decoded) and encoded on a background
    thread while this one runs (:mod:`dpmtv._prefetch`); each is still encoded alone and gets its
    own forward pass. ``timings`` collects how long the forward pass waited for its inputs."""
    prompts = prompts if isinstance(prompts, Sequence) else list(prompts)

    def encode(index: int) -> Mapping[str, torch.Tensor] | None:
        return chunk_or_none(_encode_chunk, adapter, prompts, index, max_prompt_tokens)

    for inputs in prefetched(encode, len(prompts), depth=prefetch, timings=timings):
        if inputs is None:
            yield None
        else:
            yield finite_or_none(chunk_or_none(selected_heads_of, adapter, inputs, heads))


def _encode_chunk(adapter, prompts: Sequence[Prompt], index: int, max_prompt_tokens: int):
    """Render prompt ``index`` (images decoded) and encode it within the budget."""
    return encode_one_within(adapter, prompts[index], max_prompt_tokens=max_prompt_tokens)


def iter_batches(prompts: Sequence[Prompt], batch_size: int) -> Iterator[Sequence[Prompt]]:
    if batch_size < 1:
        raise ParameterError(f"batch_size must be >= 1, got {batch_size}")
    for start in range(0, len(prompts), batch_size):
        yield prompts[start : start + batch_size]


def stack_selected_heads(
    adapter: ModelAdapter, prompts: Sequence[Prompt], heads: HeadSet, *, batch_size: int
) -> dict[int, np.ndarray]:
    """Every prompt's selected heads, in batches, stacked: per layer ``(len(prompts), k_l*d)``.

    Batched like :func:`extract_selected_heads`, so a row's numerics depend on its batch-mates:
    for public prompts and for experiments that hold all chunk rows in memory to release them
    several times (the demo, the benchmarks); a build extracts private chunks one by one
    (:func:`extract_each_chunk`)."""
    parts: dict[int, list[np.ndarray]] = {layer: [] for layer in heads.layers}
    for batch in iter_batches(prompts, batch_size):
        for layer, values in extract_selected_heads(adapter, batch, heads).items():
            parts[layer].append(values)  # (B, k_l*d)
    return {layer: np.concatenate(values) for layer, values in parts.items()}


def mean_selected_heads(
    adapter: ModelAdapter, prompts: Sequence[Prompt], heads: HeadSet, *, batch_size: int
) -> dict[int, np.ndarray]:
    """Plain mean over prompts — for PUBLIC data only (references, non-private baselines)."""
    sums: dict[int, np.ndarray] = {}
    for batch in iter_batches(prompts, batch_size):
        for layer, values in extract_selected_heads(adapter, batch, heads).items():
            sums[layer] = sums.get(layer, 0) + values.sum(axis=0)
    return {layer: total / len(prompts) for layer, total in sums.items()}
