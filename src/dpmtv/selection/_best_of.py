"""Compare candidate head sets on the public dev queries and keep the best (no single
search wins everywhere — greedy, whole-layer blocks and REINFORCE's draws each won somewhere)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

import torch

from dpmtv.errors import ParameterError
from dpmtv.heads import HeadSet
from dpmtv.models.base import HeadGeometry
from dpmtv.selection._search import PublicSearch, mask_of
from dpmtv.selection.result import SelectionResult


def best_of(
    search: PublicSearch, candidates: Mapping[str, HeadSet], *, metric: str = "logprob"
) -> SelectionResult:
    """Evaluate every candidate (one mask row each, one batch) on the dev queries; keep the best.

    Ties keep the earlier candidate. ``candidates`` in the result maps each name to its plain dev
    metric (mean log-prob, or accuracy).
    """
    if not candidates:
        raise ParameterError("best_of needs at least one candidate head set")
    started = time.perf_counter()
    names = list(candidates)
    rows = torch.stack([mask_of(candidates[name], search.geometry) for name in names]).float()  # (C, L, H)
    logp, hit = search.dev.evaluate(rows)  # (C, Q)
    values = (hit.double() if metric == "accuracy" else logp.double()).mean(dim=1)  # (C,)
    keys = values + (1e-6 * logp.double().mean(dim=1) if metric == "accuracy" else 0.0)
    best = int(keys.argmax())
    return SelectionResult(
        heads=candidates[names[best]],
        method="best-of",
        dev_metric=float(values[best]),
        metric=metric,
        candidates={name: float(value) for name, value in zip(names, values)},
        chosen=names[best],
        seconds=time.perf_counter() - started,
    )


def layer_block_candidates(
    geometry: HeadGeometry, *, widths: Sequence[int] = (1, 2, 3), include_all: bool = True
) -> dict[str, HeadSet]:
    """Every contiguous block of ``w`` whole layers for each width, plus all heads: the baselines
    that won on some training seeds (e.g. ``layers:0-2``)."""
    out: dict[str, HeadSet] = {}
    for width in widths:
        for first in range(0, geometry.num_layers - width + 1):
            last = first + width - 1
            out[f"layers:{first}-{last}"] = HeadSet.of(
                (layer, head) for layer in range(first, last + 1) for head in range(geometry.num_heads)
            )
    if include_all:
        out["all"] = HeadSet.of(
            (layer, head) for layer in range(geometry.num_layers) for head in range(geometry.num_heads)
        )
    return out


def refine_with_best_of(
    search: PublicSearch,
    result: SelectionResult,
    extra: Mapping[str, HeadSet],
    *,
    metric: str = "logprob",
) -> SelectionResult:
    """Let ``result``'s heads compete with ``extra`` candidates on dev data; keep its search
    outputs (probabilities, scores) and record every candidate's dev metric and the winner."""
    contest = best_of(search, {result.method: result.heads, **extra}, metric=metric)
    return dataclasses.replace(
        result,
        heads=contest.heads,
        method=f"{result.method}+best-of",
        dev_metric=contest.dev_metric,
        metric=metric,
        candidates=contest.candidates,
        chosen=contest.chosen,
        seconds=result.seconds + contest.seconds,
        details={**result.details, "search_candidates": result.candidates, "search_chosen": result.chosen},
    )
