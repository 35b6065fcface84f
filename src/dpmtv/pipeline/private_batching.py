"""How a build's private forward passes run: one chunk per pass, or several chunks per pass at
fixed public shapes (:mod:`dpmtv.forward.fixed_shapes`).

The choice is made from public facts only — the model family's capability
(:attr:`~dpmtv.models.base.ModelAdapter.fixed_shape_batches`), ``--private-batch-size``,
``--max-prompt-tokens`` and whether the public dummy row fits that budget — so it may be recorded
in the artifact (``prompt.private_forward``, ``prompt.private_batch_size``). By default fixed
shapes need an explicit budget — padding every prompt to the model's whole position limit costs
more than it saves (benchmarks/results/private_forward_shapes.json) — and a pass holds at most
8192 padded tokens.
"""

from __future__ import annotations

from dpmtv.data.prompts import Prompt
from dpmtv.forward.fixed_shapes import (
    DEFAULT_PRIVATE_BATCH_SIZE,
    DEFAULT_TOKENS_PER_PASS,
    FixedShape,
    dummy_inputs,
    dummy_prompt,
)
from dpmtv.forward.prompt_budget import resolve_max_prompt_tokens
from dpmtv.models.base import ModelAdapter
from dpmtv.pipeline.settings import BuildSettings

__all__ = ["fixed_shape_of", "resolve_private_batch_size"]


def resolve_private_batch_size(adapter: ModelAdapter, settings: BuildSettings) -> int:
    """Chunks per private pass: 1 where the family does not allow fixed shapes or the dummy row
    does not fit the budget; else ``settings.private_batch_size``, by default 1 when the budget is
    the model's position limit and, when a budget ``T`` is given, ``min(16, 8192 // T)`` (at least
    1): a pass holds at most :data:`~dpmtv.forward.fixed_shapes.DEFAULT_TOKENS_PER_PASS` padded tokens.
    Resolving resolved settings gives the same number."""
    if not adapter.fixed_shape_batches:
        return 1
    budget = resolve_max_prompt_tokens(adapter, settings.max_prompt_tokens)
    rows = settings.private_batch_size
    if rows is None:
        given = settings.max_prompt_tokens is not None
        rows = max(1, min(DEFAULT_PRIVATE_BATCH_SIZE, DEFAULT_TOKENS_PER_PASS // budget)) if given else 1
    if rows == 1:
        return 1
    return rows if dummy_inputs(adapter, FixedShape(rows, budget, _dummy(settings))) is not None else 1


def fixed_shape_of(adapter: ModelAdapter, settings: BuildSettings) -> FixedShape | None:
    """The fixed public shape of the build's private passes, or None: one chunk per pass."""
    rows = resolve_private_batch_size(adapter, settings)
    if rows == 1:
        return None
    return FixedShape(rows, resolve_max_prompt_tokens(adapter, settings.max_prompt_tokens), _dummy(settings))


def _dummy(settings: BuildSettings) -> Prompt:
    """A full chunk's image count: its demonstrations (all records but the query's, or all of
    them with a public query) and the query, one blank image each."""
    demonstrations = settings.shots_per_chunk - (1 if settings.query_source == "record" else 0)
    return dummy_prompt(demonstrations)
