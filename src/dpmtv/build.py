"""The DP-MTV pipeline: partition → prompt → extract → clip → aggregate → noise once → artifact.

This module joins model plumbing (``extract``) and privacy code (``dpmtv.privacy``); neither
imports the other. The un-noised mean lives only inside :func:`build_task_vector`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from PIL import Image

from dpmtv._progress import progress_bar
from dpmtv._version import __version__
from dpmtv.data.records import Record, load_records
from dpmtv.errors import ParameterError, RecordError
from dpmtv.extract import extract_selected_heads, iter_batches, mean_selected_heads
from dpmtv.heads import HeadSet
from dpmtv.models.fingerprint import model_identity
from dpmtv.models.loading import LoadedModel
from dpmtv.privacy import (
    ClippedSumAccumulator,
    NeighbouringRelation,
    Partition,
    clip_l2_per_layer,
    event_to_json,
    fresh_partition_key,
    l2_sensitivity,
    make_sampler,
    parse_l2_clip_norms,
    parse_relation,
    partition_add_remove_one,
    partition_replace_one,
    secure_rng,
    seeded_rng,
    validate_epsilon_delta,
)
from dpmtv.privacy.release import add_gaussian_noise, plan_gaussian_release, release_without_noise
from dpmtv.prompts import Example, Prompt, blank_image
from dpmtv.vector import ArtifactMetadata, PrivacyMetadata, TaskVector, save_task_vector

DEFAULT_QUERY_QUESTION = "What is the answer?"
ACCOUNTANT_DESCRIPTION = (
    "dp_accounting PLDAccountant(ADD_OR_REMOVE_ONE) over unit-sensitivity events "
    "(noise_multiplier = noise_std / l2_sensitivity)"
)


@dataclass(frozen=True)
class BuildSettings:
    """Everything a build needs besides the model, the records and the head set."""

    epsilon: float
    delta: float
    l2_clip_norm: tuple[float, ...]  # one value, or one per released layer
    shots_per_chunk: int  # records per chunk (s); with query="record" s-1 are demonstrations
    neighbouring_relation: str = "replace-one"
    num_chunks: int | None = None  # public m, required for add-remove-one
    query: str = "record"  # "record" | "blank" | path of a public query image
    query_question: str = DEFAULT_QUERY_QUESTION  # public; used with blank/public queries
    center: str = "none"  # "none" | "blank" | path of public records
    batch_size: int = 4
    noise_sampler: str = "opendp"
    insecure_seed: int | None = None
    allow_insecure_seed: bool = False
    non_private: bool = False
    head_selection: dict = field(default_factory=lambda: {"method": "user"})
    progress: bool = True


@dataclass(frozen=True)
class BuildResult:
    vector: TaskVector
    path: Path | None
    num_unused_records: int
    warnings: tuple[str, ...]


def build_task_vector(
    loaded: LoadedModel,
    records: Sequence[Record],
    heads: HeadSet,
    settings: BuildSettings,
    *,
    out: str | Path | None = None,
) -> BuildResult:
    """Build a private task vector from ``records`` and (optionally) write it to ``out``."""
    heads.check(loaded.adapter.geometry)
    notes = _validate(settings, records)
    relation = parse_relation(settings.neighbouring_relation)
    clip_norms = parse_l2_clip_norms(list(settings.l2_clip_norm), heads.layers)
    sampler = make_sampler(
        settings.noise_sampler, seed=settings.insecure_seed, allow_insecure_seed=settings.allow_insecure_seed
    )
    partition = _partition(records, settings, relation)
    reference = _reference(loaded, heads, settings)
    accumulator = ClippedSumAccumulator(_layer_dims(loaded, heads))
    for clipped in iter_clipped_chunks(loaded, records, partition, heads, settings, reference, clip_norms):
        accumulator.add(clipped)
    mean = accumulator.mean(num_chunks=partition.num_chunks)
    sensitivity = l2_sensitivity(
        l2_clip_norms=[clip_norms[layer] for layer in heads.layers],
        num_chunks=partition.num_chunks,
        relation=relation,
    )
    if settings.non_private:
        noised = release_without_noise(mean, allow_non_private=True, l2_sensitivity=sensitivity)
    else:
        plan = plan_gaussian_release(
            l2_sensitivity=sensitivity, epsilon=settings.epsilon, delta=settings.delta, sampler=sampler
        )
        noised = add_gaussian_noise(mean, plan=plan, sampler=sampler)
    values = _per_head_rows(noised.layers, heads, loaded.adapter.geometry.head_dim)
    reference_rows = _per_head_rows(reference, heads, loaded.adapter.geometry.head_dim)
    vector = TaskVector(
        heads=heads,
        values=(values + reference_rows).astype(np.float32),
        metadata=_metadata(
            loaded, heads, settings, noised.plan, clip_norms, partition, len(records), relation
        ),
        reference=None if settings.center == "none" else reference_rows.astype(np.float32),
    )
    path = save_task_vector(vector, out) if out is not None else None
    return BuildResult(vector, path, partition.num_unused, tuple(notes))


def iter_clipped_chunks(
    loaded: LoadedModel,
    records: Sequence[Record],
    partition: Partition,
    heads: HeadSet,
    settings: BuildSettings,
    reference: dict[int, np.ndarray],
    clip_norms: dict[int, float],
) -> Iterator[dict[int, np.ndarray]]:
    """Per batch of chunks: the selected heads' last-token outputs, centred and clipped per
    layer, ``{layer: (B, k_l*d)}``. These are private, un-noised per-chunk values: the build sums
    them away at once; experiments (audits, sweeps) may hold them in memory, never write them."""
    with progress_bar("extracting chunks", partition.num_chunks, enabled=settings.progress) as advance:
        for batch in iter_batches(_chunk_prompts(records, partition, settings), settings.batch_size):
            activations = extract_selected_heads(loaded.adapter, batch, heads)
            centred = {layer: values - reference[layer] for layer, values in activations.items()}
            yield clip_l2_per_layer(centred, l2_clip_norms=clip_norms)
            advance(len(batch))


def _validate(settings: BuildSettings, records: Sequence[Record]) -> list[str]:
    if not records:
        raise RecordError("no records to build from")
    if settings.batch_size < 1:
        raise ParameterError(f"batch_size must be >= 1, got {settings.batch_size}")
    if settings.non_private:
        return ["NON-PRIVATE build: no noise is added and no privacy guarantee holds"]
    notes = validate_epsilon_delta(epsilon=settings.epsilon, delta=settings.delta, num_records=len(records))
    for note in notes:
        warnings.warn(note, stacklevel=3)
    return notes


def _partition(
    records: Sequence[Record], settings: BuildSettings, relation: NeighbouringRelation
) -> Partition:
    if relation is NeighbouringRelation.REPLACE_ONE:
        rng = seeded_rng(settings.insecure_seed) if settings.insecure_seed is not None else secure_rng()
        return partition_replace_one(len(records), shots_per_chunk=settings.shots_per_chunk, rng=rng)
    if settings.num_chunks is None:
        raise ParameterError(
            "add-remove-one needs a public, fixed number of chunks: pass --num-chunks "
            "(it must not be derived from the private data)"
        )
    unnamed = next((r for r in records if not r.has_explicit_id), None)
    if unnamed is not None:
        raise RecordError(
            f"{unnamed.where}: field 'id' is missing; add-remove-one assigns chunks by a keyed "
            "hash of each record's id, so every record needs a stable, unique 'id'"
        )
    # The key is fresh per build and never stored: chunk membership cannot be recomputed later.
    return partition_add_remove_one(
        [r.record_id for r in records], num_chunks=settings.num_chunks, key=fresh_partition_key()
    )


def _chunk_prompts(records: Sequence[Record], partition: Partition, settings: BuildSettings) -> _LazyPrompts:
    return _LazyPrompts(records, partition, settings)


class _LazyPrompts(Sequence):
    """Chunk prompts materialised (images decoded) only when a batch asks for them, so memory
    stays flat in the number of records. Empty chunks (add-remove-one) contribute nothing to
    the sum; the mean still divides by the public m."""

    def __init__(self, records: Sequence[Record], partition: Partition, settings: BuildSettings):
        self._records = records
        self._chunks = [chunk for chunk in partition.chunks if len(chunk)]
        self._settings = settings

    def __len__(self) -> int:
        return len(self._chunks)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        chunk = [self._records[int(i)] for i in self._chunks[index]]
        chunk = chunk[: self._settings.shots_per_chunk]
        return chunk_prompt(chunk, query=self._settings.query, query_question=self._settings.query_question)


def chunk_prompt(chunk: Sequence[Record], *, query: str, query_question: str) -> Prompt:
    """One chunk's prompt: its records as demonstrations, then the query (SPEC §4.2)."""
    if query == "record":
        *demos, last = chunk
        query_example = Example(last.load_images(), last.question)
    else:
        demos = list(chunk)
        query_example = Example((public_query_image(query),), query_question)
    return Prompt(tuple(Example(r.load_images(), r.question, r.answer) for r in demos), query_example)


def public_query_image(query: str) -> Image.Image:
    if query == "blank":
        return blank_image()
    path = Path(query)
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except OSError as exc:
        raise ParameterError(
            f"--query '{query}' is neither 'record', 'blank' nor a readable image: {exc}"
        ) from None


def _reference(loaded: LoadedModel, heads: HeadSet, settings: BuildSettings) -> dict[int, np.ndarray]:
    """Public centring reference per layer (zero when not centring)."""
    if settings.center == "none":
        return {
            layer: np.zeros(len(heads.heads_in(layer)) * loaded.adapter.geometry.head_dim)
            for layer in heads.layers
        }
    if settings.center == "blank":
        prompts = [Prompt((), Example((blank_image(),), settings.query_question))]
    else:
        public = load_records(settings.center)
        size = max(1, min(settings.shots_per_chunk, len(public)))
        prompts = [
            chunk_prompt(
                public[start : start + size], query=settings.query, query_question=settings.query_question
            )
            for start in range(0, len(public) - size + 1, size)
        ]
    return mean_selected_heads(loaded.adapter, prompts, heads, batch_size=settings.batch_size)


def _layer_dims(loaded: LoadedModel, heads: HeadSet) -> dict[int, int]:
    return {layer: len(heads.heads_in(layer)) * loaded.adapter.geometry.head_dim for layer in heads.layers}


def _per_head_rows(per_layer: dict[int, np.ndarray], heads: HeadSet, head_dim: int) -> np.ndarray:
    """Per-layer flat vectors (k_l*d,) → rows (K, d) in the head set's order."""
    return np.concatenate([np.asarray(per_layer[layer]).reshape(-1, head_dim) for layer in heads.layers])


def _metadata(
    loaded, heads, settings, plan, clip_norms, partition, num_records, relation
) -> ArtifactMetadata:
    replace_one = relation is NeighbouringRelation.REPLACE_ONE
    privacy = PrivacyMetadata(
        private=plan.private,
        epsilon=plan.epsilon,
        delta=plan.delta,
        epsilon_spent=plan.epsilon_spent,
        neighbouring_relation=relation.value,
        l2_clip_norm=[clip_norms[layer] for layer in heads.layers],
        l2_sensitivity=plan.l2_sensitivity,
        noise_std=plan.noise_std,
        noise_std_analytic=plan.noise_std_analytic if plan.private else None,
        noise_std_sampler_map=plan.noise_std_sampler_map,
        noise_multiplier=plan.noise_multiplier,
        noise_sampler=plan.sampler,
        secure_noise=plan.sampler_secure,
        insecure_seed=settings.insecure_seed,
        num_chunks=partition.num_chunks,
        shots_per_chunk=settings.shots_per_chunk,
        num_records=num_records if replace_one else None,
        num_unused_records=partition.num_unused if replace_one else None,
        accountant=ACCOUNTANT_DESCRIPTION,
        accounting_events=event_to_json(plan.event),
    )
    return ArtifactMetadata(
        library_version=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        model=model_identity(loaded.adapter, loaded.name_or_path),
        heads=heads.to_json(),
        head_selection=settings.head_selection,
        prompt={
            "query": settings.query if settings.query in ("record", "blank") else "public-image",
            "query_question": settings.query_question if settings.query != "record" else None,
            "center": settings.center if settings.center in ("none", "blank") else "public-records",
            "format": "chat-template",
        },
        privacy=privacy,
    )
