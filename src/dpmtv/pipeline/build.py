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
4. the private part (:mod:`dpmtv.pipeline.release`): (select,) extract, clip and sum the release
   chunks (a failing chunk contributes zero, :mod:`dpmtv.forward.failed_chunks`), noise once; then write
   the artifact atomically. From the charge on, an error's message is withheld
   (:mod:`dpmtv.pipeline.private_phase`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dpmtv._build_time import build_timestamp, timestamp_seconds
from dpmtv.artifact.card import card_path
from dpmtv.artifact.signature import signature_path
from dpmtv.artifact.vector import TaskVector, save_task_vector
from dpmtv.data.prompts import DEFAULT_QUERY_QUESTION
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError, RecordError
from dpmtv.forward.executor import Executor, LocalExecutor
from dpmtv.forward.prompt_budget import resolve_max_prompt_tokens
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.artifact import released_task_vector
from dpmtv.pipeline.plan import (
    BuildLayout,
    count_notes,
    plan_build,
    plan_layout,
    plan_release,
    weak_signal_notes,
)
from dpmtv.pipeline.private_batching import resolve_private_batch_size
from dpmtv.pipeline.private_phase import run_private_phase
from dpmtv.pipeline.public_inputs import ensure_checked
from dpmtv.pipeline.reference import reference_activations
from dpmtv.pipeline.release import private_release
from dpmtv.pipeline.settings import (
    BuildSettings,
    Centering,
    PrivateSelectionSettings,
    QueryKind,
)
from dpmtv.pipeline.tasks import CenteredRows, ChunkJob, clipped_sum_of_rows
from dpmtv.pipeline.validation import validate_build_inputs
from dpmtv.privacy import ClippedSumAccumulator, make_sampler, validate_epsilon_delta
from dpmtv.privacy.disjoint import ChargedEvent
from dpmtv.privacy.release import release_clipped_sum

__all__ = [
    "DEFAULT_QUERY_QUESTION",
    "BuildResult",
    "BuildSettings",
    "Centering",
    "PrivateSelectionSettings",
    "QueryKind",
    "SeededBuilds",
    "build_task_vector",
    "build_task_vectors_for_epsilons",
    "reference_activations",
    "seeded_builds",
]


@dataclass(frozen=True)
class BuildResult:
    """What :func:`build_task_vector` returns: the released ``vector``, the ``path`` it was written
    to (None without ``out``), the records the partition left out (for the operator: the artifact
    stores that count only where it is public), the build's warning lines, and the accounting
    event ``before_noise`` was given (None if it was not called)."""

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
    sign_key: str | Path | None = None,
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
    the one time stored: the artifact's ``created_at`` and file time, the ledger's rows. ``sign_key``
    (a PEM EC private key) signs the artifact and its card as they are written.
    Records are validated before the charge (:mod:`dpmtv.pipeline.validation`); after it a
    failing chunk contributes zero (:mod:`dpmtv.forward.failed_chunks`) and errors are withheld
    (:mod:`dpmtv.pipeline.private_phase`).
    """
    started_at = started_at or getattr(before_noise, "started_at", None) or build_timestamp()
    notes = _validate(settings, records, heads)
    records = ensure_checked(records, settings)  # before any forward pass; once, if the caller checked
    settings = _with_prompt_budget(loaded, settings)
    plan = plan_build(loaded, records, heads, settings)
    charge = _ChargeOnce(before_noise, plan.event)  # a ledger's preview runs here, before any data
    validate_build_inputs(loaded.adapter, records, plan.candidates, settings)  # before the charge
    chunked = plan.layout.chunked
    release = run_private_phase(
        lambda: private_release(loaded, records, heads, settings, plan, charge, executor),
        charged=lambda: charge.done,
        counts_are_private=not (chunked.counts_are_public or settings.show_private_counts),
    )
    clip_choice = release.clip_choice
    vector = released_task_vector(
        loaded,
        release.heads,
        settings,
        release.layout,
        release.reference,
        release.noised,
        release.head_selection,
        workers=(executor or LocalExecutor()).workers,
        created_at=started_at,
        clip_norm_selection=None if clip_choice is None else clip_choice.to_metadata(),
    )
    path = save_task_vector(vector, out, sign_key=sign_key) if out is not None else None
    if path is not None:
        _stamp_build_time(path, started_at)
    num_unused = chunked.partition.num_unused
    return BuildResult(vector, path, num_unused, (*notes, *plan.notes), charge.event if charge.done else None)


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


def build_task_vectors_for_epsilons(
    loaded: LoadedModel,
    records: Sequence[Record],
    heads: HeadSet,
    settings: BuildSettings,
    *,
    epsilons: Sequence[float],
) -> list[BuildResult]:
    """EXPERIMENTS ONLY (seeded noise): the build at each ε of ``epsilons`` from ONE extraction
    (:func:`seeded_builds`' releases)."""
    return seeded_builds(loaded, records, heads, settings, epsilons=epsilons).releases


@dataclass(frozen=True)
class SeededBuilds:
    """EXPERIMENTS ONLY: what :func:`seeded_builds` computes from one extraction.

    ``releases[i]`` is the seeded build at ``epsilons[i]``; ``plain_mean`` is MTV's vector on the
    same chunks, per layer ``(k_l*d,)``: the mean of the heads' outputs, neither clipped nor
    noised — a NON-PRIVATE reference for evaluations, never written by the library."""

    releases: list[BuildResult]
    plain_mean: dict[int, np.ndarray]  # empty when no chunk is non-empty
    num_chunks: int  # the chunks in the mean (non-empty ones)


def seeded_builds(
    loaded: LoadedModel,
    records: Sequence[Record],
    heads: HeadSet,
    settings: BuildSettings,
    *,
    epsilons: Sequence[float],
) -> SeededBuilds:
    """EXPERIMENTS ONLY (seeded noise): the build at each ε of ``epsilons`` and MTV's plain mean,
    all from ONE extraction of the seeded partition's chunks.

    Release ``i`` is what :func:`build_task_vector` returns for ``replace(settings,
    epsilon=epsilons[i])`` (nothing written): the seed fixes the partition and the noise draws, so
    only σ differs — but the chunks go through the model once instead of once per ε (as the demo
    does). Releasing one dataset at several ε composes; that is why the seeded mode is required.
    The chunks' centered rows are held in memory (:class:`~dpmtv.pipeline.tasks.CenteredRows`),
    clipped and summed in chunk order as a build sums them, and averaged unclipped, the reference
    added back, for the plain mean: MTV and DP-MTV then differ by the clip and the noise alone.
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
    task = CenteredRows(ChunkJob(heads, settings, reference, l2_clip_norms={}))
    rows = LocalExecutor().run(loaded, records, layout.release_part, task, progress=settings.progress)
    num_chunks = len(rows[heads.layers[0]])  # the releases go on when it is 0, as builds do
    sums = clipped_sum_of_rows(rows, heads.layers, layout.l2_clip_norms)
    plain_mean = (
        {layer: rows[layer].mean(axis=0) + reference[layer] for layer in heads.layers} if num_chunks else {}
    )
    releases = [
        _release_from_sums(loaded, heads, replace(settings, epsilon=e), layout, reference, sums)
        for e in epsilons
    ]
    return SeededBuilds(releases, plain_mean, num_chunks)


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


def _stamp_build_time(path: Path, started_at: str) -> None:
    """The files' time is the build's one time too: a time taken after the private computation
    would time it (docs/design.md §1)."""
    for written in (path, card_path(path), signature_path(path)):
        if written.exists():
            os.utime(written, (timestamp_seconds(started_at),) * 2)
