r"""Private head selection, model side: per-chunk bounded votes, then the pure mechanism of
:mod:`dpmtv.privacy.selection` (vote histogram → one-shot Gumbel noisy top-k).

The vote of chunk ``j`` (:func:`chunk_votes`). Its records ``r_1..r_s`` form the build's
many-shot prompt: ``r_1..r_{s−1}`` as demonstrations, ``r_s``'s question as the query. The
last-token head outputs ``a_j`` (L, H, d) of that prompt are what the chunk would contribute to
the task vector. ``r_s`` is also the chunk's held-out query: zero-shot, with target ``t`` the
first token of ``r_s``'s answer. Each head is scored by the attribution-patching estimate of
patching ``a_j`` into that query,

    score_{lh} = (a_{j,lh} − z_{lh}) · ∂ log p(t | zero-shot r_s) / ∂ z_{lh},

``z`` being the zero-shot head outputs (one forward + backward per batch of chunks). The chunk
votes for its ``k'`` best pool heads with a POSITIVE score (possibly fewer).

Why this is safe whatever the score: the vote is a function of chunk ``j``'s own records only
(plus the public model and pool), and it is a set of at most ``k'`` distinct heads. That is all
the histogram's sensitivity bound needs (``L∞ = 1`` per head, ``L1 <= 2k'``; derivation in
:mod:`dpmtv.privacy.selection`), so the score needs no clipping — clipping ``a_j`` would not
change which heads win by much and is irrelevant for privacy here. :func:`vote_histogram` checks
the vote structure in code.

The histogram never leaves :func:`select_private`; only the noisy top-k does.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from dpmtv._progress import progress_bar
from dpmtv.data.records import Record
from dpmtv.extract import extract_selected_heads
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.privacy.events import event_to_json
from dpmtv.privacy.selection import PrivateSelectionPlan, noisy_top_k, vote_histogram
from dpmtv.prompts import Example, zero_shot
from dpmtv.selection._data import Query, all_heads, first_answer_token
from dpmtv.selection._patching import attribution_scores
from dpmtv.selection._search import heads_of, mask_of
from dpmtv.selection.result import SelectionResult

__all__ = ["chunk_votes", "select_private"]


def chunk_votes(
    loaded: LoadedModel,
    chunks: Sequence[Sequence[Record]],
    *,
    max_votes_per_chunk: int,
    pool: HeadSet | None = None,
    batch_size: int = 4,
    progress: bool = True,
) -> list[tuple[int, ...]]:
    """One vote tuple per chunk: flat head ids ``layer·H + head`` (module docstring).

    Chunks with fewer than two records (no demonstration) cast no vote.
    """
    geometry = loaded.adapter.geometry
    pool_mask = mask_of(pool or all_heads(geometry), geometry)  # (L, H) bool
    return [
        () if scores is None else _top_positive(scores, pool_mask, max_votes_per_chunk)
        for scores in chunk_head_scores(loaded, chunks, batch_size=batch_size, progress=progress)
    ]


def chunk_head_scores(
    loaded: LoadedModel,
    chunks: Sequence[Sequence[Record]],
    *,
    max_prompt_tokens: int | None = None,
    batch_size: int = 4,
    progress: bool = True,
) -> Iterator[torch.Tensor | None]:
    """Per chunk, its attribution score of every head (L, H) float32, or None (no vote)."""
    with progress_bar("private head votes", len(chunks), enabled=progress) as advance:
        for start in range(0, len(chunks), batch_size):
            batch = list(chunks[start : start + batch_size])
            yield from _batch_scores(loaded, batch)
            advance(len(batch))


def _batch_scores(loaded, batch) -> list[torch.Tensor | None]:
    from dpmtv.chunks import chunk_prompt

    usable = [index for index, chunk in enumerate(batch) if len(chunk) >= 2]
    out: list[torch.Tensor | None] = [None for _ in batch]
    if not usable:
        return out
    adapter = loaded.adapter
    geometry = adapter.geometry
    prompts = [chunk_prompt(batch[i], query="record", query_question="") for i in usable]
    captured = extract_selected_heads(adapter, prompts, all_heads(geometry))  # layer -> (B, H*d)
    stacked = np.stack([captured[layer] for layer in range(geometry.num_layers)], axis=1)  # (B, L, H*d)
    values = torch.from_numpy(
        stacked.reshape(len(usable), geometry.num_layers, geometry.num_heads, -1)
    ).float()
    queries = [_held_out_query(adapter, batch[i][-1]) for i in usable]
    scores = attribution_scores(adapter, queries, values, batch_size=len(usable))  # (B, L, H)
    for row, index in enumerate(usable):
        out[index] = scores[row]
    return out


def _held_out_query(adapter, record: Record) -> Query:
    prompt = zero_shot(Example(record.load_images(), record.question))
    return Query(prompt, first_answer_token(adapter, prompt, record.answer, where=record.where))


def _top_positive(scores: torch.Tensor, pool_mask: torch.Tensor, k_prime: int) -> tuple[int, ...]:
    """Flat ids of the ``k'`` largest positive pool scores, best first. (L, H) → (<= k',)"""
    flat = scores.flatten().masked_fill(~pool_mask.flatten(), float("-inf"))
    top = torch.topk(flat, min(k_prime, int(pool_mask.sum())))
    return tuple(int(i) for i, v in zip(top.indices, top.values) if v > 0)


def select_private(
    loaded: LoadedModel,
    chunks: Sequence[Sequence[Record]],
    *,
    plan: PrivateSelectionPlan,
    pool: HeadSet | None = None,
    batch_size: int = 4,
    rng: np.random.Generator | None = None,
    progress: bool = True,
) -> SelectionResult:
    """Votes of ``chunks`` → histogram → ``noisy_top_k(k, ε_sel)`` → the selected heads.

    ``chunks`` are the build's chunks (record lists, each cut to ``shots_per_chunk``), all of them
    (sequential composition) or the selection half (:func:`dpmtv.privacy.selection.parallel_halves`).
    ``rng`` switches to seeded numpy Gumbel noise: INSECURE, for tests and experiments only.
    """
    started = time.perf_counter()
    geometry = loaded.adapter.geometry
    pool_mask = mask_of(pool or all_heads(geometry), geometry).flatten()  # (L*H,) bool
    votes = chunk_votes(
        loaded,
        chunks,
        max_votes_per_chunk=plan.max_votes_per_chunk,
        pool=pool,
        batch_size=batch_size,
        progress=progress,
    )
    counts = vote_histogram(
        votes, num_candidates=pool_mask.numel(), max_votes_per_chunk=plan.max_votes_per_chunk
    )
    candidates = pool_mask.nonzero()[:, 0].numpy()  # (n,) flat ids of the public pool
    picked = noisy_top_k(
        counts[candidates], k=min(plan.k, len(candidates)), epsilon=plan.epsilon_selection, rng=rng
    )
    chosen = torch.zeros(pool_mask.numel(), dtype=torch.bool)
    chosen[candidates[list(picked)]] = True
    del counts, votes  # private intermediates: only the noisy choice leaves
    return SelectionResult(
        heads=heads_of(chosen.reshape(geometry.num_layers, geometry.num_heads)),
        method="private-noisy-top-k",
        metric="none",
        seconds=time.perf_counter() - started,
        details=_plan_details(plan, len(chunks), seeded=rng is not None),
    )


def _plan_details(plan: PrivateSelectionPlan, num_chunks: int, *, seeded: bool) -> dict:
    return {
        "k": plan.k,
        "max_votes_per_chunk": plan.max_votes_per_chunk,
        "epsilon_selection": plan.epsilon_selection,
        "selection_fraction": plan.budget.selection_fraction,
        "noise_scale": plan.noise_scale,
        "composition": plan.composition,
        "num_chunks_voting": num_chunks,
        "sampler": "seeded-numpy-gumbel (INSECURE)" if seeded else "opendp-gumbel",
        "event": event_to_json(plan.event),
        "budget": dataclasses.asdict(plan.budget),
    }
