r"""Private head selection, model side: per-chunk bounded votes, then the pure mechanism of
:mod:`dpmtv.privacy.noisy_top_k` (vote histogram → one-shot Gumbel noisy top-k).

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
:mod:`dpmtv.privacy.noisy_top_k`), so the score needs no clipping — clipping ``a_j`` would not
change which heads win by much and is irrelevant for privacy here. :func:`head_vote_counts` checks
the vote structure in code.

The histogram never leaves :func:`select_private`; only the noisy top-k does. The votes may be
computed on Ray workers (``executor``, :mod:`dpmtv.distributed`): a worker gets some chunks'
records and returns their votes; the driver checks that every chunk voted exactly once and
checks each vote's structure before counting it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from dpmtv._progress import progress_bar
from dpmtv.data.prompts import Example, Prompt, chunk_prompt, zero_shot
from dpmtv.data.records import Record
from dpmtv.distributed.batches import chunks_as_partition
from dpmtv.errors import ParameterError
from dpmtv.forward.executor import Executor, LocalExecutor
from dpmtv.forward.extract import extract_each_chunk
from dpmtv.forward.failed_chunks import chunk_or_none, finite_or_none
from dpmtv.forward.fixed_shapes import FixedShape, dummy_inputs, dummy_prompt
from dpmtv.forward.prompt_budget import resolve_max_prompt_tokens
from dpmtv.heads import HeadSet
from dpmtv.models.base import ModelAdapter
from dpmtv.models.loading import LoadedModel
from dpmtv.privacy import Partition
from dpmtv.privacy.events import event_to_json
from dpmtv.privacy.noisy_top_k import PrivateSelectionPlan, head_vote_counts, noisy_top_k
from dpmtv.selection._data import Query, all_heads, first_answer_token
from dpmtv.selection._patching import attribution_scores
from dpmtv.selection._search import heads_of, mask_of
from dpmtv.selection.result import SelectionResult

__all__ = ["HeadVotes", "chunk_votes", "select_private", "task_chunk_scores"]


def chunk_votes(
    loaded: LoadedModel,
    chunks: Sequence[Sequence[Record]],
    *,
    max_votes_per_chunk: int,
    pool: HeadSet | None = None,
    max_prompt_tokens: int | None = None,
    progress: bool = True,
    executor: Executor | None = None,
    prepare_workers: int | None = None,
) -> list[tuple[int, ...]]:
    """One vote tuple per chunk: flat head ids ``layer·H + head`` (module docstring), computed by
    ``executor`` (default: this process).

    Chunks with fewer than two records (no demonstration), or whose query alone exceeds
    ``max_prompt_tokens`` (:mod:`dpmtv.forward.prompt_budget`), cast no vote.
    """
    records, partition = chunks_as_partition(chunks)
    task = HeadVotes(
        max_votes_per_chunk=max_votes_per_chunk,
        pool=pool,
        max_prompt_tokens=max_prompt_tokens,
        shots_per_chunk=max((len(chunk) for chunk in chunks), default=0),
        prepare_workers=prepare_workers,
    )
    cast = iter((executor or LocalExecutor()).run(loaded, records, partition, task, progress=progress))
    return [next(cast) if chunk else () for chunk in chunks]  # an empty chunk casts no vote


@dataclass(frozen=True)
class HeadVotes:
    """The chunk task of private selection (:class:`dpmtv.forward.executor.ChunkTask`): each non-empty
    chunk's vote, in chunk order."""

    max_votes_per_chunk: int
    pool: HeadSet | None
    max_prompt_tokens: int | None
    shots_per_chunk: int
    prepare_workers: int | None = None  # processes preparing chunk inputs (dpmtv.forward._prepare)
    private_batch_size: int = 1  # resolved by the build (dpmtv.pipeline.private_batching)
    description: ClassVar[str] = "private head votes"

    def run(
        self, loaded: LoadedModel, records: Sequence[Record], partition: Partition, *, progress: bool
    ) -> list[tuple[int, ...]]:
        geometry = loaded.adapter.geometry
        pool_mask = mask_of(self.pool or all_heads(geometry), geometry)  # (L, H) bool
        scores = task_chunk_scores(self, loaded, records, partition, progress=progress)
        return [() if s is None else _top_positive(s, pool_mask, self.max_votes_per_chunk) for s in scores]

    def combine(self, results: list[list[tuple[int, ...]]]) -> list[tuple[int, ...]]:
        return [vote for votes in results for vote in votes]


class _ChunkScoresTask(Protocol):
    """What :func:`task_chunk_scores` reads of a chunk task (:class:`HeadVotes`,
    :class:`~dpmtv.selection.candidates.CandidateUtilities`)."""

    @property
    def shots_per_chunk(self) -> int: ...
    @property
    def max_prompt_tokens(self) -> int | None: ...
    @property
    def prepare_workers(self) -> int | None: ...
    @property
    def private_batch_size(self) -> int: ...


def task_chunk_scores(
    task: _ChunkScoresTask,
    loaded: LoadedModel,
    records: Sequence[Record],
    partition: Partition,
    *,
    progress: bool,
    scorer: Callable[..., torch.Tensor | None] | None = None,
) -> Iterator[torch.Tensor | None]:
    """:func:`chunk_head_scores` of ``partition``'s non-empty chunks of ``records``, each cut to
    ``task.shots_per_chunk`` records, with the chunk task's prompt budget, prepare workers and
    batch size (``task``: :class:`HeadVotes` or
    :class:`~dpmtv.selection.candidates.CandidateUtilities`), keyed by the chunks' public ids."""
    cut = task.shots_per_chunk
    items = partition.nonempty_items()
    return chunk_head_scores(
        loaded,
        [[records[int(i)] for i in chunk[:cut]] for _, chunk in items],
        max_prompt_tokens=task.max_prompt_tokens,
        progress=progress,
        prepare_workers=task.prepare_workers,
        private_batch_size=task.private_batch_size,
        chunk_ids=[j for j, _ in items],
        shots_per_chunk=cut,
        scorer=scorer,
    )


def chunk_head_scores(
    loaded: LoadedModel,
    chunks: Sequence[Sequence[Record]],
    *,
    max_prompt_tokens: int | None = None,
    progress: bool = True,
    prepare_workers: int | None = None,
    private_batch_size: int = 1,
    chunk_ids: Sequence[int] | None = None,
    shots_per_chunk: int | None = None,
    scorer: Callable[..., torch.Tensor | None] | None = None,
) -> Iterator[torch.Tensor | None]:
    """Per chunk, the attribution score of every head (L, H) float32, or None (no vote); with
    ``scorer``, ``scorer(loaded, chunk, captured, chunk_id=j)`` instead (the candidate utilities
    of :mod:`dpmtv.selection.candidates`), ``captured`` the chunk prompt's last-token outputs of
    every head ``{layer: (1, H*d)}`` or None, ``j`` the chunk's public id (``chunk_ids``).

    Each chunk's prompt gets its own forward pass, or with ``private_batch_size`` above 1 (and a
    family that allows it) the row its chunk id (``chunk_ids``, default the positions) assigns in
    a pass of fixed public shapes (:mod:`dpmtv.forward.fixed_shapes`; its dummy rows have the image
    count of a chunk of the public ``shots_per_chunk``); then its own backward pass. Either
    way its scores are a function of its own records; ``max_prompt_tokens`` (None: the model's
    position limit) cuts its prompt by the public rule of :mod:`dpmtv.forward.prompt_budget`. The chunk
    prompts are rendered and encoded ahead in ``prepare_workers`` processes (:mod:`dpmtv.forward._prepare`).
    A chunk whose computation raises or gives NaN/inf scores casts no vote
    (:mod:`dpmtv.forward.failed_chunks`).
    """
    adapter = loaded.adapter
    budget = resolve_max_prompt_tokens(adapter, max_prompt_tokens)
    ids = range(len(chunks)) if chunk_ids is None else chunk_ids
    voting = [(j, chunk) for j, chunk in zip(ids, chunks, strict=True) if len(chunk) >= 2]  # else no demo
    captured = extract_each_chunk(
        adapter,
        _VotePrompts([chunk for _, chunk in voting]),
        all_heads(adapter.geometry),
        max_prompt_tokens=budget,
        prepare_workers=prepare_workers,
        fixed_shape=_vote_shape(adapter, private_batch_size, budget, shots_per_chunk),
        slots=[j for j, _ in voting],
    )
    try:
        with progress_bar("private head votes", len(chunks), enabled=progress) as advance:
            for j, chunk in zip(ids, chunks, strict=True):
                if len(chunk) < 2:  # no demonstration: no vote
                    yield None
                elif scorer is None:
                    yield finite_or_none(chunk_or_none(_chunk_scores, loaded, chunk, next(captured)))
                else:
                    yield finite_or_none(chunk_or_none(scorer, loaded, chunk, next(captured), chunk_id=j))
                advance(1)
    finally:
        captured.close()


def _vote_shape(
    adapter: ModelAdapter, rows: int, budget: int, shots_per_chunk: int | None
) -> FixedShape | None:
    """The fixed public shape of the vote passes, or None (one chunk per pass): the build's
    resolved batch size, where the family allows it and the dummy row (a full chunk's image count,
    from the public shots per chunk, never from the chunks themselves) fits the budget."""
    if rows == 1 or not adapter.fixed_shape_batches:
        return None
    if shots_per_chunk is None:
        raise ParameterError("a fixed-shape vote pass needs the public shots_per_chunk for its dummy rows")
    shape = FixedShape(rows, budget, dummy_prompt(shots_per_chunk - 1))
    return shape if dummy_inputs(adapter, shape) is not None else None


class _VotePrompts(Sequence[Prompt]):
    """The voting chunks' prompts, rendered (images decoded) only where they are encoded."""

    def __init__(self, chunks: list[Sequence[Record]]):
        self._chunks = chunks

    def __len__(self) -> int:
        return len(self._chunks)

    def __getitem__(self, index: int) -> Prompt:  # type: ignore[override]  # no slices: read one by one
        return chunk_prompt(self._chunks[index], query="record", query_question="")


def _chunk_scores(
    loaded: LoadedModel, chunk: Sequence[Record], captured: dict[int, np.ndarray] | None
) -> torch.Tensor | None:
    if captured is None:  # dropped: the query alone exceeds the budget, or the pass failed
        return None
    geometry = loaded.adapter.geometry
    stacked = np.stack([captured[layer][0] for layer in range(geometry.num_layers)])  # (L, H*d)
    values = torch.from_numpy(stacked.reshape(1, geometry.num_layers, geometry.num_heads, -1)).float()
    query = _held_out_query(loaded.adapter, chunk[-1])
    return attribution_scores(loaded.adapter, [query], values, batch_size=1)[0]  # (L, H)


def _held_out_query(adapter: ModelAdapter, record: Record) -> Query:
    prompt = zero_shot(Example(record.load_images(), record.question))
    return Query(prompt, first_answer_token(adapter, prompt, record.answer, where=record.where))


def _top_positive(scores: torch.Tensor, pool_mask: torch.Tensor, k_prime: int) -> tuple[int, ...]:
    """Flat ids of the ``k'`` largest positive pool scores, best first. (L, H) → (<= k',)"""
    flat = scores.flatten().masked_fill(~pool_mask.flatten(), float("-inf"))
    top = torch.topk(flat, min(k_prime, int(pool_mask.sum())))
    return tuple(int(i) for i, v in zip(top.indices, top.values) if v > 0)


def select_private(
    loaded: LoadedModel,
    records: Sequence[Record],
    partition: Partition,
    *,
    shots_per_chunk: int,
    plan: PrivateSelectionPlan,
    pool: HeadSet | None = None,
    max_prompt_tokens: int | None = None,
    rng: np.random.Generator | None = None,
    progress: bool = True,
    executor: Executor | None = None,
    prepare_workers: int | None = None,
    private_batch_size: int = 1,
) -> SelectionResult:
    """Votes of ``partition``'s chunks of ``records`` → histogram → ``noisy_top_k(k, ε_sel)`` →
    the selected heads.

    ``partition`` is the build's partition, all of it (sequential composition) or the selection
    half (:func:`dpmtv.privacy.noisy_top_k.parallel_halves`); each chunk is cut to
    ``shots_per_chunk`` records and only non-empty chunks vote (an empty chunk casts no vote), so
    a huge public ``m`` costs nothing; the metadata records the public ``m``, never the
    data-dependent count of non-empty chunks.
    ``rng`` switches to seeded numpy Gumbel noise: INSECURE, for tests and experiments only.
    ``executor`` computes the votes (default: this process); the noise is drawn here.
    """
    started = time.perf_counter()
    geometry = loaded.adapter.geometry
    pool_mask = mask_of(pool or all_heads(geometry), geometry).flatten()  # (L*H,) bool
    task = HeadVotes(
        max_votes_per_chunk=plan.max_votes_per_chunk,
        pool=pool,
        max_prompt_tokens=max_prompt_tokens,
        shots_per_chunk=shots_per_chunk,
        prepare_workers=prepare_workers,
        private_batch_size=private_batch_size,
    )
    votes = (executor or LocalExecutor()).run(loaded, records, partition, task, progress=progress)
    counts = head_vote_counts(
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
        details=_plan_details(plan, partition.num_chunks, seeded=rng is not None),
    )


def _plan_details(plan: PrivateSelectionPlan, num_chunks: int, *, seeded: bool) -> dict[str, Any]:
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
