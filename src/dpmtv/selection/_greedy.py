"""Greedy forward selection of heads on public train queries."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from dpmtv._progress import progress_bar
from dpmtv.errors import ParameterError
from dpmtv.selection._search import PublicSearch, heads_of
from dpmtv.selection.result import SelectionResult


def greedy(
    search: PublicSearch,
    *,
    max_heads: int | None = None,
    min_gain: float = 0.0,
    metric: str = "logprob",
    progress: bool = True,
) -> SelectionResult:
    """Repeatedly add the pool head whose patching (together with those already chosen) most
    improves the train metric; stop when the best gain is ``<= min_gain`` or at ``max_heads``.

    All candidates of a round are one batch of mask rows (``S ∪ {h}`` per row), each evaluated as
    one cached last-token step per query. Cost: rounds × |pool| rows × train queries. If no head
    helps at all, the single best head is returned (``details["no_head_helped"]``).
    """
    if max_heads is not None and max_heads < 1:
        raise ParameterError(f"max_heads must be >= 1, got {max_heads}")
    started = time.perf_counter()
    budget = int(search.pool.sum()) if max_heads is None else min(max_heads, int(search.pool.sum()))
    selected = torch.zeros_like(search.pool)  # (L, H) bool
    current = float(search.train_key(selected[None].float(), metric)[0])
    gains: list[list[float]] = []
    queries = search.train.num_queries
    # Each step scores every remaining pool head on every train query (a minute on a real model),
    # so the bar moves per query: steps × queries, at most ``budget`` steps (it stops early when
    # no head helps).
    with progress_bar(
        f"greedy head search (≤ {budget} steps × {queries} queries)", budget * queries, enabled=progress
    ) as advance:
        while len(gains) < budget:
            head, value = _best_addition(search, selected, metric, advance)
            if gains and value - current <= min_gain:
                break
            gains.append([*head, value - current])
            selected[head] = True
            current = value
    heads = heads_of(selected)
    return SelectionResult(
        heads=heads,
        method="greedy",
        dev_metric=search.dev_value(heads, metric),
        metric=metric,
        scores=gains,
        seconds=time.perf_counter() - started,
        details={
            "max_heads": max_heads,
            "min_gain": min_gain,
            "train_metric": current,
            "no_head_helped": gains[0][2] <= min_gain,
        },
    )


def _best_addition(
    search: PublicSearch, selected: torch.Tensor, metric: str, advance: Callable[[int], None]
) -> tuple[tuple[int, int], float]:
    candidates = (search.pool & ~selected).nonzero()  # (C, 2)
    rows = selected.expand(candidates.shape[0], *selected.shape).clone()  # (C, L, H)
    rows[torch.arange(candidates.shape[0]), candidates[:, 0], candidates[:, 1]] = True
    keys = search.train_key(rows.float(), metric, on_query=advance)  # (C,)
    best = int(keys.argmax())
    return (int(candidates[best, 0]), int(candidates[best, 1])), float(keys[best])
