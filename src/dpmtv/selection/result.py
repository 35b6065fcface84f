"""The outcome of a head selection, and its JSON file (read back by ``--heads FILE`` too)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpmtv._atomic import write_text_atomically
from dpmtv.errors import HeadSpecError
from dpmtv.heads import HeadSet

FORMAT = "dpmtv-head-selection/1"


@dataclass(frozen=True)
class SelectionResult:
    """Selected heads and how they were found.

    Attributes:
        heads: the selected (layer, head) pairs.
        method: ``reinforce`` | ``greedy`` | ``scored-exact`` | ``scored-attribution`` |
            ``private-noisy-top-k`` (``+best-of`` when a candidate comparison picked the set).
        dev_metric: mean first-answer-token log-prob (or accuracy, see ``metric``) on the public
            dev queries with ``heads`` patched; None for private selection (no public data).
        seconds: wall time of the selection.
        probabilities: REINFORCE's learned keep-probabilities, (L, H) nested lists.
        scores: per-head scores as ``[layer, head, score]`` (scored / greedy gains); PUBLIC only.
        candidates: candidate name → dev metric when :func:`~dpmtv.selection.best_of` compared sets.
        chosen: the winning candidate's name.
        details: method parameters (steps, seed, k, shots, ...) and, for private selection, the
            budget and the serialised dp-accounting event.
    """

    heads: HeadSet
    method: str
    dev_metric: float | None = None
    metric: str = "logprob"
    seconds: float = 0.0
    probabilities: list[list[float]] | None = None
    scores: list[list[float]] | None = None
    candidates: dict[str, float] = field(default_factory=dict)
    chosen: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "heads": self.heads.to_json(),
            "method": self.method,
            "metric": self.metric,
            "dev_metric": self.dev_metric,
            "seconds": self.seconds,
            "chosen": self.chosen,
            "candidates": self.candidates,
            "probabilities": self.probabilities,
            "scores": self.scores,
            "details": self.details,
        }

    def to_metadata(self) -> dict[str, Any]:
        """For the artifact's ``head_selection``: everything but the per-head arrays and the wall
        time (a private selection's time depends on N and on prompt lengths; no timing goes into
        an artifact)."""
        data = self.to_json()
        for left_out in ("heads", "probabilities", "scores", "seconds"):
            data.pop(left_out)
        return data

    def save(self, path: str | Path) -> Path:
        """Write the JSON atomically; it has a ``heads`` key, so ``--heads path`` reads it."""
        return write_text_atomically(path, json.dumps(self.to_json(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> SelectionResult:
        """Read a file written by :meth:`save`.

        Raises:
            HeadSpecError: unreadable JSON, another format, or a malformed head list.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise HeadSpecError(f"selection file '{path}' is not readable JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise HeadSpecError(f"'{path}' is not a dpmtv head selection (format {FORMAT!r})")
        pairs = data.get("heads")
        if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise HeadSpecError(f"selection file '{path}': 'heads' must be a list of [layer, head] pairs")
        fields = {
            k: data[k] for k in ("dev_metric", "metric", "seconds", "probabilities", "scores", "chosen")
        }
        return cls(
            heads=HeadSet.of((int(layer), int(head)) for layer, head in pairs),
            method=str(data.get("method")),
            candidates=dict(data.get("candidates") or {}),
            details=dict(data.get("details") or {}),
            **fields,
        )
