"""The embedded world as a benchmark: one task (a suite task or a typed rule) at one seed.

The demonstration pool is the task's ``private`` split and the queries its ``test`` split of
:func:`dpmtv.embedded.suite.task_records` at the seed (``--split-seed``), so ``dpmtv eval
--benchmark embedded:TASK`` and ``dpmtv demo`` see the same records at the same seed. What only
the embedded world has is part of the benchmark: its report group (seen, held-out predicates,
held-out label maps, typed rules), whether training drew its table, its recognition ceiling and
deciding cells (:mod:`dpmtv.embedded.recognition`, on its test queries unless a pooled ceiling
is given), the :class:`EmbeddedScorer`'s ``deciding_accuracy`` metric: accuracy on the test
queries in deciding cells only, and :class:`DemonstrationFacts` for the ICL rows: how often a
prompt's demonstrations show a deciding cell, and what Bayes-optimal learners answer from the very
same demonstrations (:mod:`dpmtv.embedded.bayes`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from dpmtv.data.records import Record
from dpmtv.errors import ParameterError, RecordError
from dpmtv.eval.benchmarks.base import Benchmark, LoadOptions
from dpmtv.eval.scorers import ExactMatchScorer

DEFAULT_EMBEDDED_TASK = "is_green"  # a held-out predicate of the embedded suite
DEFAULT_EMBEDDED_SIZES = (256, 64)  # demonstrations, queries

GROUP_TITLES = {
    "seen": "seen tasks",
    "held_out": "held-out predicates",
    "label_maps": "held-out label maps",
    "rules": "typed rules",
}


class EmbeddedScorer(ExactMatchScorer):
    """Normalised exact match of the answer word, and deciding_accuracy on the deciding-cell queries only"""

    metrics = ("accuracy", "token_recall", "deciding_accuracy")
    scoring_in_words: ClassVar[str] = (
        "accuracy: the answer word equals the expected one once both are normalised (lower case, no "
        "punctuation); deciding_accuracy: the same on the deciding-cell queries only, those that the "
        "trained rule closest to the task answers wrong, so only the demonstrations can settle them"
    )

    def __init__(self, vocabulary: Iterable[str], deciding_ids: Iterable[str] = ()):
        super().__init__(vocabulary)
        self.deciding_ids = frozenset(deciding_ids)

    def score(self, record: Record, prediction: str) -> dict[str, float]:
        scores = super().score(record, prediction)
        if record.record_id in self.deciding_ids:
            scores["deciding_accuracy"] = scores["accuracy"]
        return scores


def task_group(task, *, typed: bool = False) -> str:
    """The report group of a task: seen, held-out predicates, label maps or typed rules."""
    if typed:
        return "rules"
    if not task.held_out:
        return "seen"
    return "label_maps" if task.kind == "label_map" else "held_out"


def embedded_task(name: str):
    """A suite task by name, else a typed rule (``embedded:big and not red``).

    Raises:
        ParameterError: neither a task nor a rule; says both.
    """
    generator = _generator()
    try:
        return generator.get_task(name), False
    except ParameterError as unknown:
        try:
            return generator.rule_task(name), True
        except ParameterError as bad_rule:
            raise ParameterError(
                f"embedded benchmark: {unknown.args[0]}; nor a rule: {bad_rule.args[0]}"
            ) from None


def embedded_benchmark(
    task, *, seed: int, num_train: int, num_test: int, ceiling=None, typed: bool = False
) -> Benchmark:
    """``task``'s benchmark at ``seed``: ``num_train`` private records, ``num_test`` test queries;
    ``ceiling`` (a :class:`~dpmtv.embedded.recognition.Ceiling`) defaults to the one on these queries."""
    from dpmtv.embedded.recognition import recognition_ceiling
    from dpmtv.embedded.suite import task_codes, task_records
    from dpmtv.embedded.world import combo_index

    train = task_records(task, num_train, seed=seed, split="private")
    test = task_records(task, num_test, seed=seed, split="test")
    test_rows = combo_index(task_codes(task, num_test, seed=seed, split="test"))
    if ceiling is None:
        ceiling = recognition_ceiling(task, task_codes(task, num_test, seed=seed, split="test"))
    deciding = np.isin(test_rows, ceiling.deciding_rows)
    train_rows = combo_index(task_codes(task, num_train, seed=seed, split="private"))
    details = {
        "task": task.name,
        "group": task_group(task, typed=typed),
        "held_out": task.held_out,
        **recognition_record(task, ceiling),
        "deciding_count": int(deciding.sum()),
    }
    ids = [r.record_id for r, d in zip(test, deciding, strict=True) if d]
    facts = DemonstrationFacts(
        train_rows,
        {r.record_id: int(row) for r, row in zip(test, test_rows, strict=True)},
        np.asarray(ceiling.deciding_rows),
        task.truth if task.is_predicate else None,
    )
    return Benchmark(
        f"embedded:{task.name}",
        tuple(train),
        tuple(test),
        EmbeddedScorer(task.answers, ids),
        notes=(f"embedded task {task.name} ({task.kind}), records of seed {seed}",),
        details=details,
        demonstration_facts=facts,
    )


@dataclass(frozen=True)
class DemonstrationFacts:
    """What each ICL prompt's demonstrations hold, for the benchmark's NON-PRIVATE ICL rows (facts
    about the private pool, like ICL's own accuracy): ``demos_with_deciding_cell``, the share of
    prompts showing a deciding cell at all (a rule that differs from a trained one only where
    demonstrations rarely look measures luck, not learning), and for a predicate
    ``demonstration_references``: per learner of :mod:`dpmtv.embedded.bayes`, its accuracy on
    all queries and on deciding-cell queries when it answers each query from exactly the
    demonstrations ICL shows it. No model runs: what those demonstrations could teach."""

    train_rows: np.ndarray  # each private record's attribute combination (a row of ALL_CODES)
    test_rows: Mapping[str, int]  # the same for each test query, by record id
    deciding_rows: np.ndarray
    truth: np.ndarray | None  # a predicate's yes/no table; None for label maps

    def __call__(self, picks: Sequence[np.ndarray], queries: Sequence[Record]) -> dict[str, Any]:
        if not picks:
            return {}
        demo_rows = np.stack([self.train_rows[np.asarray(p, dtype=np.int64)] for p in picks])
        facts: dict[str, Any] = {
            "demos_with_deciding_cell": float(np.isin(demo_rows, self.deciding_rows).any(axis=1).mean())
        }
        if self.truth is None:
            return facts
        from dpmtv.embedded import bayes

        query_rows = np.array([self.test_rows[q.record_id] for q in queries], dtype=np.int64)
        deciding = np.isin(query_rows, self.deciding_rows)
        references = {}
        for learner in bayes.LEARNERS:
            scores = bayes.correct(
                learner, demo_rows, self.truth[demo_rows], query_rows, self.truth[query_rows]
            )
            references[learner] = {
                "accuracy": float(scores.mean()),
                "deciding_accuracy": float(scores[deciding].mean()) if deciding.any() else None,
                "deciding_count": int(deciding.sum()),
            }
        return {**facts, "demonstration_references": references}


def recognition_record(task, ceiling) -> dict[str, Any]:
    """Whether training drew the task's table, its ceiling (rule, accuracy) and deciding cells."""
    from dpmtv.embedded.rulespace import trained

    return {
        "trained": bool(trained(task.truth)) if task.is_predicate else False,
        "ceiling": {"rule": ceiling.rule, "accuracy": ceiling.accuracy},
        "deciding_cells": ceiling.deciding_cells(),
        "deciding_queries": int(ceiling.deciding_queries.sum()),
    }


def recognition_lines(details: Mapping[str, Any]) -> list[str]:
    """The benchmark's recognition section of an evaluation report (empty without one)."""
    if "ceiling" not in details:
        return []
    ceiling, cells = details["ceiling"], details["deciding_cells"]
    shown = ", ".join(cells[:8]) + (f" (+{len(cells) - 8} more)" if len(cells) > 8 else "")
    return [
        "## What recognising a trained rule would score",
        "",
        f"Group: {GROUP_TITLES[details['group']]}. The model was trained on this task's rule (or its "
        f"complement): {'yes' if details['trained'] else 'no'}. The trained rule closest to this task "
        f"(`{ceiling['rule']}`) answers {ceiling['accuracy']:.3f} of the test queries right: that is what "
        "a model scores by recognising which trained rule the demonstrations show, without learning "
        f"anything beyond it. It answers wrong in {len(cells)} deciding cells ({shown or 'none'}); the "
        f"{details['deciding_count']} test queries in them are the ones only the demonstrations can "
        "settle, and `deciding_accuracy` scores each method on them.",
        "",
    ]


def demonstration_lines(runs: Sequence[Any]) -> list[str]:
    """The ICL runs' :class:`DemonstrationFacts` as a report section (empty without any): per ICL
    method, means over its seeds."""
    facts: dict[str, list[Mapping[str, Any]]] = {}
    for run in runs:
        if "demos_with_deciding_cell" in run.details:
            facts.setdefault(run.display, []).append(run.details)
    if not facts:
        return []
    lines = [
        "## What the demonstrations could teach",
        "",
        "Per ICL method (NON-PRIVATE): the share of prompts whose demonstrations show a deciding "
        "cell, and the accuracy of Bayes-optimal learners that answer each query from exactly the "
        "demonstrations ICL shows it (`dpmtv.embedded.bayes`: no model; a model above the "
        "trained-tables learner on deciding cells has learned more than which trained rule is "
        "meant). Means over seeds.",
        "",
        "| method | prompts with a deciding cell | learner | accuracy | deciding cells |",
        "|---|---|---|---|---|",
    ]
    for method, details in facts.items():
        share = f"{np.mean([d['demos_with_deciding_cell'] for d in details]):.3f}"
        references = [d.get("demonstration_references", {}) for d in details]
        for learner in references[0] or [""]:  # a label map: the share alone
            accuracy = deciding = ""
            if learner:
                accuracy = f"{np.mean([r[learner]['accuracy'] for r in references]):.3f}"
                kept = [r[learner]["deciding_accuracy"] for r in references if r[learner]["deciding_count"]]
                deciding = f"{np.mean(kept):.3f}" if kept else ""
            lines.append(f"| {method} | {share} | {learner} | {accuracy} | {deciding} |")
    return [*lines, ""]


def public_selection(task_name: str, *, shared: bool = False) -> tuple[list[list[int]], tuple[float, ...]]:
    """The head set ``[[layer, head], ...]`` and per-layer clip norms chosen on PUBLIC data when the
    embedded model was trained (``dpmtv_defaults.json`` beside its weights): the task's own
    selection, or with ``shared`` (or for a task without one) the one set chosen on the seen tasks.
    Costs no privacy."""
    from dpmtv.embedded import checkpoint_path

    defaults = json.loads((checkpoint_path() / "dpmtv_defaults.json").read_text())
    per_task = defaults.get("per_task", {})
    chosen = defaults if shared or task_name not in per_task else per_task[task_name]
    return [list(map(int, pair)) for pair in chosen["heads"]], tuple(float(c) for c in chosen["l2_clip_norm"])


def load_embedded(root, options: LoadOptions) -> Benchmark:
    """``embedded`` or ``embedded:TASK`` (a suite task or a typed rule) at ``--split-seed``; no
    files needed. Needs :mod:`dpmtv.embedded.generator`."""
    task, typed = embedded_task(options.task or DEFAULT_EMBEDDED_TASK)
    n_train = options.max_train or DEFAULT_EMBEDDED_SIZES[0]
    n_test = options.max_test or DEFAULT_EMBEDDED_SIZES[1]
    for size in (n_train, n_test):
        if size < 1:
            raise ParameterError(f"a benchmark size limit must be >= 1, got {size}")
    return embedded_benchmark(task, seed=options.split_seed, num_train=n_train, num_test=n_test, typed=typed)


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
