"""Extraction of the selected heads' last-token outputs (model plumbing, no privacy).

Two ways, for two kinds of data:

- :func:`extract_selected_heads` / :func:`mean_selected_heads`: batched, left-padded to the
  longest prompt of the batch — for PUBLIC prompts only (references, public selection);
- :func:`extract_each_chunk`: PRIVATE chunks, cut to a public token budget, either one forward
  pass per prompt or several in a pass of fixed public shapes (:mod:`dpmtv.forward.fixed_shapes`).
  Batching to the longest prompt makes a row's numerics depend on the other rows (their lengths
  set the padding, and the kernels chosen for the batch's shape), so a neighbouring dataset would
  move other chunks' values; a batch of one, or a row of a pass whose shapes are all public, is a
  function of that chunk alone (``docs/design.md`` §10).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import TypeVar

import numpy as np
import torch

from dpmtv.data.prompts import Prompt
from dpmtv.errors import ParameterError
from dpmtv.forward._prefetch import DEFAULT_PREFETCH, PipelineTimings
from dpmtv.forward._prepare import prepared, resolve_prepare_workers
from dpmtv.forward.failed_chunks import chunk_or_none, finite_or_none
from dpmtv.forward.fixed_shapes import (
    EncodeFixed,
    FixedShape,
    deterministic_kernels,
    dummy_inputs,
    rows_by_slot,
)
from dpmtv.forward.hooks import capture_last_token
from dpmtv.forward.prompt_budget import encode_one_within
from dpmtv.heads import HeadSet
from dpmtv.models.base import ModelAdapter

T = TypeVar("T")


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
    prompts: Sequence[Prompt],
    heads: HeadSet,
    *,
    max_prompt_tokens: int,
    prepare_workers: int | None = None,
    prefetch: int = DEFAULT_PREFETCH,
    timings: PipelineTimings | None = None,
    fixed_shape: FixedShape | None = None,
    slots: Sequence[int] | None = None,
) -> Generator[dict[int, np.ndarray] | None, None, None]:
    """Per private chunk prompt, its selected heads ``{layer: (1, k_l*d)}``, or None when the
    public rule of :mod:`dpmtv.forward.prompt_budget` drops it (its query alone exceeds the budget) or
    the failed-chunk rule of :mod:`dpmtv.forward.failed_chunks` applies (rendering, encoding or the pass
    raised, or gave NaN/inf): the chunk then contributes nothing.

    Without ``fixed_shape`` each prompt has its own forward pass; with it (``tokens`` must be
    ``max_prompt_tokens``), ``fixed_shape.rows`` prompts share a pass of fixed public shapes,
    prompt ``i`` in the row its chunk id ``slots[i]`` assigns (:mod:`dpmtv.forward.fixed_shapes`).

    The prompts are rendered (images decoded) and encoded ahead of the forward pass, in
    ``prepare_workers`` processes (None: the device's default; 0: one background thread;
    :mod:`dpmtv.forward._prepare`), up to ``prefetch`` per worker; each is still encoded alone, on the
    CPU. ``timings`` collects how long the forward pass waited for its inputs."""
    if fixed_shape is not None:
        yield from _extract_fixed_shape(
            adapter, prompts, heads, fixed_shape, slots=slots, workers=prepare_workers, depth=prefetch,
            timings=timings,
        )  # fmt: skip
        return
    device = adapter.input_device
    for inputs in prepared_inputs(
        adapter, prompts, max_prompt_tokens=max_prompt_tokens, workers=prepare_workers, depth=prefetch,
        timings=timings,
    ):  # fmt: skip
        if inputs is None:
            yield None
        else:
            yield finite_or_none(chunk_or_none(selected_heads_of, adapter, to_device(inputs, device), heads))


def _extract_fixed_shape(
    adapter: ModelAdapter,
    prompts: Sequence[Prompt],
    heads: HeadSet,
    shape: FixedShape,
    *,
    slots: Sequence[int] | None,
    workers: int | None,
    depth: int,
    timings: PipelineTimings | None,
) -> Iterator[dict[int, np.ndarray] | None]:
    dummy = dummy_inputs(adapter, shape)
    if dummy is None:  # resolved before the build (dpmtv.pipeline.private_batching): a caller's bug
        raise ParameterError(f"the dummy row does not fit {shape.tokens} tokens; use one chunk per pass")
    device = adapter.input_device

    def forward(inputs: dict[str, torch.Tensor]) -> dict[int, np.ndarray]:
        with deterministic_kernels(device):
            return selected_heads_of(adapter, to_device(inputs, device), heads)

    workers = resolve_prepare_workers(adapter, workers) if adapter.prepares_in_workers else 0
    encode = EncodeFixed(adapter.without_model() if workers else adapter, prompts, shape.tokens)
    # no pinned memory: the rows are concatenated into a pass (a new tensor) before the copy
    encoded = prepared(encode, len(prompts), workers=workers, depth=depth, timings=timings)
    yield from rows_by_slot(
        forward, encoded, range(len(prompts)) if slots is None else slots, rows=shape.rows, dummy=dummy
    )


def prepared_inputs(
    adapter: ModelAdapter,
    prompts: Sequence[Prompt],
    *,
    max_prompt_tokens: int,
    workers: int | None,
    depth: int = DEFAULT_PREFETCH,
    timings: PipelineTimings | None = None,
) -> Iterator[dict[str, torch.Tensor] | None]:
    """Each prompt's batch-of-one CPU inputs cut to the budget (or None: dropped), in order,
    prepared by ``workers`` processes where the adapter allows it (else one background thread)."""
    workers = resolve_prepare_workers(adapter, workers) if adapter.prepares_in_workers else 0
    encode = _EncodeOne(adapter.without_model() if workers else adapter, prompts, max_prompt_tokens)
    pin = workers > 0 and adapter.input_device.type == "cuda"
    return prepared(encode, len(prompts), workers=workers, depth=depth, pin_memory=pin, timings=timings)


def to_device(inputs: Mapping[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Inputs moved to the model's device (asynchronously from pinned memory)."""
    return {key: value.to(device, non_blocking=value.is_pinned()) for key, value in inputs.items()}


class _EncodeOne:
    """``index -> encode_one_within(prompts[index])``: picklable, so a worker process can run it."""

    def __init__(self, adapter: ModelAdapter, prompts: Sequence[Prompt], max_prompt_tokens: int):
        self._adapter, self._prompts, self._budget = adapter, prompts, max_prompt_tokens

    def __call__(self, index: int) -> dict[str, torch.Tensor] | None:
        # the failed-chunk rule: a chunk whose prompt cannot be rendered (images decoded) or encoded
        # is dropped; the prompt is fetched inside the rule, since a lazy prompt renders on access
        return chunk_or_none(self._encode, index)

    def _encode(self, index: int) -> dict[str, torch.Tensor] | None:
        return encode_one_within(self._adapter, self._prompts[index], max_prompt_tokens=self._budget)


def iter_batches(items: Sequence[T], batch_size: int) -> Iterator[Sequence[T]]:
    if batch_size < 1:
        raise ParameterError(f"batch_size must be >= 1, got {batch_size}")
    for start in range(0, len(items), batch_size):
        yield items[start : start + batch_size]


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
