"""Fixed public shapes: several private chunks in one forward pass, each still a function of its
own records (model plumbing, no privacy maths; docs/design.md §10).

A batch couples its rows through its shape: padded to the longest prompt, one record's length
moves every other row's padding and numerics. Here every shape of a pass is public instead:

1. each chunk prompt is encoded alone, cut by the public budget rule (:mod:`dpmtv.forward.prompt_budget`)
   and left-padded to exactly ``tokens`` = ``--max-prompt-tokens`` (attention mask 0 on the pads,
   so they get no weight in a real token's attention);
2. chunk id ``j`` (its public position in the partition) fixes its pass and row: pass
   ``j // rows``, row ``j % rows``; a row no chunk takes (an empty chunk, a chunk sent to another
   worker) holds a public dummy prompt of blank images — so neither a chunk's row nor its pass's
   shape depends on the data, and dummy rows are never returned (they enter no sum and no vote);
3. a chunk whose tensors do not have the dummy's shapes (another image count, a prompt cut to
   fewer images, an image sized by its content) has a pass of its own, as without fixed shapes —
   decided by its own tensors;
4. a pass that raises is rerun for each of its chunks with dummies in the other rows; a chunk whose
   own pass raises, or whose row is not finite, follows :mod:`dpmtv.forward.failed_chunks`.

The premise, tested rather than proved: in a pass of fixed shape, a row's values do not depend on
the other rows' values — the model's operations are row-wise (linear layers, norms, attention
inside a row with its pads masked) and the kernels' reduction order follows the shapes, not the
values. ``tests/forward/test_fixed_shapes.py`` checks it bitwise, in float32 and bfloat16, on every family
that turns it on (:attr:`dpmtv.models.base.ModelAdapter.fixed_shape_batches`). On CUDA a kernel
may pick atomic or split reductions; the passes run under ``torch.use_deterministic_algorithms``
(:func:`deterministic_kernels`), and ``benchmarks/gpu_suite.sh`` repeats the test on the device.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from dpmtv.data.prompts import Example, Prompt, blank_image
from dpmtv.errors import ParameterError
from dpmtv.forward.failed_chunks import chunk_or_none, finite_or_none
from dpmtv.forward.prompt_budget import encode_padded_within
from dpmtv.models.base import ModelAdapter

__all__ = [
    "DEFAULT_PRIVATE_BATCH_SIZE",
    "DEFAULT_TOKENS_PER_PASS",
    "ONE_CHUNK_PER_PASS",
    "EncodeFixed",
    "FixedShape",
    "describe_private_forward",
    "deterministic_kernels",
    "dummy_inputs",
    "dummy_prompt",
    "rows_by_slot",
]

DEFAULT_PRIVATE_BATCH_SIZE = 16  # rows of a pass when the family allows it and a budget is given,
DEFAULT_TOKENS_PER_PASS = 8192  # and at most this many padded tokens per pass (a long budget: fewer)
ONE_CHUNK_PER_PASS = "one chunk per forward pass"

Inputs = dict[str, torch.Tensor]
Rows = dict[int, np.ndarray]  # layer -> (B, k_l*d)


@dataclass(frozen=True)
class FixedShape:
    """The public shape of a private pass: ``rows`` prompts of ``tokens`` tokens each, ``dummy``
    in every row that no chunk takes."""

    rows: int
    tokens: int
    dummy: Prompt


def describe_private_forward(rows: int, tokens: int) -> str:
    """The artifact's ``prompt.private_forward``: public (the batch size and the budget)."""
    if rows == 1:
        return ONE_CHUNK_PER_PASS
    return f"fixed public shapes: {rows} rows of {tokens} tokens per pass, dummy rows in empty slots"


def dummy_prompt(num_demonstrations: int) -> Prompt:
    """The public filler row: ``num_demonstrations`` blank-image demonstrations and a blank query
    (the image count of a full chunk of one-image records)."""
    demo = Example((blank_image(),), "?", "?")
    return Prompt((demo,) * num_demonstrations, Example((blank_image(),), "?"))


def dummy_inputs(adapter: ModelAdapter, shape: FixedShape) -> Inputs | None:
    """The dummy row's CPU inputs, or None when the dummy itself does not fit the budget (then
    fixed shapes cannot be used: a public fact, decided before any private pass)."""
    inputs = adapter.encode([adapter.fixed_shape_prompt(shape.dummy)], pad_to=shape.tokens)
    return inputs if inputs["input_ids"].shape[1] == shape.tokens else None


class EncodeFixed:
    """``index -> prompts[index]`` encoded alone at the fixed token count (None: dropped by the
    budget rule or the failed-chunk rule). Picklable, so a prepare worker can run it."""

    def __init__(self, adapter: ModelAdapter, prompts: Sequence[Prompt], tokens: int):
        self._adapter, self._prompts, self._tokens = adapter, prompts, tokens

    def __call__(self, index: int) -> Inputs | None:
        return chunk_or_none(self._encode, index)  # the prompt renders inside the rule

    def _encode(self, index: int) -> Inputs | None:
        prompt = self._adapter.fixed_shape_prompt(self._prompts[index])
        return encode_padded_within(self._adapter, prompt, max_prompt_tokens=self._tokens)


def rows_by_slot(
    forward: Callable[[Inputs], Rows],
    inputs: Iterable[Inputs | None],
    slots: Sequence[int],
    *,
    rows: int,
    dummy: Inputs,
) -> Iterator[Rows | None]:
    """Per prompt, in order, its row of the pass its slot (chunk id) assigns: ``{layer: (1, k)}``,
    or None (dropped, failed, not finite). ``inputs`` and ``slots`` are in the same order, the
    slots strictly increasing; ``forward`` maps a batch's inputs to ``{layer: (B, k)}``."""
    pending: dict[int, Inputs | None] = {}  # row -> inputs of the pass being filled
    current, previous = -1, -1
    for slot, row_inputs in zip(slots, inputs, strict=True):
        if slot <= previous:
            raise ParameterError(f"chunk slots must increase, got {slot} after {previous}")
        if slot // rows != current and pending:
            yield from _one_pass(forward, pending, rows, dummy)
            pending = {}
        current, previous = slot // rows, slot
        pending[slot % rows] = row_inputs
    if pending:
        yield from _one_pass(forward, pending, rows, dummy)


def _one_pass(
    forward: Callable[[Inputs], Rows], pending: Mapping[int, Inputs | None], rows: int, dummy: Inputs
) -> list[Rows | None]:
    """The rows of one pass (rule 2–4 of the module docstring), in row order."""
    shape = _signature(dummy)
    batched = {row: x for row, x in pending.items() if x is not None and _signature(x) == shape}
    out: dict[int, Rows | None] = {row: None for row in pending}
    for row, row_inputs in pending.items():  # rule 3: other shapes get a pass of their own
        if row_inputs is not None and row not in batched:
            alone = _guarded(forward, row_inputs)
            out[row] = None if alone is None else _row(alone, 0)
    if batched:
        values = _guarded(forward, _filled(batched, rows, dummy))
        if values is None:  # rule 4: each chunk again, alone among dummies
            for row, row_inputs in batched.items():
                alone = _guarded(forward, _filled({row: row_inputs}, rows, dummy))
                out[row] = None if alone is None else _row(alone, row)
        else:
            out.update({row: _row(values, row) for row in batched})
    return [out[row] for row in sorted(out)]


def _guarded(forward: Callable[[Inputs], Rows], batch: Inputs) -> Rows | None:
    """``forward(batch)``, or None when it raises — except a missing deterministic CUDA kernel,
    which is the machine's, not a chunk's: it stops the pass with what to do."""
    try:
        return forward(batch)
    except RuntimeError as exc:
        if "deterministic" in str(exc):
            raise ParameterError(
                f"a fixed-shape private pass needs deterministic CUDA kernels and this model has none "
                f"for one of its operations ({str(exc).splitlines()[0]}); rerun with --private-batch-size 1"
            ) from None
        return None
    except Exception:  # noqa: BLE001 (the failed-chunk rule, per chunk, in _one_pass)
        return None


def _row(values: Rows, row: int) -> Rows | None:
    return finite_or_none({layer: rows[row : row + 1] for layer, rows in values.items()})


def _filled(real: Mapping[int, Inputs], rows: int, dummy: Inputs) -> Inputs:
    """One pass's inputs: row ``r`` from ``real[r]``, else the dummy's; every key concatenated
    along its first axis (a row's tokens, or its images), in row order."""
    ordered = [real.get(row, dummy) for row in range(rows)]
    return {key: torch.cat([row_inputs[key] for row_inputs in ordered]) for key in dummy}


def _signature(inputs: Inputs) -> tuple[tuple[str, tuple[int, ...], torch.dtype], ...]:
    return tuple(sorted((key, tuple(value.shape), value.dtype) for key, value in inputs.items()))


@contextmanager
def deterministic_kernels(device: torch.device) -> Iterator[None]:
    """On CUDA, ``torch.use_deterministic_algorithms(True)`` inside the block (cuBLAS needs its
    workspace setting for it), restored after; on other devices nothing changes."""
    if device.type != "cuda":
        yield
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)
