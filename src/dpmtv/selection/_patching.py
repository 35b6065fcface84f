"""Batched evaluation of head masks: the first answer token's log-probability when a subset of
heads (one subset per batch row) is overwritten with given values at the last position.

The unpatched part is cached: patching only the last position cannot change any earlier
position's keys and values (causal attention), so each query's prompt minus its last token is run
once and its KV cache reused; every evaluation is then one token per row. The cache path is
verified against a full forward per query at construction and abandoned (full forwards of the
repeated prompt) if it does not reproduce the logits, e.g. for families whose decode step needs
state a plain cache does not hold.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dpmtv.forward._kv_cache import cache_argument, output_cache
from dpmtv.forward.extract import iter_batches
from dpmtv.forward.hooks import blend_heads_per_row
from dpmtv.models.base import ModelAdapter
from dpmtv.selection._data import Query

# Failures of the cached decode step that mean "this family needs the full forward".
_CACHE_ERRORS = (RuntimeError, ValueError, TypeError, IndexError, KeyError, AttributeError)


@dataclass
class _QueryState:
    inputs: dict[str, torch.Tensor]  # batch-1 model inputs of the whole prompt
    target: int
    reference: torch.Tensor  # (V,) float32 unpatched last-position log-probs
    cache: Any = None  # KV cache of the prompt without its last token


class MaskScorer:
    """``evaluate(masks)`` → per row and query the target's log-prob and whether it is the arg max.

    ``values`` (L, H, d) are patched where ``masks`` (R, L, H) is 1 (the public mean for public
    search). Rows are processed ``row_batch`` at a time.
    """

    def __init__(
        self,
        adapter: ModelAdapter,
        values: torch.Tensor,
        queries: Sequence[Query],
        *,
        row_batch: int = 64,
        use_cache: bool = True,
    ) -> None:
        self.adapter = adapter
        self.device = adapter.input_device
        self.values = {layer: values[layer].to(self.device) for layer in range(values.shape[0])}
        self.row_batch = row_batch
        self.cache_argument = cache_argument(adapter.model)
        self.states = [self._prepare(query, use_cache) for query in queries]
        self.cached = use_cache and self._cache_reproduces_logits()

    @property
    def num_queries(self) -> int:
        return len(self.states)

    def evaluate(
        self,
        masks: torch.Tensor,
        queries: Sequence[int] | None = None,
        *,
        on_query: Callable[[int], None] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``masks`` (R, L, H) → (log-probs (R, Q) float32, correct (R, Q) bool) on the CPU;
        ``on_query(1)`` after each query (progress: one call can take a minute)."""
        indices = range(self.num_queries) if queries is None else queries
        logps, hits = [], []
        for index in indices:
            logp, hit = self._evaluate_query(self.states[index], masks.to(self.device))
            logps.append(logp)
            hits.append(hit)
            if on_query is not None:
                on_query(1)
        return torch.stack(logps, dim=1).cpu(), torch.stack(hits, dim=1).cpu()

    def _evaluate_query(self, state: _QueryState, masks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logps, hits = [], []
        for start in range(0, masks.shape[0], self.row_batch):
            log_probs = self._last_log_probs(state, masks[start : start + self.row_batch])  # (r, V)
            logps.append(log_probs[:, state.target])
            hits.append(log_probs.argmax(dim=-1) == state.target)
        return torch.cat(logps), torch.cat(hits)

    def _last_log_probs(
        self, state: _QueryState, masks: torch.Tensor, *, cached: bool | None = None
    ) -> torch.Tensor:
        rows = masks.shape[0]
        use_cache = self.cached if cached is None else cached
        kwargs = (
            _step_inputs(state, rows, self.cache_argument) if use_cache else _repeated(state.inputs, rows)
        )
        with torch.no_grad(), blend_heads_per_row(self.adapter, self.values, masks):
            logits = self.adapter.model(**kwargs, use_cache=use_cache).logits[:, -1]
        return torch.log_softmax(logits.float(), dim=-1)  # (rows, V)

    def _prepare(self, query: Query, use_cache: bool) -> _QueryState:
        inputs = self.adapter.encode([query.prompt])
        with torch.no_grad():
            logits = self.adapter.model(**inputs).logits[0, -1]
            state = _QueryState(inputs, query.target, torch.log_softmax(logits.float(), dim=-1))
            if use_cache:
                state.cache = _prefix_cache(self.adapter, inputs)
        return state

    def _cache_reproduces_logits(self) -> bool:
        zero = torch.zeros(1, *self._mask_shape(), device=self.device)
        tolerance = 1e-3 if next(self.adapter.model.parameters()).dtype == torch.float32 else 5e-2
        try:
            for state in self.states:
                got = self._last_log_probs(state, zero, cached=True)[0]
                if not torch.allclose(got, state.reference, atol=tolerance, rtol=tolerance):
                    return False
        except _CACHE_ERRORS:
            return False
        return True

    def _mask_shape(self) -> tuple[int, int]:
        return self.adapter.geometry.num_layers, self.adapter.geometry.num_heads


def _prefix_cache(adapter: ModelAdapter, inputs: Mapping[str, torch.Tensor]) -> Any:
    """The KV cache of the prompt without its last token (image tokens are never last)."""
    length = inputs["input_ids"].shape[1]
    prefix = {
        key: value[:, :-1] if value.ndim == 2 and tuple(value.shape) == (1, length) else value
        for key, value in inputs.items()
    }
    try:
        output = adapter.model(**prefix, use_cache=True)
    except _CACHE_ERRORS:
        return None
    return output_cache(output)


def _step_inputs(state: _QueryState, rows: int, cache_argument: str) -> dict[str, Any]:
    if state.cache is None:
        raise ValueError("no prefix cache for this query")
    cache = copy.deepcopy(state.cache)
    cache.batch_repeat_interleave(rows)
    return {
        "input_ids": state.inputs["input_ids"][:, -1:].repeat(rows, 1),
        "attention_mask": state.inputs["attention_mask"].repeat(rows, 1),
        cache_argument: cache,
    }


def _repeated(inputs: Mapping[str, torch.Tensor], rows: int) -> dict[str, torch.Tensor]:
    """Every input tensor repeated ``rows`` times along dim 0 (images follow their rows)."""
    return {key: value.repeat(rows, *([1] * (value.ndim - 1))) for key, value in inputs.items()}


def attribution_scores(
    adapter: ModelAdapter,
    queries: Sequence[Query],
    values: torch.Tensor,
    *,
    batch_size: int = 4,
    on_batch: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """First-order effect of patching each head on each query's target log-prob: (Q, L, H).

    ``∂ log p(target) / ∂ mask`` at mask 0, i.e. ``(value − own)·∂ log p/∂ own`` (attribution
    patching; one forward + backward per batch). ``values`` is (L, H, d), shared, or (Q, L, H, d),
    one per query (a chunk's own activations in private voting).
    """
    geometry = adapter.geometry
    device = adapter.input_device
    out = []
    for start, batch in zip(range(0, len(queries), batch_size), iter_batches(list(queries), batch_size)):
        rows = values if values.ndim == 3 else values[start : start + len(batch)]
        per_layer = {layer: rows[..., layer, :, :].to(device) for layer in range(geometry.num_layers)}
        masks = torch.zeros(
            len(batch), geometry.num_layers, geometry.num_heads, device=device, requires_grad=True
        )
        targets = torch.tensor([query.target for query in batch], device=device)
        with torch.enable_grad(), blend_heads_per_row(adapter, per_layer, masks):
            logits = adapter.model(**adapter.encode([query.prompt for query in batch])).logits[:, -1]
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            picked = log_probs.gather(1, targets[:, None]).sum()
            (grad,) = torch.autograd.grad(picked, masks)
        out.append(grad.detach().cpu())
        if on_batch is not None:
            on_batch(len(batch))
    return torch.cat(out)  # (Q, L, H)
