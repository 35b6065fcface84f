"""The shared state of a public head search: model, public task, candidate pool, scorers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from dpmtv.data.prompts import DEFAULT_QUERY_QUESTION
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError
from dpmtv.heads import HeadSet
from dpmtv.models.base import HeadGeometry, ModelAdapter
from dpmtv.models.loading import LoadedModel
from dpmtv.selection._data import PublicTask, prepare_public_task
from dpmtv.selection._patching import MaskScorer

METRICS = ("logprob", "accuracy")


@dataclass
class PublicSearch:
    """``pool`` (L, H) bool marks the candidate heads; ``train`` scores the search's own
    decisions, ``dev`` (held-out public queries) the final choices."""

    adapter: ModelAdapter
    task: PublicTask
    pool: torch.Tensor
    train: MaskScorer
    dev: MaskScorer

    @classmethod
    def prepare(
        cls,
        loaded: LoadedModel,
        records: Sequence[Record],
        *,
        shots: int,
        pool: HeadSet | None = None,
        num_dev: int | None = None,
        seed: int = 0,
        query: str = "record",
        query_question: str = DEFAULT_QUERY_QUESTION,
        batch_size: int = 4,
        use_cache: bool = True,
    ) -> PublicSearch:
        """Public means of all heads (many-shot prompts of ``shots`` records), queries, scorers."""
        task = prepare_public_task(
            loaded,
            records,
            shots=shots,
            num_dev=num_dev,
            seed=seed,
            query=query,
            query_question=query_question,
            batch_size=batch_size,
        )
        return cls.from_task(loaded.adapter, task, pool=pool, use_cache=use_cache)

    @classmethod
    def from_task(
        cls, adapter: ModelAdapter, task: PublicTask, *, pool: HeadSet | None = None, use_cache: bool = True
    ) -> PublicSearch:
        geometry = adapter.geometry
        pool_mask = (
            mask_of(pool, geometry) if pool is not None else torch.ones(_shape(geometry), dtype=torch.bool)
        )
        train = MaskScorer(adapter, task.means, task.train, use_cache=use_cache)
        dev = MaskScorer(adapter, task.means, task.dev, use_cache=use_cache)
        return cls(adapter, task, pool_mask, train, dev)

    @property
    def geometry(self) -> HeadGeometry:
        return self.adapter.geometry

    def train_key(
        self, masks: torch.Tensor, metric: str = "logprob", *, on_query: Callable[[int], None] | None = None
    ) -> torch.Tensor:
        """Search objective per mask row (R,), higher is better (see :func:`metric_key`);
        ``on_query(1)`` after each train query."""
        return metric_key(*self.train.evaluate(masks, on_query=on_query), metric)

    def dev_key(self, masks: torch.Tensor, metric: str = "logprob") -> torch.Tensor:
        return metric_key(*self.dev.evaluate(masks), metric)

    def dev_value(self, heads: HeadSet, metric: str = "logprob") -> float:
        """The plain dev metric (mean log-prob or accuracy) of one head set."""
        logp, hit = self.dev.evaluate(mask_of(heads, self.geometry)[None].float())
        return float((hit.float() if metric == "accuracy" else logp).mean())


def metric_key(logp: torch.Tensor, hit: torch.Tensor, metric: str) -> torch.Tensor:
    """(R, Q) → (R,): mean log-prob, or accuracy with mean log-prob as a 1e-6 tie-break."""
    if metric not in METRICS:
        raise ParameterError(f"metric must be one of {METRICS}, got {metric!r}")
    mean_logp = logp.double().mean(dim=1)
    return mean_logp if metric == "logprob" else hit.double().mean(dim=1) + 1e-6 * mean_logp


def mask_of(heads: HeadSet, geometry: HeadGeometry) -> torch.Tensor:
    """(L, H) bool mask of a head set."""
    heads.check(geometry)
    mask = torch.zeros(_shape(geometry), dtype=torch.bool)
    for layer, head in heads.pairs:
        mask[layer, head] = True
    return mask


def heads_of(mask: torch.Tensor) -> HeadSet:
    return HeadSet.of((int(layer), int(head)) for layer, head in mask.nonzero().tolist())


def _shape(geometry: HeadGeometry) -> tuple[int, int]:
    return geometry.num_layers, geometry.num_heads
