"""Your own record files as a benchmark (no ``--benchmark-root``); the embedded suite is
:mod:`dpmtv.eval.benchmarks.embedded`."""

from __future__ import annotations

from pathlib import Path

from dpmtv.data.records import load_records
from dpmtv.eval.benchmarks.base import Benchmark, LoadOptions, finish
from dpmtv.eval.scorers import ExactMatchScorer


def load_record_files(private: str | Path, queries: str | Path, options: LoadOptions) -> Benchmark:
    """``--data private.jsonl --eval-data test.jsonl``: scored by normalised exact match."""
    train = load_records(private)
    test = load_records(queries, require_answer=True)
    return finish(
        "records",
        train,
        test,
        ExactMatchScorer.for_queries,
        root=None,
        layout="",
        options=options,
        notes=(f"demonstrations: {private}", f"queries: {queries}"),
    )
