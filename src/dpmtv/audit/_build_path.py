"""The build's data-dependent rounds and its release on one dataset, un-noised, for the sensitivity
audit (:mod:`dpmtv.audit.sensitivity`): each measured with the build's own functions.

* the release: :func:`dpmtv.pipeline.plan.plan_layout` and the build's extraction (the clipped
  rows of :class:`~dpmtv.pipeline.tasks.ClippedRows`, or with a private C the centered rows of
  :class:`~dpmtv.pipeline.tasks.CenteredRows` clipped at the chosen C as
  :func:`~dpmtv.pipeline.private_clip.private_clip_sums` clips them), Δ from the layout (or
  :func:`~dpmtv.pipeline.plan.chosen_clip_layout` for the chosen C);
* the private clip round: the clip round's norms (:func:`~dpmtv.pipeline.private_clip.clip_round_norms`),
  ratios and scores (:func:`~dpmtv.privacy.clip_quantile.multiplier_ratios`,
  :func:`~dpmtv.privacy.clip_quantile.multiplier_scores`), declared ``Δ∞``
  :func:`~dpmtv.privacy.clip_quantile.multiplier_score_sensitivity`;
* private selection: the chunk tasks (:func:`~dpmtv.pipeline.release.candidate_task`,
  :class:`~dpmtv.selection.private.HeadVotes`; a choice on the release: every record's utilities
  at the pool's rows on ``D``, :func:`~dpmtv.selection.released.record_utilities`) and totals
  (:func:`~dpmtv.selection.candidates.candidate_totals`,
  :func:`~dpmtv.privacy.noisy_top_k.head_vote_counts`), declared ``Δ∞`` the one the noise is
  calibrated for (:func:`~dpmtv.privacy.noisy_top_k.noisy_top_k_scale` ``= 2kΔ∞/ε``).

What the rounds choose (heads, C) is chosen on ``D`` by the build's own functions with the
partition's seed (:func:`~dpmtv.pipeline.release.select_heads_privately`,
:func:`~dpmtv.pipeline.private_clip.private_clip_sums`) and held fixed for ``D``'s neighbours:
each later step's sensitivity is proved for a fixed earlier output (adaptive composition).

Per-chunk results are cached by task and chunk content (a chunk's result is a function of its own
records), so a neighbour costs only its changed chunks' passes; ``fresh`` recomputes every chunk
in one run, neither reading nor filling the cache. Nothing here is released or written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpmtv.candidate_lists import candidate_head_sets
from dpmtv.data.records import Record
from dpmtv.forward.executor import Executor
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.artifact import per_head_rows
from dpmtv.pipeline.build import BuildSettings
from dpmtv.pipeline.plan import (
    chosen_clip_layout,
    plan_layout,
    plan_selection,
    private_clip_events,
    selection_pool,
)
from dpmtv.pipeline.private_clip import clip_round_norms, private_clip_sums
from dpmtv.pipeline.reference import PublicReference, public_reference
from dpmtv.pipeline.release import candidate_task, select_heads_privately
from dpmtv.pipeline.tasks import CenteredRows, ChunkJob, ClippedRows
from dpmtv.privacy import Partition, clip_l2_per_layer, derive_insecure_seed, seeded_rng
from dpmtv.privacy.clip_quantile import multiplier_ratios, multiplier_score_sensitivity, multiplier_scores
from dpmtv.privacy.noisy_top_k import PrivateSelectionPlan, head_vote_counts, noisy_top_k_scale
from dpmtv.selection.candidates import candidate_totals
from dpmtv.selection.private import HeadVotes
from dpmtv.selection.released import pool_values, record_utilities, select_on_release

__all__ = ["CLIP_ROUND", "BuildPath", "Choices", "Measured"]

CLIP_ROUND = "private clip norm"
SELECTION_ROUNDS = {"candidates": "private selection (candidates)", "votes": "private selection (votes)"}


@dataclass(frozen=True)
class Choices:
    """What the rounds chose on ``D`` (or the given heads and C): fixed for its neighbours.
    ``heads`` are the released heads: for a choice on the release, the whole pool, whose rows on
    ``D`` (un-noised: the bound holds for any fixed release) score the candidates (``on_release``:
    the chosen heads and those rows)."""

    heads: HeadSet
    clip_norms: dict[int, float] | None  # the privately chosen C; None: the layout's (given) C
    on_release: tuple[HeadSet, np.ndarray] | None = None

    def describe(self) -> dict[str, Any]:
        norms = self.clip_norms
        out = {
            "heads": [list(pair) for pair in self.heads.pairs],
            "l2_clip_norm": None if norms is None else [norms[layer] for layer in sorted(norms)],
        }
        if self.on_release is not None:
            out["chosen_on_release"] = [list(pair) for pair in self.on_release[0].pairs]
        return out


@dataclass(frozen=True)
class Measured:
    """One dataset's un-noised release mean (float64, layers concatenated) and Δ, and each
    round's utility vector (one score per candidate) with its declared ``Δ∞``."""

    mean: np.ndarray
    l2_sensitivity: float
    utilities: dict[str, np.ndarray]
    linf_sensitivities: dict[str, float]


class BuildPath:
    """The build's rounds and release for ``settings`` (module docstring); ``heads`` None with
    private selection."""

    def __init__(
        self, loaded: LoadedModel, heads: HeadSet | None, settings: BuildSettings, executor: Executor
    ):
        self._loaded, self._heads, self._settings, self._executor = loaded, heads, settings, executor
        self._cache = _ChunkCache(loaded, executor, settings.shots_per_chunk)
        self._references: dict[HeadSet, PublicReference] = {}
        self._record_utilities: dict[tuple[Any, int], np.ndarray] = {}
        self._alive: list[Sequence[Record]] = []  # keeps ids in cache keys unique

    def choose(self, records: Sequence[Record], seeded: BuildSettings) -> Choices:
        """The heads and C the build's rounds choose on ``records`` with ``seeded``'s seed."""
        heads = self._heads
        chosen = seeded.private_selection
        if heads is None and chosen is not None and chosen.chooses_after_release:
            return self._choose_on_release(records, seeded)
        layout = plan_layout(self._loaded, records, heads, seeded)
        if heads is None:
            pool = selection_pool(seeded, self._loaded.adapter.geometry)
            selection = select_heads_privately(
                self._loaded,
                records,
                plan_selection(seeded),
                layout.selection_part,
                pool,
                seeded,
                self._executor,
            )
            heads = selection.heads
        if seeded.private_clip is None:
            return Choices(heads, None)
        return self._private_clip(records, seeded, heads)

    def _choose_on_release(self, records: Sequence[Record], seeded: BuildSettings) -> Choices:
        """A choice on the release (:mod:`dpmtv.selection.released`): the pool's un-noised mean on
        ``records`` (at the given C, or the C its clip round chooses), then the seeded choice on it."""
        pool = selection_pool(seeded, self._loaded.adapter.geometry)
        released = (
            Choices(pool, None) if seeded.private_clip is None else self._private_clip(records, seeded, pool)
        )
        mean = self.measure(records, seeded, released, rounds=False).mean
        d = self._loaded.adapter.geometry.head_dim
        rows = mean.reshape(-1, d) + per_head_rows(self._reference(pool, seeded).centering, pool, d)
        plan, chosen = plan_selection(seeded), seeded.private_selection
        assert plan is not None and chosen is not None and seeded.insecure_seed is not None
        selection = select_on_release(
            self._loaded, records, pool, rows,
            candidates=candidate_head_sets(chosen.candidates, pool), candidate_list=chosen.candidates,
            utility=chosen.utility, plan=plan,
            rng=seeded_rng(derive_insecure_seed(seeded.insecure_seed, "private-selection")),
        )  # fmt: skip
        return Choices(pool, released.clip_norms, (selection.heads, rows))

    def _private_clip(self, records: Sequence[Record], seeded: BuildSettings, heads: HeadSet) -> Choices:
        layout = plan_layout(self._loaded, records, self._heads, seeded)
        (event,) = private_clip_events(seeded)
        choice, _ = private_clip_sums(
            self._loaded,
            records,
            layout.release_part,
            heads,
            seeded,
            self._reference(heads, seeded),
            epsilon=float(event.noise_parameter),
            charge=lambda: None,  # nothing is charged: the audit releases nothing
            executor=self._executor,
        )
        return Choices(heads, choice.l2_clip_norms)

    def measure(
        self,
        records: Sequence[Record],
        seeded: BuildSettings,
        choices: Choices,
        *,
        fresh: bool = False,
        rounds: bool = True,
    ) -> Measured:
        """The rounds' utility vectors (``rounds``) and the release mean on ``records`` at ``choices``."""
        layout = plan_layout(self._loaded, records, self._heads, seeded)
        utilities: dict[str, np.ndarray] = {}
        linf: dict[str, float] = {}
        if seeded.private_selection is not None and rounds:
            name = SELECTION_ROUNDS[seeded.private_selection.method]
            if choices.on_release is not None:
                utilities[name], linf[name] = self._on_release(records, seeded, choices)
            else:
                utilities[name], linf[name] = self._selection(records, layout.selection_part, seeded, fresh)
        heads, m = choices.heads, layout.release_part.num_chunks
        if choices.clip_norms is None:
            job = ChunkJob(heads, seeded, self._reference(heads, seeded).centering, layout.l2_clip_norms)
            tag = ("clipped", heads, tuple(sorted(layout.l2_clip_norms.items())))
            rows = self._cache.results(records, layout.release_part, ClippedRows(job), tag, fresh)
            mean = np.sum(rows, axis=0) / m if rows else np.zeros(_width(self._loaded, heads))
            return Measured(mean, layout.l2_sensitivity, utilities, linf)
        reference = self._reference(heads, seeded)
        task = CenteredRows(ChunkJob(heads, seeded, reference.centering, l2_clip_norms={}))
        centered = task.combine(
            self._cache.results(records, layout.release_part, task, ("centered", heads), fresh)
        )
        if rounds:
            utilities[CLIP_ROUND], linf[CLIP_ROUND] = _clip_round(centered, heads, reference, seeded)
        clipped = clip_l2_per_layer(centered, l2_clip_norms=choices.clip_norms)
        mean = np.concatenate([clipped[layer].sum(axis=0) for layer in heads.layers]) / m
        sensitivity = chosen_clip_layout(layout, choices.clip_norms, heads, seeded).l2_sensitivity
        return Measured(mean, sensitivity, utilities, linf)

    def _on_release(
        self, records: Sequence[Record], seeded: BuildSettings, choices: Choices
    ) -> tuple[np.ndarray, float]:
        """A choice on the release: every record's candidate utilities at the rows fixed on ``D``
        (cached per record: a record's utilities are a function of it alone), totals, ``Δ∞``."""
        plan, chosen = plan_selection(seeded), seeded.private_selection
        assert plan is not None and chosen is not None and choices.on_release is not None
        pool, rows = choices.heads, choices.on_release[1]
        candidates = candidate_head_sets(chosen.candidates, pool)
        values = pool_values(rows, pool, self._loaded.adapter)
        tag = (chosen.utility, rows.tobytes())
        missing = [r for r in records if (tag, id(r)) not in self._record_utilities]
        if missing:
            self._alive.append(missing)
            scored = record_utilities(self._loaded.adapter, missing, values, candidates)
            self._record_utilities.update({(tag, id(r)): u for r, u in zip(missing, scored, strict=True)})
        totals = np.sum([self._record_utilities[(tag, id(r))] for r in records], axis=0)
        return totals.astype(np.float64), _selection_linf(plan, k=1)

    def _selection(
        self, records: Sequence[Record], part: Partition, seeded: BuildSettings, fresh: bool
    ) -> tuple[np.ndarray, float]:
        """The selection round's totals per candidate (head sets, or pool heads) and its ``Δ∞``."""
        plan, geometry = plan_selection(seeded), self._loaded.adapter.geometry
        assert plan is not None and seeded.private_selection is not None
        pool = selection_pool(seeded, geometry)
        if seeded.private_selection.method == "candidates":
            task = candidate_task(self._loaded, pool, seeded)
            values = self._cache.results(records, part, task, ("candidates", task.candidates), fresh)
            totals = candidate_totals(values, num_candidates=len(task.candidates))
            scores = np.rint(totals) if task.utility == "correct" else totals  # as the build scores them
            return scores.astype(np.float64), _selection_linf(plan, k=1)
        votes = self._cache.results(records, part, _votes_task(plan, pool, seeded), ("votes", pool), fresh)
        counts = head_vote_counts(
            votes,
            num_candidates=geometry.num_layers * geometry.num_heads,
            max_votes_per_chunk=plan.max_votes_per_chunk,
        )
        flat = np.array([layer * geometry.num_heads + head for layer, head in pool.pairs])  # the pool's ids
        return counts[flat].astype(np.float64), _selection_linf(plan, k=min(plan.k, len(flat)))

    def _reference(self, heads: HeadSet, seeded: BuildSettings) -> PublicReference:
        if heads not in self._references:
            self._references[heads] = public_reference(self._loaded, heads, seeded)
        return self._references[heads]


def _clip_round(
    centered: dict[int, np.ndarray], heads: HeadSet, reference: PublicReference, seeded: BuildSettings
) -> tuple[np.ndarray, float]:
    """The clip round's scores of every multiplier (smaller is better) and its declared ``Δ∞``."""
    clip, scales = seeded.private_clip, reference.layer_scales
    assert clip is not None and scales is not None
    ratios = multiplier_ratios(
        clip_round_norms(centered, heads), layer_scales=[scales[layer] for layer in heads.layers]
    )
    scores = multiplier_scores(
        ratios,
        candidates=clip.multipliers,
        alpha=clip.quantile,
        utility=clip.utility,
        tolerance=clip.tolerance,
    )
    sensitivity = multiplier_score_sensitivity(
        candidates=clip.multipliers, alpha=clip.quantile, utility=clip.utility
    )
    return np.asarray(scores, dtype=np.float64), float(sensitivity)


def _votes_task(plan: PrivateSelectionPlan, pool: HeadSet, seeded: BuildSettings) -> HeadVotes:
    """The head votes' chunk task as :func:`~dpmtv.selection.private.select_private` makes it for
    the build (:func:`~dpmtv.pipeline.release.select_heads_privately`)."""
    return HeadVotes(
        max_votes_per_chunk=plan.max_votes_per_chunk,
        pool=pool,
        max_prompt_tokens=seeded.max_prompt_tokens,
        shots_per_chunk=seeded.shots_per_chunk,
        prepare_workers=seeded.prepare_workers,
        private_batch_size=seeded.private_batch_size or 1,
    )


def _selection_linf(plan: PrivateSelectionPlan, *, k: int) -> float:
    """The ``Δ∞`` the selection's Gumbel noise is calibrated for: ``b·ε/(2k)``, ``b`` the scale
    :func:`~dpmtv.privacy.noisy_top_k.noisy_top_k` draws with."""
    epsilon = plan.epsilon_selection
    return noisy_top_k_scale(epsilon=epsilon, k=k) * epsilon / (2 * k)


def _width(loaded: LoadedModel, heads: HeadSet) -> int:
    return sum(heads.layer_widths(loaded.adapter.geometry.head_dim).values())


class _ChunkCache:
    """Each non-empty chunk's result of a chunk task, cached by (``tag``, the identity of the
    chunk's records, in order); ``tag`` names the task and what it depends on besides them."""

    def __init__(self, loaded: LoadedModel, executor: Executor, shots_per_chunk: int):
        self._loaded, self._executor, self._shots = loaded, executor, shots_per_chunk
        self._cache: dict[tuple[Any, tuple[int, ...]], Any] = {}
        self._alive: list[Sequence[Record]] = []  # keeps ids in cache keys unique

    def results(
        self, records: Sequence[Record], partition: Partition, task: Any, tag: Any, fresh: bool
    ) -> list[Any]:
        """One result per non-empty chunk of ``partition``, in chunk order."""
        self._alive.append(records)
        items = partition.nonempty_items()
        if fresh:
            return _split(self._run(records, partition, task), len(items))
        keys = [(tag, tuple(id(records[int(i)]) for i in chunk[: self._shots])) for _, chunk in items]
        missing = [n for n, key in enumerate(keys) if key not in self._cache]
        if missing:
            todo = Partition(chunks=tuple(items[n][1] for n in missing), num_unused=0)
            for n, value in zip(missing, _split(self._run(records, todo, task), len(missing)), strict=True):
                self._cache[keys[n]] = value
        return [self._cache[key] for key in keys]

    def _run(self, records: Sequence[Record], partition: Partition, task: Any) -> Any:
        return self._executor.run(self._loaded, records, partition, task, progress=False)


def _split(result: Any, count: int) -> list[Any]:
    """A chunk task's answer for ``count`` chunks, one item per chunk: rows of an array, rows of
    each layer of a dict (kept 2-D), or the list itself."""
    if isinstance(result, dict):
        return [{layer: values[n : n + 1] for layer, values in result.items()} for n in range(count)]
    items = list(result)
    if len(items) != count:
        raise RuntimeError(f"a chunk task answered {len(items)} results for {count} chunks")
    return items
