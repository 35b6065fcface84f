"""DP-ICL's release and the queries-curve simulation on recorded votes (no model needed)."""

from __future__ import annotations

from collections import Counter

import pytest

from dpmtv.data.records import Record
from dpmtv.eval.benchmarks import Benchmark
from dpmtv.eval.dp_icl import RecordedVotes, per_query_noise_std, release_answers, simulated_accuracy
from dpmtv.eval.scorers import ExactMatchScorer
from dpmtv.privacy import SeededGaussianSampler

VOCABULARY = ("blue", "green", "red", "white", "yellow")


def _setup(num_queries: int = 20, num_chunks: int = 40):
    queries = tuple(Record(f"q{i}", (), "colour?", "red", has_explicit_id=True) for i in range(num_queries))
    benchmark = Benchmark("toy", (), queries, ExactMatchScorer(VOCABULARY))
    votes = RecordedVotes(
        shots_per_chunk=4,
        num_chunks=num_chunks,
        votes=tuple(Counter({"red": num_chunks - 2, "a lizard": 2}) for _ in queries),
        candidates=tuple(VOCABULARY for _ in queries),
    )
    return benchmark, votes


def test_release_is_the_majority_when_noise_is_small():
    benchmark, votes = _setup()
    answers = release_answers(votes, noise_std=0.5, sampler=SeededGaussianSampler(0))
    assert answers == ["red"] * len(benchmark.test)
    assert votes.fraction_outside_candidates() == pytest.approx(2 / 40)


def test_queries_curve_falls_to_chance_as_the_per_query_budget_shrinks():
    benchmark, votes = _setup()
    few, many = (per_query_noise_std(1.0, 1e-5, q) for q in (1, 10_000))
    assert few == pytest.approx(5.2759, rel=1e-3) and many == pytest.approx(100 * few, rel=1e-3)
    # 38 votes against σ ≈ 5.3: the majority wins almost always
    assert simulated_accuracy(votes, benchmark, noise_std=few, repeats=50, seed=0) > 0.95
    # σ ≈ 528 drowns 38 votes: about 1/5 (chance over 5 candidates); 1000 draws, generous bounds
    assert 0.1 < simulated_accuracy(votes, benchmark, noise_std=many, repeats=50, seed=0) < 0.35
