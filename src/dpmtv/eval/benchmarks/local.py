"""Benchmarks that need no ``--benchmark-root``: your own record files, and the embedded suite."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpmtv.data.records import Record, load_records
from dpmtv.errors import ParameterError, RecordError
from dpmtv.eval.benchmarks.base import Benchmark, LoadOptions, finish
from dpmtv.eval.scorers import ExactMatchScorer

DEFAULT_EMBEDDED_TASK = "is_green"  # a held-out predicate of the embedded suite
DEFAULT_EMBEDDED_SIZES = (256, 64)  # demonstrations, queries


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


def load_embedded(root: Path | None, options: LoadOptions) -> Benchmark:
    """The embedded task suite (``embedded`` or ``embedded:TASK``), generated from the split
    seed — no files needed. Needs :mod:`dpmtv.embedded.generator`."""
    generator = _generator()
    name = options.task or DEFAULT_EMBEDDED_TASK
    try:
        task = generator.get_task(name)
    except ParameterError as exc:
        raise ParameterError(f"embedded benchmark: {exc.args[0]}") from None
    rng = np.random.default_rng(options.split_seed)
    n_train, n_test = (
        options.max_train or DEFAULT_EMBEDDED_SIZES[0],
        options.max_test or DEFAULT_EMBEDDED_SIZES[1],
    )
    train = _records(generator.sample_records(task, n_train, rng), f"embedded-{name}-train")
    test = _records(generator.sample_records(task, n_test, rng), f"embedded-{name}-test")
    return finish(
        f"embedded:{name}",
        train,
        test,
        lambda kept: ExactMatchScorer(task.answers),
        root=None,
        layout="",
        options=LoadOptions(split_seed=options.split_seed),
        notes=(f"embedded task {name} ({task.kind}), generated with split seed {options.split_seed}",),
    )


def _generator():
    try:
        from dpmtv.embedded import generator
    except ImportError as exc:
        raise RecordError(
            f"the embedded benchmark needs dpmtv.embedded.generator, which is missing: {exc}"
        ) from None
    absent = [name for name in ("get_task", "sample_records") if not hasattr(generator, name)]
    if absent:
        raise RecordError(
            f"the embedded benchmark needs dpmtv.embedded.generator.{absent[0]}, which this install lacks"
        )
    return generator


def _records(sampled, prefix: str) -> list[Record]:
    return [
        Record(
            f"{prefix}-{i}", (image,), sampled.question, answer, where=f"{prefix}[{i}]", has_explicit_id=True
        )
        for i, (image, answer) in enumerate(zip(sampled.images, sampled.answers, strict=True))
    ]
