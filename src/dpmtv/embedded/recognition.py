"""What recognition cannot explain: a held-out task's recognition ceiling and deciding cells.

A model that had only memorised the trained tasks could still score well on a held-out task by
answering like the closest trained one. For a task and its test queries (attribute codes), the
**recognition ceiling** is the best accuracy on those queries of any single trained table: every
trained yes/no table and its complement (:func:`dpmtv.embedded.rulespace.trained_tables`, which
already pairs each with its complement) and the four naming tables. The **deciding cells** are
the attribute combinations (rows of ``ALL_CODES``) where that best table answers wrong; accuracy
on the test queries in deciding cells is what the demonstrations must have *taught*. Ties go to
the first candidate in a fixed order (naming tables, then trained tables sorted by their bytes),
so the ceiling's rule is deterministic. Label maps with fresh nonce words have ceiling 0: no
trained table answers with a nonce word, every cell is deciding.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from dpmtv.embedded.generator import ANSWER_INDEX, NO, YES, Task, all_tasks
from dpmtv.embedded.rulespace import trained_tables
from dpmtv.embedded.world import combo_index, describe_row


@dataclass(frozen=True)
class Ceiling:
    """``rule``: the best trained table's name; ``accuracy`` on the queries; ``deciding_rows``:
    rows of ``ALL_CODES`` where it answers wrong; ``deciding_queries``: a bool mask over the
    queries (their row is a deciding cell)."""

    rule: str
    accuracy: float
    deciding_rows: tuple[int, ...]
    deciding_queries: np.ndarray

    def deciding_cells(self) -> list[str]:
        """The deciding cells as words (``"red circle big left"``)."""
        return [describe_row(r) for r in self.deciding_rows]


@cache
def _candidates() -> tuple[np.ndarray, tuple[str, ...]]:
    """Answer-index tables ``(n, 64)`` of every trained task and complement, with names."""
    naming = [t for t in all_tasks() if t.kind == "naming"]
    names_by_table = {}
    for t in all_tasks():  # the first (shortest-listed) name of each trained predicate table
        if t.is_predicate and not t.held_out:
            names_by_table.setdefault(t.table.tobytes(), t.name)
    tables, names = [t.table for t in naming], [t.name for t in naming]
    for truth in trained_tables():
        for table in (truth, ~truth):
            answers = np.where(table, ANSWER_INDEX[YES], ANSWER_INDEX[NO]).astype(np.int64)
            tables.append(answers)
            names.append(names_by_table.get(answers.tobytes(), "<unnamed trained table>"))
    return np.stack(tables), tuple(names)


def recognition_ceiling(task: Task, query_codes: np.ndarray) -> Ceiling:
    """The ceiling and deciding cells of ``task`` on queries with attribute codes ``(n, 4)``."""
    rows = combo_index(np.asarray(query_codes).reshape(-1, 4))
    tables, names = _candidates()
    hits = tables[:, rows] == task.table[rows]  # (candidates, queries)
    best = int(np.argmax(hits.mean(1)))  # argmax: the first of tied candidates
    wrong = np.flatnonzero(tables[best] != task.table)
    return Ceiling(
        rule=names[best],
        accuracy=float(hits[best].mean()),
        deciding_rows=tuple(int(r) for r in wrong),
        deciding_queries=np.isin(rows, wrong),
    )


def demos_with_deciding_cell(demo_codes: np.ndarray, ceiling: Ceiling) -> float:
    """Fraction of prompts whose demonstrations ``(prompts, shots, 4)`` include a deciding cell."""
    rows = combo_index(np.asarray(demo_codes))
    return float(np.isin(rows, ceiling.deciding_rows).any(axis=-1).mean())
