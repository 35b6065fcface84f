"""An evaluation report a newcomer can read: every table parses as Markdown, the scoring line is
in plain words, ``n`` says what it counts, and work that does not run shows no progress."""

from __future__ import annotations

import re

import pytest

from dpmtv.eval import LoadOptions, load_record_files
from dpmtv.eval.report import markdown_report, summarise
from dpmtv.eval.runner import EvalResults, RunResult
from tests._markdown import assert_tables_valid
from tests.conftest import write_records

CONFIG = {
    "model": "m",
    "seeds": [0],
    "delta": 1e-5,
    "heads": "all",
    "dpmtv_version": "x",
    "epsilons_evaluated": [1.0],
}


@pytest.fixture
def benchmark(tmp_path):
    return load_record_files(
        write_records(tmp_path / "p", 6), write_records(tmp_path / "q", 6, seed=1), LoadOptions()
    )


def _results(benchmark, runs, curve=None):
    described = benchmark.describe()
    return EvalResults(CONFIG, described, primary_metric="accuracy", runs=runs, queries_curve=curve)


def test_a_queries_table_without_dp_icl_parses(benchmark):
    """DP-MTV run, DP-ICL not: the queries table had a header of 3 cells over a separator of 2."""
    runs = [RunResult("dp-mtv", "DP-MTV", "private", 1.0, 0, {"accuracy": 0.5}, {}, [])]
    curve = {
        "total_epsilon": 1.0,
        "num_queries": [1, 10],
        "dp-mtv": {"0": 0.5},
        "dp-icl": {},
        "dp_icl_noise_std": {},
        "dp_icl_relation": {},
        "dp_mtv_relation": "replace-one",
    }
    text = markdown_report(_results(benchmark, runs, curve), summarise(_results(benchmark, runs, curve)))
    assert assert_tables_valid(text) == 2
    assert "DP-ICL was not run" in text


def test_the_scoring_line_is_plain_words_and_n_counts_seeds(benchmark):
    runs = [RunResult("zero-shot", "zero-shot", "no private data", None, 0, {"accuracy": 0.5}, {}, [])]
    text = markdown_report(_results(benchmark, runs), summarise(_results(benchmark, runs)))
    (scoring,) = [line for line in text.splitlines() if line.startswith("Scoring:")]
    assert "``" not in scoring and not re.search(r"[A-Z][a-z]+Scorer|record\.answer", scoring), scoring
    assert "(n=" not in text and "0.500 (1 seed, no interval)" in text
    assert "over the 6 queries" in text
    assert_tables_valid(text)


def test_work_that_does_not_run_shows_no_progress(capsys):
    from dpmtv._progress import private_totals, progress_bar

    with progress_bar("queries curve (simulated votes)", 0) as advance:
        advance(0)
    assert capsys.readouterr().err == ""
    with private_totals(), progress_bar("private stage", 0):  # a private zero is shown as any other
        pass
    assert "private stage" in capsys.readouterr().err
