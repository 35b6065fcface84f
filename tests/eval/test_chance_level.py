"""Chance level: what a uniformly random pick among the candidate answers scores; rows at chance
are marked, and the report explains why DP-ICL's pick among known answers sits there."""

from __future__ import annotations

import numpy as np
import pytest

from dpmtv.eval import LoadOptions, load_record_files
from dpmtv.eval.report import markdown_report, summarise
from dpmtv.eval.runner import EvalResults, RunResult, chance_level
from tests._markdown import assert_tables_valid
from tests.conftest import write_records


@pytest.fixture
def benchmark(tmp_path):
    # answers "thing 0", "thing 1", "thing 2": three candidates, one right per query
    return load_record_files(
        write_records(tmp_path / "p", 6), write_records(tmp_path / "q", 6, seed=1), LoadOptions()
    )


def test_chance_is_the_mean_score_of_a_uniform_pick_among_the_candidates(benchmark):
    scorer = benchmark.scorer
    expected = np.mean(
        [np.mean([scorer.score(q, c)["accuracy"] for c in scorer.candidates(q)]) for q in benchmark.test]
    )
    assert len(scorer.candidates(benchmark.test[0])) == 3
    assert chance_level(benchmark) == pytest.approx(expected, rel=1e-12)
    assert chance_level(benchmark) == pytest.approx(1 / 3, rel=1e-12)


DP_ICL_DETAILS = {
    "num_chunks": 1,
    "shots_per_chunk": 4,
    "num_queries": 6,
    "neighbouring_relation": "replace-one",
    "noise_std": 1.0,
    "epsilon_per_query": 0.1,
    "epsilon_spent": 1.0,
    "votes_outside_candidates": 0.0,
}


def _run(method, epsilon, seed, accuracy, privacy="private"):
    details = DP_ICL_DETAILS if method.startswith("dp-icl") else {}
    return RunResult(method, method, privacy, epsilon, seed, {"accuracy": accuracy}, details, [])


def test_rows_at_chance_are_marked_and_the_fallback_is_explained(benchmark):
    runs = [
        *(_run("dp-icl:4", 1.0, s, a) for s, a in enumerate((0.30, 0.36, 0.33))),  # ≈ 1/3: chance
        *(_run("dp-mtv", 1.0, s, a) for s, a in enumerate((0.90, 0.92, 0.91))),  # clearly above
        _run("zero-shot", None, None, 0.0, privacy="no private data"),  # below chance
    ]
    results = EvalResults(
        config={
            "model": "m",
            "seeds": [0, 1, 2],
            "delta": 1e-5,
            "heads": "all",
            "dpmtv_version": "x",
            "epsilons_evaluated": [1.0],
        },
        benchmark={**benchmark.describe(), "chance_level": chance_level(benchmark)},
        primary_metric="accuracy",
        runs=runs,
        queries_curve=None,
    )
    text = markdown_report(results, summarise(results))
    assert_tables_valid(text)
    assert "Chance level (accuracy): 0.333" in text
    assert "DP-ICL always answers with one of the candidate answers" in text
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "†" in rows["dp-icl:4"] and "†" in rows["zero-shot"] and "†" not in rows["dp-mtv"]
