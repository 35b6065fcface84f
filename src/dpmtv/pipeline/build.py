"""The DP-MTV pipeline: partition → (select) → prompt → extract → clip → aggregate → noise once
→ artifact.

This module joins model plumbing (``extract``, ``chunks``) and privacy code (``dpmtv.privacy``);
neither imports the other. The un-noised mean lives only inside :func:`build_task_vector`.

Order of a build, and why:

1. validate, partition (data-independent), split the chunks for parallel composition;
2. plan the release (σ) and, with private selection, the selection — all numbers fixed before
   any private value is touched; with private selection Δ is the worst case over the ``k``
   heads the selection may pick, so it does not depend on the (noisy) choice; then the one
   validation pass over every record (:mod:`dpmtv.pipeline.validation`): what one record can
   fail on by itself refuses the build here, before the charge and any private forward pass;
3. ``before_noise`` (the ledger charge) runs exactly once, right before the first noise draw:
   before the selection's noisy top-k, or else just before the release noise;
4. extract, clip and sum the release chunks (a failing chunk contributes zero,
   :mod:`dpmtv.failed_chunks`); noise once; write the artifact atomically. From the charge on,
   an error's message is withheld (:mod:`dpmtv.pipeline.private_phase`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import dp_accounting
import numpy as np

from dpmtv._build_time import build_timestamp, timestamp_seconds
from dpmtv._progress import progress_bar
from dpmtv.data.overlap import check_public_inputs
from dpmtv.data.records import Record, load_records
from dpmtv.errors import ParameterError, RecordError
from dpmtv.executor import Executor, LocalExecutor, sum_clipped_chunks
from dpmtv.extract import extract_each_chunk, mean_selected_heads
from dpmtv.heads import HeadSet, parse_head_spec
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.metadata import artifact_metadata
from dpmtv.pipeline.partition import (
    ChunkPrompts,
    chunk_prompt,
    nonempty_chunk_records,
    parallel_composition_halves,
    partition_records,
)
from dpmtv.pipeline.private_phase import run_private_phase
from dpmtv.pipeline.settings import (
    DEFAULT_QUERY_QUESTION,
    BuildSettings,
    Centring,
    PrivateSelectionSettings,
    QueryKind,
)
from dpmtv.pipeline.validation import validate_build_inputs
from dpmtv.privacy import (
    ClippedSumAccumulator,
    Partition,
    PrivacyUnit,
    PrivatePartition,
    clip_l2_per_layer,
    derive_insecure_seed,
    l2_sensitivity,
    make_sampler,
    parse_l2_clip_norms,
    seeded_rng,
    validate_epsilon_delta,
)
from dpmtv.privacy.disjoint import ChargedEvent, DisjointReleases
from dpmtv.privacy.noisy_top_k import PrivateSelectionPlan, plan_private_selection
from dpmtv.privacy.release import GaussianReleasePlan, plan_gaussian_release, release_clipped_sum
from dpmtv.privacy.signal import signal_to_noise_per_layer, weak_signal_warnings
from dpmtv.prompt_budget import resolve_max_prompt_tokens
from dpmtv.prompts import Example, Prompt, blank_image
from dpmtv.selection.private import select_private
from dpmtv.vector import TaskVector, save_task_vector

__all__ = [
    "DEFAULT_QUERY_QUESTION",
    "BuildResult",
    "BuildLayout",
    "BuildSettings",
    "Centring",
    "PrivateSelectionSettings",
    "QueryKind",
    "build_task_vector",
    "build_task_vectors_for_epsilons",
    "chunk_prompt",
    "iter_clipped_chunks",
    "plan_layout",
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
    check_public_inputs(records, **_public_inputs(settings))  # before any forward pass
    settings = replace(
        settings, max_prompt_tokens=resolve_max_prompt_tokens(loaded.adapter, settings.max_prompt_tokens)
    )
    sampler = make_sampler(
        settings.noise_sampler, seed=settings.insecure_seed, allow_insecure_seed=settings.allow_insecure_seed
    )
    layout = plan_layout(loaded, records, heads, settings)
    notes += _count_notes(layout.chunked, settings)
    selection_plan = _plan_selection(settings)
    plan = _plan_release(settings, layout.l2_sensitivity, sampler, selection_plan)  # None: non-private
    charge = _ChargeOnce(before_noise, _build_event(plan, selection_plan))
    notes += _weak_signal_notes(loaded, heads, plan, layout.l2_clip_norms)  # public numbers, before any data
    pool = heads if heads is not None else _pool(settings, loaded.adapter.geometry)
    validate_build_inputs(loaded.adapter, records, pool, settings)  # before the charge and any private pass
    release = _Release(loaded, records, settings, layout, plan, sampler, charge, executor)
    heads, head_selection, reference, noised = run_private_phase(
        lambda: release.run(heads, selection_plan),
        charged=lambda: charge.done,
        counts_are_private=not (layout.chunked.counts_are_public or settings.show_private_counts),
    )
    vector = _task_vector(
        loaded, heads, settings, noised, reference, layout, head_selection, executor, started_at
    )
    path = save_task_vector(vector, out) if out is not None else None
    if path is not None:  # the file's time is the build's one time too
        os.utime(path, (timestamp_seconds(started_at),) * 2)
    return BuildResult(
        vector, path, layout.chunked.partition.num_unused, tuple(notes), charge.event if charge.done else None
    )


@dataclass(frozen=True)
class _Release:
    """The private part of a build: (selection,) extraction, sum, noise. Everything it holds is
    fixed before it runs; :meth:`run` is what :func:`run_private_phase` guards."""

    loaded: LoadedModel
    records: Sequence[Record]
    settings: BuildSettings
    layout: BuildLayout
    plan: GaussianReleasePlan | None
    sampler: object
    charge: _ChargeOnce
    executor: Executor | None

    def run(self, heads: HeadSet | None, selection_plan: PrivateSelectionPlan | None):
        """(heads, head_selection, reference, noised release)."""
        loaded, records, settings, layout = self.loaded, self.records, self.settings, self.layout
        head_selection = settings.head_selection
        if heads is None:
            self.charge()
            selection = _select_privately(
                loaded, records, layout.selection_part, settings, selection_plan, self.executor
            )
            heads, head_selection = selection.heads, selection.to_metadata()
        reference = reference_activations(loaded, heads, settings)
        accumulator = sum_clipped_chunks(
            loaded,
            records,
            layout.release_part,
            heads,
            settings,
            reference,
            layout.l2_clip_norms,
            executor=self.executor,
        )
        noised = release_clipped_sum(
            accumulator,
            num_chunks=layout.release_part.num_chunks,
            plan=self.plan,
            sampler=self.sampler,
            before_noise=self.charge,  # a non-private build is recorded too (a ledger voids the dataset)
            allow_non_private=settings.non_private,
            l2_sensitivity=layout.l2_sensitivity,
        )
        return heads, head_selection, reference, noised


def _task_vector(loaded, heads, settings, noised, reference, layout, head_selection, executor, started_at):
    geometry = loaded.adapter.geometry
    values = _per_head_rows(noised.layers, heads, geometry.head_dim)
    reference_rows = _per_head_rows(reference, heads, geometry.head_dim)
    return TaskVector(
        heads=heads,
        values=(values + reference_rows).astype(np.float32),
        metadata=artifact_metadata(
            loaded,
            heads,
            settings,
            noised.plan,
            layout.l2_clip_norms,
            layout.release_part,
            layout.chunked,
            head_selection,
            workers=(executor or LocalExecutor()).workers,
            created_at=started_at,
        ),
        reference=None if settings.center is Centring.NONE else reference_rows.astype(np.float32),
    )


@dataclass(frozen=True)
class BuildLayout:
    """What a build fixes before it reads any private value: the partition (with its private
    counts), the selection and release chunks, the clip norms and the release's Δ.

    :func:`build_task_vector` and the sensitivity audit (:mod:`dpmtv.audit.sensitivity`) both
    get it from :func:`plan_layout`, so the audit measures the build's own wiring and Δ."""

    chunked: PrivatePartition
    selection_part: Partition
    release_part: Partition
    l2_clip_norms: dict[int, float]
    l2_sensitivity: float


def plan_layout(
    loaded: LoadedModel, records: Sequence[Record], heads: HeadSet | None, settings: BuildSettings
) -> BuildLayout:
    """Partition ``records`` for the settings' privacy unit and relation, split the chunks for
    private selection, and compute Δ over the released (or candidate) layers."""
    chunked = partition_records(
        records,
        unit=settings.privacy_unit,
        relation=settings.relation,
        shots_per_chunk=settings.shots_per_chunk,
        num_chunks=settings.num_chunks,
        max_records_per_user=settings.max_records_per_user,
        insecure_seed=settings.insecure_seed,
    )
    selection_part, release_part = _split_for_selection(chunked.partition, settings)
    geometry = loaded.adapter.geometry
    candidate_layers = heads.layers if heads is not None else _pool(settings, geometry).layers
    clip_norms = parse_l2_clip_norms(list(settings.l2_clip_norm), candidate_layers)
    sensitivity = _sensitivity(clip_norms, heads, settings, release_part.num_chunks, settings.relation)
    return BuildLayout(chunked, selection_part, release_part, clip_norms, sensitivity)


def iter_clipped_chunks(
    loaded: LoadedModel,
    records: Sequence[Record],
    partition: Partition,
    heads: HeadSet,
    settings: BuildSettings,
    reference: dict[int, np.ndarray],
    clip_norms: dict[int, float],
) -> Iterator[dict[int, np.ndarray]]:
    """Per non-empty chunk: the selected heads' last-token outputs, centred and clipped per
    layer, ``{layer: (1, k_l*d)}`` — each from the chunk's own forward pass, so a function of that
    chunk alone (:func:`~dpmtv.extract.extract_each_chunk`); a chunk that the public prompt-length
    rule drops yields zero rows (it contributes nothing). These are private, un-noised per-chunk
    values: the build sums them away at once; experiments (audits, sweeps) may hold them in
    memory, never write them."""
    prompts = ChunkPrompts(
        records,
        partition,
        shots_per_chunk=settings.shots_per_chunk,
        query=settings.query_source,
        query_question=settings.query_question,
    )
    budget = resolve_max_prompt_tokens(loaded.adapter, settings.max_prompt_tokens)
    with progress_bar("extracting chunks", len(prompts), enabled=settings.progress) as advance:
        for activations in extract_each_chunk(loaded.adapter, prompts, heads, max_prompt_tokens=budget):
            if activations is None:  # dropped by the public rule: no contribution
                yield {layer: np.zeros((1, np.size(reference[layer]))) for layer in heads.layers}
            else:
                centred = {layer: values - reference[layer] for layer, values in activations.items()}
                yield clip_l2_per_layer(centred, l2_clip_norms=clip_norms)
            advance(1)


class _ChargeOnce:
    """Calls ``before_noise(event)`` the first time it is called, never again.

    If ``before_noise`` has a ``preview(event)`` method (a ledger charge does), it is called at
    once, i.e. right after planning and before any forward pass, so that a build its ledger
    would refuse fails before its expensive part."""

    def __init__(self, before_noise: BeforeNoise | None, event: ChargedEvent):
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


def _count_notes(chunked: PrivatePartition, settings: BuildSettings) -> list[str]:
    """Notes that depend on the private data's size, for the operator only (never stored).

    δ is compared with the number of protected units (records, or users at user level): a
    δ >= 1/#units permits releasing one unit's data outright. Under add-remove-one and user level
    the counts are private, and so is whether δ >= 1/#units holds (it flips between N = 20 and
    N = 21 at δ = 0.049): the warning is given there only with ``show_private_counts``.
    """
    show = settings.show_private_counts or chunked.counts_are_public
    user = settings.privacy_unit is PrivacyUnit.USER
    units, name = chunked.num_protected_units, "users" if user else "records"
    notes = []
    if show and not settings.non_private and units > 0 and settings.delta >= 1.0 / units:
        notes.append(
            f"delta = {settings.delta:g} is >= 1/#{name} = {1.0 / units:g} for {units} {name}; such a "
            f"delta permits leaking one of the {name} outright; choose delta well below 1/#{name}"
        )
        warnings.warn(notes[-1], stacklevel=3)
    if user:
        notes.append(
            f"user level: {chunked.describe_counts()} (private counts: shown to you, never stored)"
            if settings.show_private_counts
            else "user level: records beyond --max-records-per-user are dropped; how many is a "
            "private count (--show-private-counts shows it; it is never stored)"
        )
    return notes


def _split_for_selection(partition: Partition, settings: BuildSettings) -> tuple[Partition, Partition]:
    """(selection chunks, release chunks): all and all (sequential), or disjoint halves."""
    selection = settings.private_selection
    if selection is None or selection.composition == "sequential":
        return partition, partition
    return parallel_composition_halves(partition)


def _plan_selection(settings: BuildSettings) -> PrivateSelectionPlan | None:
    selection = settings.private_selection
    if selection is None:
        return None
    return plan_private_selection(
        total_epsilon=settings.epsilon,
        total_delta=settings.delta,
        k=selection.k,
        max_votes_per_chunk=selection.max_votes_per_chunk,
        selection_fraction=selection.selection_fraction,
        composition=selection.composition,
    )


def _pool(settings: BuildSettings, geometry) -> HeadSet:
    return parse_head_spec(settings.private_selection.pool, geometry)


def _sensitivity(clip_norms, heads, settings, num_chunks, relation) -> float:
    """Δ over the released layers; with private selection, the worst case over the at most
    min(k, #pool layers) layers the ``k`` selected heads can occupy (data-independent)."""
    norms = [clip_norms[layer] for layer in (heads.layers if heads is not None else clip_norms)]
    if heads is None:
        norms = sorted(norms, reverse=True)[: settings.private_selection.k]
    return l2_sensitivity(l2_clip_norms=norms, num_chunks=num_chunks, relation=relation)


def _plan_release(settings, sensitivity, sampler, selection_plan) -> GaussianReleasePlan | None:
    if settings.non_private:
        return None
    fixed = selection_plan.fixed_events if selection_plan is not None else ()
    return plan_gaussian_release(
        l2_sensitivity=sensitivity,
        epsilon=settings.epsilon,
        delta=settings.delta,
        sampler=sampler,
        fixed_events=fixed,
    )


def _build_event(plan: GaussianReleasePlan | None, selection_plan: PrivateSelectionPlan | None):
    """What the build costs, for the ledger. Sequential: the plan's composed event. Parallel
    composition (selection and release on disjoint halves): :class:`DisjointReleases` of the
    two, which costs the worse of them, not their composition (see :mod:`dpmtv.privacy.disjoint`)."""
    if plan is None:
        return dp_accounting.NonPrivateDpEvent()
    if selection_plan is None or selection_plan.composition == "sequential":
        return plan.event
    return DisjointReleases((selection_plan.event, plan.event))


def _public_inputs(settings: BuildSettings) -> dict[str, dict[str, str]]:
    """The build's public files that must not hold private records (:mod:`dpmtv.data.overlap`)."""
    center = {"--center": str(settings.center_records)} if settings.center is Centring.PUBLIC_RECORDS else {}
    query = {"--query": str(settings.query_image)} if settings.query is QueryKind.PUBLIC_IMAGE else {}
    return {"public_records": center, "public_images": query}


def _select_privately(loaded, records, selection_part, settings, selection_plan, executor):
    seed = settings.insecure_seed
    rng = None if seed is None else seeded_rng(derive_insecure_seed(seed, "private-selection"))
    return select_private(
        loaded,
        nonempty_chunk_records(records, selection_part, settings.shots_per_chunk),
        num_chunks=selection_part.num_chunks,  # public m: empty chunks vote nothing
        plan=selection_plan,
        pool=_pool(settings, loaded.adapter.geometry),
        max_prompt_tokens=settings.max_prompt_tokens,
        rng=rng,
        progress=settings.progress,
        executor=executor,
    )


def reference_activations(
    loaded: LoadedModel, heads: HeadSet, settings: BuildSettings
) -> dict[int, np.ndarray]:
    """Public centring reference per layer (zero when not centring)."""
    if settings.center is Centring.NONE:
        return {layer: np.zeros(dim) for layer, dim in _layer_dims(loaded, heads).items()}
    if settings.center is Centring.BLANK:
        prompts = [Prompt((), Example((blank_image(),), settings.query_question))]
    else:
        public, question = load_records(settings.center_records), settings.query_question
        size = max(1, min(settings.shots_per_chunk, len(public)))
        prompts = [
            chunk_prompt(public[start : start + size], query=settings.query_source, query_question=question)
            for start in range(0, len(public) - size + 1, size)
        ]
    return mean_selected_heads(loaded.adapter, prompts, heads, batch_size=settings.batch_size)


def _weak_signal_notes(loaded, heads, plan, clip_norms) -> list[str]:
    """Warn (at once, and in the result) when the expected noise norm of a released layer exceeds
    its signal bound C_l; heads chosen privately are not known yet, so that case is skipped."""
    if plan is None or heads is None:
        return []
    layers = signal_to_noise_per_layer(
        noise_std=plan.noise_std, l2_clip_norms=clip_norms, num_coordinates=_layer_dims(loaded, heads)
    )
    notes = weak_signal_warnings(layers)
    for note in notes:
        warnings.warn(note, stacklevel=3)
    return notes


def _layer_dims(loaded: LoadedModel, heads: HeadSet) -> dict[int, int]:
    return {layer: len(heads.heads_in(layer)) * loaded.adapter.geometry.head_dim for layer in heads.layers}


def _per_head_rows(per_layer: dict[int, np.ndarray], heads: HeadSet, head_dim: int) -> np.ndarray:
    """Per-layer flat vectors (k_l*d,) → rows (K, d) in the head set's order."""
    return np.concatenate([np.asarray(per_layer[layer]).reshape(-1, head_dim) for layer in heads.layers])


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
    if settings.insecure_seed is None or settings.non_private or settings.private_selection is not None:
        raise ParameterError(
            "several releases from one extraction are for seeded experiments with a fixed head set "
            "(insecure_seed set, no private selection, not non-private): one dataset released at "
            "several ε composes"
        )
    _validate(settings, records, heads)
    check_public_inputs(records, **_public_inputs(settings))  # before any forward pass
    settings = replace(
        settings, max_prompt_tokens=resolve_max_prompt_tokens(loaded.adapter, settings.max_prompt_tokens)
    )
    layout = plan_layout(loaded, records, heads, settings)
    reference = reference_activations(loaded, heads, settings)
    sums = sum_clipped_chunks(
        loaded, records, layout.release_part, heads, settings, reference, layout.l2_clip_norms
    )
    return [
        _release_from_sums(loaded, heads, replace(settings, epsilon=e), layout, reference, sums)
        for e in epsilons
    ]


def _release_from_sums(loaded, heads, settings, layout: BuildLayout, reference, sums) -> BuildResult:
    """One seeded release of the clipped ``sums`` at ``settings.epsilon`` (a fresh sampler from the
    seed, as a build at that ε would draw)."""
    validate_epsilon_delta(epsilon=settings.epsilon, delta=settings.delta)
    notes = _count_notes(layout.chunked, settings)
    sampler = make_sampler(settings.noise_sampler, seed=settings.insecure_seed, allow_insecure_seed=True)
    plan = _plan_release(settings, layout.l2_sensitivity, sampler, None)
    notes += _weak_signal_notes(loaded, heads, plan, layout.l2_clip_norms)
    release = ClippedSumAccumulator(sums.layer_dims)
    release.merge(sums)  # a copy: ``mean`` finalises its accumulator
    noised = release_clipped_sum(
        release, num_chunks=layout.release_part.num_chunks, plan=plan, sampler=sampler
    )
    geometry = loaded.adapter.geometry
    reference_rows = _per_head_rows(reference, heads, geometry.head_dim)
    vector = TaskVector(
        heads=heads,
        values=(_per_head_rows(noised.layers, heads, geometry.head_dim) + reference_rows).astype(np.float32),
        metadata=artifact_metadata(
            loaded,
            heads,
            settings,
            noised.plan,
            layout.l2_clip_norms,
            layout.release_part,
            layout.chunked,
            settings.head_selection,
        ),
        reference=None if settings.center is Centring.NONE else reference_rows.astype(np.float32),
    )
    return BuildResult(vector, None, layout.chunked.partition.num_unused, tuple(notes), None)
