"""The token-space DP-ICL baseline, model side: record each chunk's vote per query, then release
noisy-argmax answers (privacy maths in :mod:`dpmtv.privacy.vote`).

The chunk votes do not depend on ε, so they are collected once per seed; each ε (and each point
of the queries curve) only changes the per-query noise ``σ``. Chunks: the replace-one partition
of the demonstration pool into ``floor(N / s)`` disjoint chunks of ``s`` demonstrations, cut to
the first ``max_chunks`` (a data-independent choice). Chunk prompts are generated chunk-major so
each chunk's images are decoded once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dpmtv.eval.benchmarks import Benchmark
from dpmtv.eval.generation import ExampleCache, context_limit, derive_seed, generate_answers
from dpmtv.eval.methods import MethodContext, MethodOutput
from dpmtv.models.loading import LoadedModel
from dpmtv.privacy import SeededGaussianSampler, epsilon_of, partition_replace_one, seeded_rng
from dpmtv.privacy.noise import NoiseSampler
from dpmtv.privacy.vote import (
    calibrate_per_query_noise,
    dp_icl_epsilon,
    noisy_argmax,
    noisy_vote_event,
    vote_l2_sensitivity,
    votes_by_candidate,
)
from dpmtv.prompt_budget import fit_prompt
from dpmtv.prompts import Prompt


@dataclass(frozen=True)
class RecordedVotes:
    """Per query: the vote keys of the ``num_chunks`` chunk prompts, and the public candidates."""

    shots_per_chunk: int
    num_chunks: int
    votes: tuple[Counter, ...]
    candidates: tuple[tuple[str, ...], ...]

    def histogram(self, query: int) -> np.ndarray:
        return votes_by_candidate(self.votes[query], self.candidates[query])

    def fraction_outside_candidates(self) -> float:
        kept = sum(sum(self.votes[q][c] for c in set(self.candidates[q])) for q in range(len(self.votes)))
        total = self.num_chunks * len(self.votes)
        return 1.0 - kept / total if total else 0.0


def collect_votes(
    loaded: LoadedModel,
    benchmark: Benchmark,
    examples: ExampleCache,
    *,
    shots: int,
    seed: int,
    max_chunks: int | None,
    max_new_tokens: int,
    max_prompt_tokens: int,
    advance: Callable[[int], None] = lambda n: None,
) -> RecordedVotes:
    """Generate one answer per (chunk, query) and count the normalised answers per query.

    Every (chunk, query) prompt is generated on its own (:func:`_chunk_answers`), so a chunk's
    votes are a function of its own demonstrations and the public queries.
    """
    partition = partition_replace_one(
        len(benchmark.train), shots_per_chunk=shots, rng=seeded_rng(derive_seed(seed, "dp-icl", shots))
    )
    chunks = partition.chunks[:max_chunks] if max_chunks else partition.chunks
    answers = _chunk_answers(
        loaded,
        _chunk_prompts(benchmark, chunks, examples),
        max_new_tokens=max_new_tokens,
        max_prompt_tokens=max_prompt_tokens,
        advance=advance,
    )
    queries, scorer = benchmark.test, benchmark.scorer
    votes = [Counter() for _ in queries]
    for index, answer in enumerate(answers):  # chunk-major: index = chunk * Q + query
        query = index % len(queries)
        votes[query][scorer.vote_key(queries[query], answer)] += 1
    candidates = tuple(scorer.candidates(q) for q in queries)
    return RecordedVotes(shots, len(chunks), tuple(votes), candidates)


def _chunk_prompts(
    benchmark: Benchmark, chunks: Sequence[np.ndarray], examples: ExampleCache
) -> Iterator[Prompt]:
    for chunk in chunks:
        demos = tuple(examples(benchmark.train[int(i)], with_answer=True) for i in chunk)
        for query in benchmark.test:
            yield Prompt(demos, examples(query, with_answer=False))


def _chunk_answers(
    loaded: LoadedModel,
    prompts: Iterable[Prompt],
    *,
    max_new_tokens: int,
    max_prompt_tokens: int,
    advance: Callable[[int], None],
) -> list[str]:
    """Greedy answers, one prompt per forward pass (batching would let one chunk's prompt length
    change another's numerics). A prompt longer than ``max_prompt_tokens`` keeps its leading
    demonstrations that fit (:mod:`dpmtv.prompt_budget`); a query that does not fit alone gets the
    empty answer, a vote for no candidate."""
    answers = []
    for prompt in prompts:
        fitted = fit_prompt(loaded.adapter, prompt, max_prompt_tokens=max_prompt_tokens)
        if fitted is None:
            answers.append("")
        else:
            answers.extend(generate_answers(loaded, [fitted], max_new_tokens=max_new_tokens, batch_size=1))
        advance(1)
    return answers


def release_answers(votes: RecordedVotes, *, noise_std: float, sampler: NoiseSampler) -> list[str]:
    """One noisy-argmax vote per query: the released answers."""
    return [
        votes.candidates[q][noisy_argmax(votes.histogram(q), noise_std=noise_std, sampler=sampler)]
        for q in range(len(votes.votes))
    ]


def simulated_accuracy(
    votes: RecordedVotes, benchmark: Benchmark, *, noise_std: float, repeats: int, seed: int
) -> float:
    """Expected primary metric of the noisy vote at ``noise_std``, by ``repeats`` noisy releases
    per recorded query (queries whose primary metric is undefined are skipped)."""
    sampler = SeededGaussianSampler(derive_seed(seed, "queries-curve", noise_std))
    means = []
    for q, record in enumerate(benchmark.test):
        scores = benchmark.scorer.candidate_scores(record, votes.candidates[q])
        if np.all(np.isnan(scores)):
            continue
        histogram = votes.histogram(q)
        picks = [noisy_argmax(histogram, noise_std=noise_std, sampler=sampler) for _ in range(repeats)]
        means.append(float(np.mean(scores[picks])))
    return float(np.mean(means)) if means else float("nan")


def collect_dp_icl_votes(ctx: MethodContext, shots: int, seed: int) -> RecordedVotes:
    """The chunk votes of one seed (ε-independent; reused by every ε and the queries curve)."""
    s = ctx.settings
    num_chunks = len(ctx.benchmark.train) // shots
    if s.dp_icl_max_chunks:
        num_chunks = min(num_chunks, s.dp_icl_max_chunks)
    with ctx.progress(f"dp-icl:{shots} votes seed {seed}", num_chunks * len(ctx.benchmark.test)) as advance:
        return collect_votes(
            ctx.loaded,
            ctx.benchmark,
            ctx.examples,
            shots=shots,
            seed=seed,
            max_chunks=s.dp_icl_max_chunks,
            max_new_tokens=s.max_new_tokens,
            max_prompt_tokens=context_limit(ctx.loaded, s.context_limit) - s.max_new_tokens,
            advance=advance,
        )


@lru_cache(maxsize=256)
def per_query_noise_std(total_epsilon: float, delta: float, num_queries: int) -> float:
    """:func:`~dpmtv.privacy.vote.calibrate_per_query_noise`, cached (seeds share it)."""
    return calibrate_per_query_noise(total_epsilon=total_epsilon, delta=delta, num_queries=num_queries)


def run_dp_icl(ctx: MethodContext, votes: RecordedVotes, epsilon: float, seed: int) -> MethodOutput:
    """Release one noisy vote per query, with σ calibrated so the Q queries spend (ε, δ)."""
    delta, num_queries = ctx.settings.delta, len(ctx.benchmark.test)
    noise_std = per_query_noise_std(epsilon, delta, num_queries)
    sampler = SeededGaussianSampler(derive_seed(seed, "dp-icl-noise", epsilon))
    answers = release_answers(votes, noise_std=noise_std, sampler=sampler)
    details = {
        "num_queries": num_queries,
        "num_chunks": votes.num_chunks,
        "shots_per_chunk": votes.shots_per_chunk,
        "noise_std": noise_std,
        "noise_multiplier": noise_std / vote_l2_sensitivity(),
        "epsilon_per_query": epsilon_of(noisy_vote_event(noise_std=noise_std), delta=delta),
        "epsilon_spent": dp_icl_epsilon(noise_std=noise_std, delta=delta, num_queries=num_queries),
        "votes_outside_candidates": votes.fraction_outside_candidates(),
        "noise": "seeded (experiment)",
    }
    return MethodOutput(answers, details)
