"""The DP-MTV pipeline: partition → (select) → prompt → extract → clip → aggregate → noise once
→ artifact.

This module joins model plumbing (``extract``, :mod:`~dpmtv.pipeline.partition`) and privacy code
(``dpmtv.privacy``); neither imports the other. The numbers are fixed in :mod:`dpmtv.pipeline.plan`,
the chunks' work is :mod:`dpmtv.pipeline.tasks`. The un-noised mean lives only inside
:func:`build_task_vector`.

Order of a build, and why:

1. validate, partition (data-independent), split the chunks for parallel composition;
2. plan the release (σ) and, with private selection, the selection
   (:func:`~dpmtv.pipeline.plan.plan_build`): all numbers fixed before any private value is
   touched; with private selection Δ is the worst case over the ``k`` heads the selection may
   pick, so it does not depend on the (noisy) choice; then the one validation pass over every
   record (:mod:`dpmtv.pipeline.validation`): what one record can fail on by itself refuses the
   build here, before the charge and any private forward pass;
3. ``before_noise`` (the ledger charge) runs exactly once, right before the first noise draw:
   before the selection's noisy top-k, or else just before the release noise;
4. extract, clip and sum the release chunks (a failing chunk contributes zero,
   :mod:`dpmtv.failed_chunks`); noise once; write the artifact atomically. From the charge on,
   an error's message is withheld (:mod:`dpmtv.pipeline.private_phase`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from dpmtv._build_time import build_timestamp, timestamp_seconds
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError, RecordError
from dpmtv.executor import Executor, LocalExecutor
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.artifact import released_task_vector
from dpmtv.pipeline.plan import (
    BuildLayout,
    BuildPlan,
    count_notes,
    plan_build,
    plan_layout,
    plan_release,
    selection_pool,
    weak_signal_notes,
)
from dpmtv.pipeline.private_batching import resolve_private_batch_size
from dpmtv.pipeline.private_clip import ClipChoice, release_with_private_clip
from dpmtv.pipeline.private_phase import run_private_phase
from dpmtv.pipeline.public_inputs import ensure_checked
from dpmtv.pipeline.reference import reference_activations
from dpmtv.pipeline.settings import (
    BuildSettings,
    Centering,
    PrivateSelectionSettings,
    QueryKind,
)
from dpmtv.pipeline.tasks import sum_clipped_chunks
from dpmtv.pipeline.validation import validate_build_inputs
from dpmtv.privacy import (
    ClippedSumAccumulator,
    derive_insecure_seed,
    make_sampler,
    seeded_rng,
    validate_epsilon_delta,
)
from dpmtv.privacy.disjoint import ChargedEvent
from dpmtv.privacy.release import NoisedVector, release_clipped_sum
from dpmtv.prompt_budget import resolve_max_prompt_tokens
from dpmtv.prompts import DEFAULT_QUERY_QUESTION
from dpmtv.selection.candidates import CandidateUtilities, candidate_head_sets, select_private_candidates
from dpmtv.selection.private import select_private
from dpmtv.selection.result import SelectionResult
from dpmtv.vector import TaskVector, save_task_vector

__all__ = [
    "DEFAULT_QUERY_QUESTION",
    "BuildResult",
    "BuildSettings",
    "Centering",
    "PrivateSelectionSettings",
    "QueryKind",
    "build_task_vector",
    "build_task_vectors_for_epsilons",
    "reference_activations",
]


@dataclass(frozen=True)
class BuildResult:
    vector: TaskVector
    path: Path | None
    num_unused_records: int
    warnings: tuple[str, ...]
    charged_event: ChargedEvent | None  # what ``before_noise`` was given


BeforeNoise = Callable[[ChargedEvent], None]


def build_task_vector(
    loaded: LoadedModel,
    records: Sequence[Record],
    heads: HeadSet | None,
    settings: BuildSettings,
    *,
    out: str | Path | None = None,
    before_noise: BeforeNoise | None = None,
    executor: Executor | None = None,
    started_at: str | None = None,
) -> BuildResult:
    """Build a private task vector from ``records`` and (optionally) write it to ``out``.

    ``heads`` is the released head set, or None with ``settings.private_selection``.
    ``before_noise(event)`` is called once, just before the first noise draw (for a non-private
    build, just before the release), with the build's accounting event (e.g. a ledger charge);
    if it raises, no noise is drawn and nothing written. Its ``preview(event)``, if it has one,
    runs right after planning, before any forward pass. ``executor`` computes the selection
    chunks' votes and sums the release chunks' clipped vectors (default: this process;
    :class:`dpmtv.distributed.RayExecutor` on Ray workers); noise is added here, once, either way.
    ``started_at`` (:mod:`dpmtv._build_time`; default ``before_noise.started_at``, else now) is
    the one time stored: the artifact's ``created_at`` and file time, the ledger's rows.
    Records are validated before the charge (:mod:`dpmtv.pipeline.validation`); after it a
    failing chunk contributes zero (:mod:`dpmtv.failed_chunks`) and errors are withheld
    (:mod:`dpmtv.pipeline.private_phase`).
    """
    started_at = started_at or getattr(before_noise, "started_at", None) or build_timestamp()
    notes = _validate(settings, records, heads)
    records = ensure_checked(records, settings)  # before any forward pass; once, if the caller checked
    settings = _with_prompt_budget(loaded, settings)
    plan = plan_build(loaded, records, heads, settings)
    layout = plan.layout
    charge = _ChargeOnce(before_noise, plan.event)  # a ledger's preview runs here, before any data
    pool = heads if heads is not None else selection_pool(settings, loaded.adapter.geometry)
    validate_build_inputs(loaded.adapter, records, pool, settings)  # before the charge and any private pass
    heads, head_selection, reference, noised, layout, clip_choice = run_private_phase(
        lambda: _private_release(loaded, records, heads, settings, plan, charge, executor),
        charged=lambda: charge.done,
        counts_are_private=not (layout.chunked.counts_are_public or settings.show_private_counts),
    )
    workers = (executor or LocalExecutor()).workers
    vector = released_task_vector(
        loaded,
        heads,
        settings,
        layout,
        reference,
        noised,
        head_selection,
        workers=workers,
        created_at=started_at,
        clip_norm_selection=None if clip_choice is None else clip_choice.to_metadata(),
    )
    path = save_task_vector(vector, out) if out is not None else None
    if path is not None:  # the file's time is the build's one time too
        os.utime(path, (timestamp_seconds(started_at),) * 2)
    num_unused = layout.chunked.partition.num_unused
    return BuildResult(vector, path, num_unused, (*notes, *plan.notes), charge.event if charge.done else None)


def _private_release(
    loaded: LoadedModel,
    records: Sequence[Record],
    heads: HeadSet | None,
    settings: BuildSettings,
    plan: BuildPlan,
    charge: _ChargeOnce,
    executor: Executor | None,
) -> tuple[HeadSet, dict[str, Any], dict[int, np.ndarray], NoisedVector, BuildLayout, ClipChoice | None]:
    """The private part of a build, guarded by :func:`run_private_phase`: (private selection,)
    extraction, (private clip norm,) sum, noise once. Returns (heads, head_selection, reference,
    noised release, the layout with the norms used, the clip choice or None)."""
    layout = plan.layout
    head_selection = settings.head_selection
    if heads is None:
        charge()
        selection = _select_privately(loaded, records, plan, settings, executor)
        heads, head_selection = selection.heads, selection.to_metadata()

    reference = reference_activations(loaded, heads, settings)
    if settings.private_clip is not None:
        layout, noised, choice = release_with_private_clip(
            loaded, records, heads, settings, plan, reference, charge, executor
        )
        return heads, head_selection, reference, noised, layout, choice
    accumulator = sum_clipped_chunks(
        loaded,
        records,
        layout.release_part,
        heads,
        settings,
        reference,
        layout.l2_clip_norms,
        executor=executor,
    )
    noised = release_clipped_sum(
        accumulator,
        num_chunks=layout.release_part.num_chunks,
        plan=plan.release,
        sampler=plan.sampler,
        before_noise=charge,  # a non-private build is recorded too (a ledger voids the dataset)
        allow_non_private=settings.non_private,
        l2_sensitivity=layout.l2_sensitivity,
    )
    return heads, head_selection, reference, noised, layout, None


def _with_prompt_budget(loaded: LoadedModel, settings: BuildSettings) -> BuildSettings:
    """The settings with the prompt budget (None: the model's position limit) and the private
    batch size (:mod:`dpmtv.pipeline.private_batching`, which reads whether a budget was given)
    resolved, once."""
    budget = resolve_max_prompt_tokens(loaded.adapter, settings.max_prompt_tokens)
    rows = resolve_private_batch_size(loaded.adapter, settings)
    return replace(settings, max_prompt_tokens=budget, private_batch_size=rows)


class _ChargeOnce:
    """Calls ``before_noise(event)`` the first time it is called, never again.

    If ``before_noise`` has a ``preview(event)`` method (a ledger charge does), it is called at
    once, i.e. right after planning and before any forward pass, so that a build its ledger
    would refuse fails before its expensive part."""

    def __init__(self, before_noise: BeforeNoise | None, event: ChargedEvent) -> None:
        self._before_noise, self.event, self.done = before_noise, event, False
        preview = getattr(before_noise, "preview", None)
        if preview is not None:
            preview(event)

    def __call__(self) -> None:
        if not self.done and self._before_noise is not None:
            self._before_noise(self.event)
        self.done = True


def _validate(settings: BuildSettings, records: Sequence[Record], heads: HeadSet | None) -> list[str]:
    if not records:
        raise RecordError("no records to build from")
    if (heads is None) == (settings.private_selection is None):
        raise ParameterError("give either a head set or private selection settings, not both or neither")
    if settings.non_private:
        return ["NON-PRIVATE build: no noise is added and no privacy guarantee holds"]
    validate_epsilon_delta(epsilon=settings.epsilon, delta=settings.delta)
    return []


def _select_privately(
    loaded: LoadedModel,
    records: Sequence[Record],
    plan: BuildPlan,
    settings: BuildSettings,
    executor: Executor | None,
) -> SelectionResult:
    """The private head selection on the plan's selection chunks (its noise is drawn here)."""
    selection_plan = plan.selection
    if selection_plan is None:  # _validate: no head set comes with private selection settings
        raise ParameterError("private selection needs private selection settings")
    seed = settings.insecure_seed
    rng = None if seed is None else seeded_rng(derive_insecure_seed(seed, "private-selection"))
    pool = selection_pool(settings, loaded.adapter.geometry)
    chosen = settings.private_selection
    if chosen is not None and chosen.method == "candidates":
        task = CandidateUtilities(
            candidates=tuple(candidate_head_sets(chosen.candidates, pool)),
            utility=chosen.utility,
            max_prompt_tokens=settings.max_prompt_tokens,
            shots_per_chunk=settings.shots_per_chunk,
            prepare_workers=settings.prepare_workers,
            private_batch_size=settings.private_batch_size or 1,
        )
        return select_private_candidates(
            loaded,
            records,
            plan.layout.selection_part,
            task=task,
            plan=selection_plan,
            rng=rng,
            progress=settings.progress,
            executor=executor,
        )
    return select_private(
        loaded,
        records,
        plan.layout.selection_part,
        shots_per_chunk=settings.shots_per_chunk,
        plan=selection_plan,
        pool=pool,
        max_prompt_tokens=settings.max_prompt_tokens,
        rng=rng,
        progress=settings.progress,
        executor=executor,
        prepare_workers=settings.prepare_workers,
        private_batch_size=settings.private_batch_size or 1,
    )


def build_task_vectors_for_epsilons(
    loaded: LoadedModel,
    records: Sequence[Record],
    heads: HeadSet,
    settings: BuildSettings,
    *,
    epsilons: Sequence[float],
) -> list[BuildResult]:
    """EXPERIMENTS ONLY (seeded noise): the build at each ε of ``epsilons`` from ONE extraction.

    Result ``i`` is what :func:`build_task_vector` returns for ``replace(settings,
    epsilon=epsilons[i])`` (nothing written): the seed fixes the partition and the noise draws, so
    only σ differs — but the chunks go through the model once instead of once per ε (as the demo
    does). Releasing one dataset at several ε composes; that is why the seeded mode is required.
    """
    if (
        settings.insecure_seed is None
        or settings.non_private
        or settings.private_selection is not None
        or settings.private_clip is not None
    ):
        raise ParameterError(
            "several releases from one extraction are for seeded experiments with a fixed head set "
            "and clip norm (insecure_seed set, no private selection or clip norm, not non-private): "
            "one dataset released at several ε composes"
        )
    _validate(settings, records, heads)
    records = ensure_checked(records, settings)  # before any forward pass; once, if the caller checked
    settings = _with_prompt_budget(loaded, settings)
    layout = plan_layout(loaded, records, heads, settings)
    reference = reference_activations(loaded, heads, settings)
    sums = sum_clipped_chunks(
        loaded, records, layout.release_part, heads, settings, reference, layout.l2_clip_norms
    )
    return [
        _release_from_sums(loaded, heads, replace(settings, epsilon=e), layout, reference, sums)
        for e in epsilons
    ]


def _release_from_sums(
    loaded: LoadedModel,
    heads: HeadSet,
    settings: BuildSettings,
    layout: BuildLayout,
    reference: dict[int, np.ndarray],
    sums: ClippedSumAccumulator,
) -> BuildResult:
    """One seeded release of the clipped ``sums`` at ``settings.epsilon`` (a fresh sampler from the
    seed, as a build at that ε would draw)."""
    validate_epsilon_delta(epsilon=settings.epsilon, delta=settings.delta)
    notes = count_notes(layout.chunked, settings)
    sampler = make_sampler(settings.noise_sampler, seed=settings.insecure_seed, allow_insecure_seed=True)
    plan = plan_release(settings, layout.l2_sensitivity, sampler, None)
    notes += weak_signal_notes(loaded, heads, plan, layout.l2_clip_norms)
    release = ClippedSumAccumulator(sums.layer_dims)
    release.merge(sums)  # a copy: ``mean`` finalises its accumulator
    noised = release_clipped_sum(
        release, num_chunks=layout.release_part.num_chunks, plan=plan, sampler=sampler
    )
    vector = released_task_vector(loaded, heads, settings, layout, reference, noised, settings.head_selection)
    return BuildResult(vector, None, layout.chunked.partition.num_unused, tuple(notes), None)
