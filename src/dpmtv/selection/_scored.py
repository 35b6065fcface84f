"""Top-k heads by single-head patching effect: exact, or its attribution-patching estimate."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from dpmtv._progress import progress_bar
from dpmtv.errors import ParameterError
from dpmtv.selection._patching import attribution_scores
from dpmtv.selection._search import PublicSearch, heads_of
from dpmtv.selection.result import SelectionResult

ESTIMATES = ("exact", "attribution")


def scored(
    search: PublicSearch,
    *,
    k: int,
    estimate: str = "exact",
    metric: str = "logprob",
    batch_size: int = 4,
    progress: bool = True,
) -> SelectionResult:
    """Score every pool head alone and keep the ``k`` best.

    ``exact``: ``metric(patch {h}) − metric(patch ∅)`` on the train queries, all heads as one batch
    of one-hot mask rows. ``attribution``: its first-order estimate
    ``(mean_h − own_h)·∂ log p/∂ own_h``, averaged over train queries (one forward + backward per
    batch of queries). Cheapest, but single-head effects are small and interact, so it can miss
    sets that only work together; compare with :func:`best_of`.
    """
    if estimate not in ESTIMATES:
        raise ParameterError(f"estimate must be one of {ESTIMATES}, got {estimate!r}")
    pool_size = int(search.pool.sum())
    if not 1 <= k <= pool_size:
        raise ParameterError(f"k must be in [1, {pool_size}] (the pool size), got {k}")
    started = time.perf_counter()
    queries = len(search.task.train)
    with progress_bar(f"scoring {pool_size} heads ({estimate})", queries, enabled=progress) as advance:
        scores = (
            _exact(search, metric, advance)
            if estimate == "exact"
            else _attribution(search, batch_size, advance)
        )  # (L, H)
    scores = scores.masked_fill(~search.pool, float("-inf"))
    top = torch.topk(scores.flatten(), k).indices  # (k,)
    chosen = torch.zeros(scores.numel(), dtype=torch.bool)
    chosen[top] = True
    heads = heads_of(chosen.reshape(scores.shape))
    listed = [[layer, head, float(scores[layer, head])] for layer, head in search.pool.nonzero().tolist()]
    return SelectionResult(
        heads=heads,
        method=f"scored-{estimate}",
        dev_metric=search.dev_value(heads, metric),
        metric=metric,
        scores=listed,
        seconds=time.perf_counter() - started,
        details={"k": k, "estimate": estimate},
    )


def _exact(search: PublicSearch, metric: str, advance: Callable[[int], None]) -> torch.Tensor:
    heads = search.pool.nonzero()  # (C, 2)
    rows = torch.zeros(heads.shape[0] + 1, *search.pool.shape)  # (C+1, L, H); row 0 patches nothing
    rows[torch.arange(1, heads.shape[0] + 1), heads[:, 0], heads[:, 1]] = 1.0
    keys = search.train_key(rows, metric, on_query=advance)  # (C+1,)
    scores = torch.zeros(search.pool.shape, dtype=torch.float64)
    scores[heads[:, 0], heads[:, 1]] = keys[1:] - keys[0]
    return scores


def _attribution(search: PublicSearch, batch_size: int, advance: Callable[[int], None]) -> torch.Tensor:
    per_query = attribution_scores(
        search.adapter, search.task.train, search.task.means, batch_size=batch_size, on_batch=advance
    )
    return per_query.double().mean(dim=0)  # (L, H)
