"""The DP-MTV pipeline: partition → (select) → prompt → extract → clip → aggregate → noise once
→ artifact.

This module joins model plumbing (``extract``, ``chunks``) and privacy code (``dpmtv.privacy``);
neither imports the other. The un-noised mean lives only inside :func:`build_task_vector`.

Order of a build, and why:

1. validate, partition (data-independent), split the chunks for parallel composition;
2. plan the release (σ) and, with private selection, the selection — all numbers fixed before
   any private value is touched; with private selection Δ is the worst case over the ``k``
   heads the selection may pick, so it does not depend on the (noisy) choice;
3. ``before_noise`` (the ledger charge) runs exactly once, right before the first noise draw:
   before the selection's noisy top-k, or else just before the release noise;
4. extract, clip and sum the release chunks; noise once; write the artifact atomically.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import dp_accounting
import numpy as np

from dpmtv._build_metadata import artifact_metadata
from dpmtv._progress import progress_bar
from dpmtv.chunks import (
    ChunkPrompts,
    chunk_prompt,
    chunk_records,
    partition_records,
    sub_partition,
)
from dpmtv.data.records import Record, load_records
from dpmtv.errors import ParameterError, RecordError
from dpmtv.extract import extract_each_chunk, mean_selected_heads
from dpmtv.heads import HeadSet, parse_head_spec
from dpmtv.models.loading import LoadedModel
from dpmtv.privacy import (
    ClippedSumAccumulator,
    NeighbouringRelation,
    Partition,
    clip_l2_per_layer,
    l2_sensitivity,
    make_sampler,
    parse_l2_clip_norms,
    parse_relation,
    seeded_rng,
    validate_epsilon_delta,
)
from dpmtv.privacy.release import (
    GaussianReleasePlan,
    add_gaussian_noise,
    plan_gaussian_release,
    release_without_noise,
)
from dpmtv.privacy.selection import PrivateSelectionPlan, parallel_halves, plan_private_selection
from dpmtv.prompt_budget import resolve_max_prompt_tokens
from dpmtv.prompts import Example, Prompt, blank_image
from dpmtv.vector import TaskVector, save_task_vector

__all__ = [
    "BuildResult",
    "BuildSettings",
    "PrivateSelectionSettings",
    "build_task_vector",
    "chunk_prompt",
    "iter_clipped_chunks",
]

DEFAULT_QUERY_QUESTION = "What is the answer?"


@dataclass(frozen=True)
class PrivateSelectionSettings:
    """Private head selection inside the build (SPEC §5): each chunk votes for its top-k' heads,
    a one-shot noisy top-k picks ``k``. ``composition``: "sequential" (selection and release on
    all chunks, the budget split by ``selection_fraction``) or "parallel" (disjoint halves of
    the chunks, each step at the full budget, but each with m/2 chunks)."""

    k: int
    selection_fraction: float = 0.5
    composition: str = "sequential"
    max_votes_per_chunk: int | None = None
    pool: str = "all"  # public head spec of the candidates


@dataclass(frozen=True)
class BuildSettings:
    """Everything a build needs besides the model, the records and the head set."""

    epsilon: float
    delta: float
    l2_clip_norm: tuple[float, ...]  # one value, or one per released layer (per pool layer)
    shots_per_chunk: int  # records per chunk (s); with query="record" s-1 are demonstrations
    neighbouring_relation: str = "replace-one"
    num_chunks: int | None = None  # public m, required for add-remove-one and user level
    privacy_unit: str = "record"  # "record" | "user" (add/remove one user, records capped)
    max_records_per_user: int | None = None  # public cap, required for user level
    query: str = "record"  # "record" | "blank" | path of a public query image
    query_question: str = DEFAULT_QUERY_QUESTION  # public; used with blank/public queries
    center: str = "none"  # "none" | "blank" | path of public records
    batch_size: int = 4  # public prompts only (the centring reference)
    noise_sampler: str = "opendp"
    insecure_seed: int | None = None
    allow_insecure_seed: bool = False
    non_private: bool = False
    private_selection: PrivateSelectionSettings | None = None
    head_selection: dict = field(default_factory=lambda: {"method": "user"})
    progress: bool = True
    # Public token budget of one chunk prompt (None: the model's position limit); longer prompts
    # follow dpmtv.prompt_budget.OVER_LENGTH_RULE. Private chunks are never batched together.
    max_prompt_tokens: int | None = None


@dataclass(frozen=True)
class BuildResult:
    vector: TaskVector
    path: Path | None
    num_unused_records: int
    warnings: tuple[str, ...]
    charged_event: dp_accounting.DpEvent | None  # what ``before_noise`` was given


BeforeNoise = Callable[[dp_accounting.DpEvent], None]


def build_task_vector(
    loaded: LoadedModel,
    records: Sequence[Record],
    heads: HeadSet | None,
    settings: BuildSettings,
    *,
    out: str | Path | None = None,
    before_noise: BeforeNoise | None = None,
) -> BuildResult:
    """Build a private task vector from ``records`` and (optionally) write it to ``out``.

    ``heads`` is the released head set, or None with ``settings.private_selection``.
    ``before_noise(event)`` is called once, just before the first noise draw, with the build's
    accounting event (e.g. a ledger charge); if it raises, no noise is drawn and nothing written.
    """
    geometry = loaded.adapter.geometry
    notes = _validate(settings, records, heads)
    settings = replace(
        settings, max_prompt_tokens=resolve_max_prompt_tokens(loaded.adapter, settings.max_prompt_tokens)
    )
    relation = _relation(settings)
    sampler = make_sampler(
        settings.noise_sampler, seed=settings.insecure_seed, allow_insecure_seed=settings.allow_insecure_seed
    )
    partition = partition_records(
        records,
        relation=relation,
        shots_per_chunk=settings.shots_per_chunk,
        num_chunks=settings.num_chunks,
        insecure_seed=settings.insecure_seed,
    )
    if settings.privacy_unit == "user":
        notes.append(
            f"user level: {partition.num_unused} records beyond --max-records-per-user were dropped "
            "(a private count: shown to you, never stored)"
        )
    selection_part, release_part = _split_for_selection(partition, settings)
    selection_plan = _plan_selection(settings)
    candidate_layers = heads.layers if heads is not None else _pool(settings, geometry).layers
    clip_norms = parse_l2_clip_norms(list(settings.l2_clip_norm), candidate_layers)
    sensitivity = _sensitivity(clip_norms, heads, settings, release_part.num_chunks, relation)
    plan = _plan_release(settings, sensitivity, sampler, selection_plan)  # None: non-private
    charge = _ChargeOnce(before_noise, _build_event(plan, selection_plan))

    head_selection = settings.head_selection
    if heads is None:
        charge()
        selection = _select_privately(loaded, records, selection_part, settings, selection_plan)
        heads, head_selection = selection.heads, selection.to_metadata()

    reference = _reference(loaded, heads, settings)
    accumulator = ClippedSumAccumulator(_layer_dims(loaded, heads))
    for clipped in iter_clipped_chunks(loaded, records, release_part, heads, settings, reference, clip_norms):
        accumulator.add(clipped)
    mean = accumulator.mean(num_chunks=release_part.num_chunks)
    if plan is not None:
        charge()
        noised = add_gaussian_noise(mean, plan=plan, sampler=sampler)
    else:
        noised = release_without_noise(mean, allow_non_private=True, l2_sensitivity=sensitivity)

    values = _per_head_rows(noised.layers, heads, geometry.head_dim)
    reference_rows = _per_head_rows(reference, heads, geometry.head_dim)
    vector = TaskVector(
        heads=heads,
        values=(values + reference_rows).astype(np.float32),
        metadata=artifact_metadata(
            loaded,
            heads,
            settings,
            noised.plan,
            clip_norms,
            release_part,
            len(records),
            relation,
            head_selection,
        ),
        reference=None if settings.center == "none" else reference_rows.astype(np.float32),
    )
    path = save_task_vector(vector, out) if out is not None else None
    return BuildResult(
        vector, path, partition.num_unused, tuple(notes), charge.event if charge.done else None
    )


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
        query=settings.query,
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
    """Calls ``before_noise(event)`` the first time it is called, never again."""

    def __init__(self, before_noise: BeforeNoise | None, event: dp_accounting.DpEvent):
        self._before_noise, self.event, self.done = before_noise, event, False

    def __call__(self) -> None:
        if not self.done and self._before_noise is not None:
            self._before_noise(self.event)
        self.done = True


def _validate(settings: BuildSettings, records: Sequence[Record], heads: HeadSet | None) -> list[str]:
    if not records:
        raise RecordError("no records to build from")
    if settings.batch_size < 1:
        raise ParameterError(f"batch_size must be >= 1, got {settings.batch_size}")
    if (heads is None) == (settings.private_selection is None):
        raise ParameterError("give either a head set or private selection settings, not both or neither")
    if settings.non_private:
        if settings.private_selection is not None:
            raise ParameterError("private head selection makes no sense in a non-private build")
        return ["NON-PRIVATE build: no noise is added and no privacy guarantee holds"]
    notes = validate_epsilon_delta(epsilon=settings.epsilon, delta=settings.delta, num_records=len(records))
    for note in notes:
        warnings.warn(note, stacklevel=3)
    return notes


def _relation(settings: BuildSettings) -> NeighbouringRelation:
    """User level is add/remove one user (users are hashed into a public number of chunks)."""
    if settings.privacy_unit == "user":
        return NeighbouringRelation.ADD_REMOVE_ONE
    return parse_relation(settings.neighbouring_relation)


def _split_for_selection(partition: Partition, settings: BuildSettings) -> tuple[Partition, Partition]:
    """(selection chunks, release chunks): all and all (sequential), or disjoint halves."""
    selection = settings.private_selection
    if selection is None or selection.composition == "sequential":
        return partition, partition
    selection_idx, release_idx = parallel_halves(partition.num_chunks)
    return sub_partition(partition, selection_idx), sub_partition(partition, release_idx)


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
    composition has no dp-accounting event; the selection and the release are charged as if
    composed — the safe side (the guarantee itself is the larger of the two)."""
    if plan is None:
        return dp_accounting.NonPrivateDpEvent()
    if selection_plan is None or selection_plan.composition == "sequential":
        return plan.event
    return dp_accounting.ComposedDpEvent([selection_plan.event, plan.event])


def _select_privately(loaded, records, selection_part, settings, selection_plan):
    from dpmtv.selection.private import select_private  # the selection package imports build's pieces

    rng = seeded_rng(settings.insecure_seed) if settings.insecure_seed is not None else None
    return select_private(
        loaded,
        chunk_records(records, selection_part, settings.shots_per_chunk),
        plan=selection_plan,
        pool=_pool(settings, loaded.adapter.geometry),
        max_prompt_tokens=settings.max_prompt_tokens,
        rng=rng,
        progress=settings.progress,
    )


def _reference(loaded: LoadedModel, heads: HeadSet, settings: BuildSettings) -> dict[int, np.ndarray]:
    """Public centring reference per layer (zero when not centring)."""
    if settings.center == "none":
        return {layer: np.zeros(dim) for layer, dim in _layer_dims(loaded, heads).items()}
    if settings.center == "blank":
        prompts = [Prompt((), Example((blank_image(),), settings.query_question))]
    else:
        public, question = load_records(settings.center), settings.query_question
        size = max(1, min(settings.shots_per_chunk, len(public)))
        prompts = [
            chunk_prompt(public[start : start + size], query=settings.query, query_question=question)
            for start in range(0, len(public) - size + 1, size)
        ]
    return mean_selected_heads(loaded.adapter, prompts, heads, batch_size=settings.batch_size)


def _layer_dims(loaded: LoadedModel, heads: HeadSet) -> dict[int, int]:
    return {layer: len(heads.heads_in(layer)) * loaded.adapter.geometry.head_dim for layer in heads.layers}


def _per_head_rows(per_layer: dict[int, np.ndarray], heads: HeadSet, head_dim: int) -> np.ndarray:
    """Per-layer flat vectors (k_l*d,) → rows (K, d) in the head set's order."""
    return np.concatenate([np.asarray(per_layer[layer]).reshape(-1, head_dim) for layer in heads.layers])
