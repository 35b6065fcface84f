"""The token-space DP-ICL baseline, model side: build each query's ensemble of prompts, run the
vote forward pass, count the votes, then release noisy-argmax answers (privacy maths in
:mod:`dpmtv.privacy.noisy_vote`).

Two ensembles:

* **full partition** (``dp-icl:S``): the replace-one partition of the pool into
  ``floor(N / S)`` disjoint chunks of ``S`` demonstrations, the same chunks for every query,
  optionally cut to the first ``max_chunks`` (a data-independent choice, no amplification).
  Accounted as ``Q`` Gaussian votes; neighbouring relation replace-one.
* **Poisson-subsampled** (``dp-icl:S:M``, DP-ICL as Wu et al., ICLR 2024 run it): for EACH query
  a fresh Poisson sample of the pool at the PUBLIC rate ``q`` (``--dp-icl-sampling-rate``: each
  record joins with probability ``q``, whatever ``N`` is), each sampled record sent to one of the
  query's ``M`` prompts drawn uniformly (``q·N/M`` demonstrations per prompt on average; ``S`` is
  the label's nominal shots, recorded next to the measured mean); accounted with
  ``PoissonSampledDpEvent(q, ·)`` composed over queries; neighbouring relation add/remove-one
  (where the amplification holds). ``q`` must not be derived from ``N`` (e.g. ``M·S/N``): under
  add/remove-one ``N`` is private, and the accounted event would then depend on it.

The votes do not depend on ε, so they are collected once per seed; each ε (and each point of the
queries curve) only changes the per-query noise ``σ``. The sampling is seeded from the run seed:
these are experiments, not private releases.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dpmtv.data.prompts import Prompt
from dpmtv.eval.benchmarks import Benchmark
from dpmtv.eval.generation import ExampleCache, context_limit, derive_seed, generate_answers
from dpmtv.eval.methods import MethodContext, MethodOutput, check_sampling_probability
from dpmtv.forward.prompt_budget import fit_prompt
from dpmtv.models.loading import LoadedModel
from dpmtv.privacy import SeededGaussianSampler, epsilon_of, partition_replace_one, seeded_rng
from dpmtv.privacy.noise import NoiseSampler
from dpmtv.privacy.noisy_vote import (
    calibrate_per_query_noise,
    calibrate_subsampled_query_noise,
    dp_icl_epsilon,
    noisy_argmax,
    noisy_vote_event,
    subsampled_dp_icl_epsilon,
    subsampled_vote_event,
    vote_l2_sensitivity,
    votes_by_candidate,
)

FULL_PARTITION_RELATION = "replace-one"
SUBSAMPLED_RELATION = "add-remove-one"


@dataclass(frozen=True)
class RecordedVotes:
    """Per query: the vote keys of its ``num_prompts`` prompts, and the public candidates.
    ``sampling_probability`` is None for the full partition, else the Poisson rate ``q``."""

    shots_per_chunk: int
    num_chunks: int  # prompts per query
    votes: tuple[Counter, ...]
    candidates: tuple[tuple[str, ...], ...]
    sampling_probability: float | None = None
    mean_shots: float | None = None  # subsampled: demonstrations per prompt, averaged

    @property
    def relation(self) -> str:
        return FULL_PARTITION_RELATION if self.sampling_probability is None else SUBSAMPLED_RELATION

    def histogram(self, query: int) -> np.ndarray:
        return votes_by_candidate(self.votes[query], self.candidates[query])

    def fraction_outside_candidates(self) -> float:
        kept = sum(sum(self.votes[q][c] for c in set(self.candidates[q])) for q in range(len(self.votes)))
        total = self.num_chunks * len(self.votes)
        return 1.0 - kept / total if total else 0.0


# ---- ensembles (which demonstrations each prompt holds) -------------------------------------
def full_partition_chunks(
    num_records: int, *, shots: int, seed: int, max_chunks: int | None
) -> list[np.ndarray]:
    """The replace-one partition into disjoint chunks of ``shots``, cut to ``max_chunks``."""
    partition = partition_replace_one(
        num_records, shots_per_chunk=shots, rng=seeded_rng(derive_seed(seed, "dp-icl", shots))
    )
    return list(partition.chunks[:max_chunks] if max_chunks else partition.chunks)


def poisson_ensemble(
    num_records: int, *, num_prompts: int, sampling_probability: float, rng: np.random.Generator
) -> list[np.ndarray]:
    """One query's ensemble from three uniform draws per record (:func:`ensemble_from_draws`)."""
    return ensemble_from_draws(
        rng.random((num_records, 3)), num_prompts=num_prompts, sampling_probability=sampling_probability
    )


def ensemble_from_draws(
    draws: np.ndarray, *, num_prompts: int, sampling_probability: float, record_ids: np.ndarray | None = None
) -> list[np.ndarray]:
    """Row ``i`` of ``draws`` (``(N, 3)`` uniforms) decides record ``i`` alone: it joins when
    ``u₀ < q`` (Poisson sampling), goes to prompt ``floor(u₁·M)`` and sits in the prompt in the
    order of ``u₂``. Since no record's draws touch another's, adding or removing a record changes
    at most the one prompt it lands in (the coupling behind Δ = √2 in :mod:`dpmtv.privacy.noisy_vote`)."""
    ids = np.arange(len(draws)) if record_ids is None else np.asarray(record_ids)
    joined = draws[:, 0] < sampling_probability
    prompt = np.minimum((draws[:, 1] * num_prompts).astype(np.int64), num_prompts - 1)
    out = []
    for p in range(num_prompts):
        members = np.flatnonzero(joined & (prompt == p))
        out.append(ids[members[np.argsort(draws[members, 2], kind="stable")]])
    return out


def subsampled_ensembles(
    num_records: int,
    num_queries: int,
    *,
    shots: int,
    num_prompts: int,
    sampling_probability: float,
    seed: int,
) -> tuple[float, list[list[np.ndarray]]]:
    """The public ``q`` and a fresh :func:`poisson_ensemble` per query (seeded from the run seed
    and ``shots``). ``q`` is the given public rate, never a function of ``num_records``."""
    q = check_sampling_probability(sampling_probability)
    rng = seeded_rng(derive_seed(seed, "dp-icl-poisson", shots, num_prompts))
    return q, [
        poisson_ensemble(num_records, num_prompts=num_prompts, sampling_probability=q, rng=rng)
        for _ in range(num_queries)
    ]


# ---- the vote forward pass -------------------------------------------------------------------
def run_vote_forward(
    loaded: LoadedModel,
    prompts: Iterable[Prompt],
    *,
    max_new_tokens: int,
    max_prompt_tokens: int,
    advance: Callable[[int], None] = lambda n: None,
) -> list[str]:
    """The model side of the vote: one greedy answer per prompt, in prompt order.

    Every prompt is generated on its own (batching would let one chunk's prompt length change
    another's numerics), so a prompt's vote is a function of its own demonstrations and the public
    query. A prompt longer than ``max_prompt_tokens`` keeps its leading demonstrations that fit
    (:mod:`dpmtv.forward.prompt_budget`); a query that does not fit alone gets the empty answer, a vote for
    no candidate."""
    answers = []
    for prompt in prompts:
        fitted = fit_prompt(loaded.adapter, prompt, max_prompt_tokens=max_prompt_tokens)
        if fitted is None:
            answers.append("")
        else:
            answers.extend(generate_answers(loaded, [fitted], max_new_tokens=max_new_tokens, batch_size=1))
        advance(1)
    return answers


def _full_partition_prompts(
    benchmark: Benchmark, chunks: Sequence[np.ndarray], examples: ExampleCache
) -> Iterator[Prompt]:
    """Chunk-major, so each chunk's images are decoded once: index = chunk * Q + query."""
    for chunk in chunks:
        demos = tuple(examples(benchmark.train[int(i)], with_answer=True) for i in chunk)
        for query in benchmark.test:
            yield Prompt(demos, examples(query, with_answer=False))


def _ensemble_prompts(
    benchmark: Benchmark, ensembles: Sequence[Sequence[np.ndarray]], examples: ExampleCache
) -> Iterator[Prompt]:
    """Query-major: index = query * M + prompt."""
    for query, ensemble in zip(benchmark.test, ensembles, strict=True):
        target = examples(query, with_answer=False)
        for members in ensemble:
            yield Prompt(tuple(examples(benchmark.train[int(i)], with_answer=True) for i in members), target)


def _count(benchmark: Benchmark, answers: Sequence[str], query_of: Callable[[int], int]) -> list[Counter]:
    queries, scorer = benchmark.test, benchmark.scorer
    votes = [Counter() for _ in queries]
    for index, answer in enumerate(answers):
        query = query_of(index)
        votes[query][scorer.vote_key(queries[query], answer)] += 1
    return votes


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
    """Full partition: one answer per (chunk, query), counted per query."""
    chunks = full_partition_chunks(len(benchmark.train), shots=shots, seed=seed, max_chunks=max_chunks)
    answers = run_vote_forward(
        loaded,
        _full_partition_prompts(benchmark, chunks, examples),
        max_new_tokens=max_new_tokens,
        max_prompt_tokens=max_prompt_tokens,
        advance=advance,
    )
    num_queries = len(benchmark.test)
    votes = _count(benchmark, answers, lambda index: index % num_queries)
    candidates = tuple(benchmark.scorer.candidates(q) for q in benchmark.test)
    return RecordedVotes(shots, len(chunks), tuple(votes), candidates)


def collect_subsampled_votes(
    loaded: LoadedModel,
    benchmark: Benchmark,
    examples: ExampleCache,
    *,
    shots: int,
    num_prompts: int,
    sampling_probability: float,
    seed: int,
    max_new_tokens: int,
    max_prompt_tokens: int,
    advance: Callable[[int], None] = lambda n: None,
) -> RecordedVotes:
    """Poisson-subsampled ensembles at the public rate ``q``: one answer per (query, prompt),
    counted per query."""
    q, ensembles = subsampled_ensembles(
        len(benchmark.train),
        len(benchmark.test),
        shots=shots,
        num_prompts=num_prompts,
        sampling_probability=sampling_probability,
        seed=seed,
    )
    answers = run_vote_forward(
        loaded,
        _ensemble_prompts(benchmark, ensembles, examples),
        max_new_tokens=max_new_tokens,
        max_prompt_tokens=max_prompt_tokens,
        advance=advance,
    )
    votes = _count(benchmark, answers, lambda index: index // num_prompts)
    candidates = tuple(benchmark.scorer.candidates(r) for r in benchmark.test)
    mean_shots = float(np.mean([len(m) for ensemble in ensembles for m in ensemble]))
    return RecordedVotes(shots, num_prompts, tuple(votes), candidates, q, mean_shots)


# ---- release -----------------------------------------------------------------------------------
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


def collect_dp_icl_votes(
    ctx: MethodContext, shots: int, seed: int, num_prompts: int | None = None
) -> RecordedVotes:
    """The votes of one seed (ε-independent; reused by every ε and the queries curve):
    subsampled ensembles of ``num_prompts`` prompts when given, else the full partition."""
    s, benchmark = ctx.settings, ctx.benchmark
    common = dict(
        max_new_tokens=s.max_new_tokens,
        max_prompt_tokens=context_limit(ctx.loaded, s.context_limit) - s.max_new_tokens,
    )
    if num_prompts is not None:
        total = num_prompts * len(benchmark.test)
        with ctx.progress(f"dp-icl:{shots}:{num_prompts} votes seed {seed}", total) as advance:
            return collect_subsampled_votes(
                ctx.loaded,
                benchmark,
                ctx.examples,
                shots=shots,
                num_prompts=num_prompts,
                sampling_probability=s.dp_icl_sampling_rate,
                seed=seed,
                advance=advance,
                **common,
            )
    num_chunks = len(benchmark.train) // shots
    if s.dp_icl_max_chunks:
        num_chunks = min(num_chunks, s.dp_icl_max_chunks)
    with ctx.progress(f"dp-icl:{shots} votes seed {seed}", num_chunks * len(benchmark.test)) as advance:
        return collect_votes(
            ctx.loaded,
            benchmark,
            ctx.examples,
            shots=shots,
            seed=seed,
            max_chunks=s.dp_icl_max_chunks,
            advance=advance,
            **common,
        )


@lru_cache(maxsize=256)
def per_query_noise_std(
    total_epsilon: float, delta: float, num_queries: int, sampling_probability: float | None = None
) -> float:
    """The calibrated per-query σ, cached (seeds share it): Gaussian votes composed over the
    queries (full partition), or Poisson-subsampled ones when ``sampling_probability`` is given."""
    if sampling_probability is None:
        return calibrate_per_query_noise(total_epsilon=total_epsilon, delta=delta, num_queries=num_queries)
    return calibrate_subsampled_query_noise(
        total_epsilon=total_epsilon,
        delta=delta,
        num_queries=num_queries,
        sampling_probability=sampling_probability,
    )


def run_dp_icl(ctx: MethodContext, votes: RecordedVotes, epsilon: float, seed: int) -> MethodOutput:
    """Release one noisy vote per query, with σ calibrated so the Q queries spend (ε, δ)."""
    delta, num_queries, q = ctx.settings.delta, len(ctx.benchmark.test), votes.sampling_probability
    noise_std = per_query_noise_std(epsilon, delta, num_queries, q)
    sampler = SeededGaussianSampler(derive_seed(seed, "dp-icl-noise", epsilon))
    answers = release_answers(votes, noise_std=noise_std, sampler=sampler)
    details = {
        "num_queries": num_queries,
        "num_chunks": votes.num_chunks,
        "shots_per_chunk": votes.shots_per_chunk,
        "noise_std": noise_std,
        "noise_multiplier": noise_std / vote_l2_sensitivity(votes.relation),
        "neighbouring_relation": votes.relation,
        **_accounting(votes, noise_std=noise_std, delta=delta, num_queries=num_queries),
        "votes_outside_candidates": votes.fraction_outside_candidates(),
        "noise": "seeded (experiment)",
    }
    return MethodOutput(answers, details)


def _accounting(votes: RecordedVotes, *, noise_std: float, delta: float, num_queries: int) -> dict:
    q = votes.sampling_probability
    if q is None:
        return {
            "ensemble": "full partition",
            "epsilon_per_query": epsilon_of(noisy_vote_event(noise_std=noise_std), delta=delta),
            "epsilon_spent": dp_icl_epsilon(noise_std=noise_std, delta=delta, num_queries=num_queries),
        }
    per_query = subsampled_vote_event(noise_std=noise_std, sampling_probability=q)
    return {
        "ensemble": "Poisson-subsampled per query",
        "sampling_probability": q,
        "mean_shots_per_prompt": votes.mean_shots,
        "epsilon_per_query": epsilon_of(per_query, delta=delta),
        "epsilon_spent": subsampled_dp_icl_epsilon(
            noise_std=noise_std, sampling_probability=q, delta=delta, num_queries=num_queries
        ),
    }
