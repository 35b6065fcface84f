"""Public head selection (docs/design.md §3): searches on auxiliary PUBLIC data, no privacy cost.

Typical use::

    search = PublicSearch.prepare(loaded, public_records, shots=8)
    result = reinforce(search, steps=600, seed=0)        # or greedy(search) / scored(search, k=10)
    result = refine_with_best_of(search, result, layer_block_candidates(loaded.adapter.geometry))
    result.save("heads.json")                            # --heads heads.json reads it

or all at once: ``select_public(loaded, public_records, method="greedy")``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from dpmtv.data.prompts import DEFAULT_QUERY_QUESTION
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.selection._best_of import best_of, layer_block_candidates, refine_with_best_of
from dpmtv.selection._data import PublicTask, Query, prepare_public_task
from dpmtv.selection._greedy import greedy
from dpmtv.selection._reinforce import reinforce
from dpmtv.selection._scored import scored
from dpmtv.selection._search import PublicSearch
from dpmtv.selection.result import SelectionResult

__all__ = [
    "METHODS",
    "PublicSearch",
    "PublicTask",
    "Query",
    "best_of",
    "greedy",
    "layer_block_candidates",
    "prepare_public_task",
    "refine_with_best_of",
    "reinforce",
    "scored",
    "select_public",
]

METHODS = ("reinforce", "greedy", "scored")
DEFAULT_K = 10


def select_public(
    loaded: LoadedModel,
    records: Sequence[Record],
    *,
    method: str = "greedy",
    shots: int = 8,
    k: int | None = None,
    steps: int = 600,
    seed: int = 0,
    pool: HeadSet | None = None,
    compare_candidates: bool = True,
    metric: str = "logprob",
    estimate: str = "exact",
    num_dev: int | None = None,
    query: str = "record",
    query_question: str = DEFAULT_QUERY_QUESTION,
    batch_size: int = 4,
    progress: bool = True,
) -> SelectionResult:
    """Prepare the public search, run ``method``, and (``compare_candidates``) let its heads
    compete with whole-layer blocks and all heads on the dev queries.

    ``k``: heads for ``scored`` (default 10) and the cap for ``greedy`` (default: no cap).
    ``query``/``query_question`` must match the build's so the public means are in its format.
    """
    if method not in METHODS:
        raise ParameterError(f"method must be one of {METHODS}, got {method!r}")
    started = time.perf_counter()
    search = PublicSearch.prepare(
        loaded,
        records,
        shots=shots,
        pool=pool,
        num_dev=num_dev,
        seed=seed,
        query=query,
        query_question=query_question,
        batch_size=batch_size,
    )
    result = _run(
        search,
        method,
        k=k,
        steps=steps,
        seed=seed,
        metric=metric,
        estimate=estimate,
        batch_size=batch_size,
        progress=progress,
    )
    if compare_candidates:
        blocks = layer_block_candidates(loaded.adapter.geometry)
        result = refine_with_best_of(search, result, blocks, metric=metric)
    details = _details(search, result, num_public_records=len(records))
    return dataclasses.replace(result, seconds=time.perf_counter() - started, details=details)


def _details(search: PublicSearch, result: SelectionResult, *, num_public_records: int) -> dict[str, Any]:
    """The result's details with the search's public sizes."""
    return {
        **result.details,
        "shots": search.task.shots,
        "num_public_records": num_public_records,
        "num_train_queries": len(search.task.train),
        "num_dev_queries": len(search.task.dev),
        "kv_cache": search.train.cached,
    }


def _run(
    search: PublicSearch,
    method: str,
    *,
    k: int | None,
    steps: int,
    seed: int,
    metric: str,
    estimate: str,
    batch_size: int,
    progress: bool,
) -> SelectionResult:
    if method == "reinforce":
        return reinforce(search, steps=steps, seed=seed, progress=progress)
    if method == "greedy":
        return greedy(search, max_heads=k, metric=metric, progress=progress)
    k = min(DEFAULT_K, int(search.pool.sum())) if k is None else k
    return scored(search, k=k, estimate=estimate, metric=metric, batch_size=batch_size, progress=progress)
