"""What every benchmark loader returns, and the shared checks that make missing files clear."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpmtv.data.records import Record
from dpmtv.errors import ParameterError, RecordError
from dpmtv.eval.scorers import Scorer, normalise_answer

#: Appended to open questions (the usual short-answer VQA instruction), for every method alike.
SHORT_ANSWER = "Answer the question using a single word or phrase."
#: Appended to option questions.
OPTION_ANSWER = "Answer with the option's letter from the given choices directly."


@dataclass(frozen=True)
class LoadOptions:
    """Sizes and the split seed. The split seed is fixed for a run, so every method and every
    method seed sees the same demonstration pool and the same queries."""

    max_train: int | None = None  # demonstration pool size (episodes for classification)
    max_test: int | None = None  # number of queries (episodes for classification)
    split_seed: int = 0
    task: str | None = None  # benchmark-specific variant, e.g. the embedded task name


@dataclass(frozen=True)
class Benchmark:
    """A demonstration pool (``train``, treated as PRIVATE), queries (``test``) and a scorer."""

    name: str
    train: tuple[Record, ...]
    test: tuple[Record, ...]
    scorer: Scorer
    notes: tuple[str, ...] = field(default_factory=tuple)
    details: Mapping[str, Any] = field(default_factory=dict)  # public facts, in every report
    #: ``facts(picks, queries)``: what each ICL prompt's demonstrations (``picks``, indices into
    #: ``train`` per query of ``queries``) hold, from the PRIVATE pool: for the NON-PRIVATE ICL
    #: rows only (:func:`dpmtv.eval.methods.run_icl`); None where the benchmark says nothing
    demonstration_facts: Callable[[Sequence[np.ndarray], Sequence[Record]], dict[str, Any]] | None = field(
        default=None, repr=False, compare=False
    )

    def describe(self) -> dict[str, Any]:
        return {
            **self.details,
            "name": self.name,
            "num_train": len(self.train),
            "num_test": len(self.test),
            "metrics": list(self.scorer.metrics),
            "primary_metric": self.scorer.primary,
            "scoring": self.scorer.description,
            "notes": list(self.notes),
        }


def missing(name: str, path: Path, root: Path, layout: str) -> RecordError:
    """The error for a missing file or folder: names it and shows the expected layout."""
    return RecordError(
        f"{name}: '{path}' does not exist under --benchmark-root '{root}'. Expected layout:\n{layout}"
    )


def require(path: Path, *, name: str, root: Path, layout: str) -> Path:
    if not path.exists():
        raise missing(name, path, root, layout)
    return path


def first_existing(root: Path, candidates: Sequence[str]) -> Path:
    """The first of ``root/c`` that exists (published archives unpack with or without a top
    folder), else ``root`` itself."""
    for candidate in candidates:
        if (root / candidate).is_dir():
            return root / candidate
    return root


def read_json(path: Path, *, name: str, root: Path, layout: str) -> Any:
    require(path, name=name, root=root, layout=layout)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"{name}: '{path}' is not readable JSON ({exc})") from None


def field_of(row: Any, key: str, where: str) -> Any:
    if not isinstance(row, dict) or row.get(key) in (None, ""):
        raise RecordError(f"{where}: missing field '{key}'")
    return row[key]


def subsample(items: Sequence, limit: int | None, seed: int) -> list:
    """A seeded subset of at most ``limit`` items, in their original order."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 1:
        raise ParameterError(f"a benchmark size limit must be >= 1, got {limit}")
    keep = np.sort(np.random.default_rng(seed).choice(len(items), size=limit, replace=False))
    return [items[int(i)] for i in keep]


def check_images(records: Sequence[Record], *, name: str, root: Path, layout: str) -> None:
    """Every image file of the selected records exists (decoding happens when prompted)."""
    for record in records:
        for image in record.images:
            if isinstance(image, Path) and not image.exists():
                raise RecordError(
                    f"{name}: {record.where}: image '{image}' does not exist under --benchmark-root "
                    f"'{root}'. Expected layout:\n{layout}"
                )


def finish(
    name: str,
    train: Sequence[Record],
    test: Sequence[Record],
    make_scorer: Callable[[Sequence[Record]], Scorer],
    *,
    root: Path | None,
    layout: str,
    options: LoadOptions,
    notes: Sequence[str] = (),
) -> Benchmark:
    """Subsample both splits with the split seed, check their images, refuse empty splits, and
    build the scorer on the queries kept (its candidate lists come from them only)."""
    train = subsample(train, options.max_train, options.split_seed)
    test = subsample(test, options.max_test, options.split_seed + 1)
    for split, records in (("demonstration (train)", train), ("query (test)", test)):
        if not records:
            raise RecordError(
                f"{name}: the {split} split is empty under '{root}'. Expected layout:\n{layout}"
            )
        if root is not None:
            check_images(records, name=name, root=root, layout=layout)
    return Benchmark(name, tuple(train), tuple(test), make_scorer(test), tuple(notes))


def most_common_normalised(answers: Sequence[str]) -> str:
    """The most frequent answer in the VQA normal form (first on ties) — a VQA question's
    demonstration answer. Annotators who left the answer empty are outvoted by any non-empty
    answer, since an empty demonstration teaches nothing; all empty gives ``""``."""
    counts: dict[str, int] = {}
    for answer in (normalise_answer(a) for a in answers):
        counts[answer] = counts.get(answer, 0) + 1
    filled = {answer: count for answer, count in counts.items() if answer} or counts
    return max(filled, key=lambda a: filled[a])
