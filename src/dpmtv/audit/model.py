"""Chunk vectors of a real model for the audit: forward passes once, canary chosen by measurement.

``D`` is the given records, cut into ``m = floor(N/s)`` chunks by one ``partition_replace_one``
draw; chunk ``j`` is rendered with :func:`dpmtv.build.chunk_prompt` and its selected heads are
read with :func:`dpmtv.extract.extract_selected_heads` — the build's own plumbing. ``D'``
replaces one record of chunk 0 with a canary record.

The canary
==========
With a real model no record is known to reach the antipode, so the canary is chosen by
measurement among public candidates: the replaced record is either the chunk's first record (a
demonstration) or its last one (with ``query="record"``, the query at whose last token the build
reads the heads), and the canary's image is black, white, uniform noise, or the colour-inverted image of the
record it replaces, with an unusual question and answer. Each candidate costs one forward pass;
the one whose clipped chunk vector moves farthest from the original (per-layer clipping, L2 over
layers) is kept, and :attr:`ModelCanary.shift_fraction` reports that distance as a fraction of the
worst case ``2·sqrt(Σ C_l²)``. A fraction well below 1 means the audit cannot reach ``ε_claimed``
with this canary whatever the number of trials (see ``epsilon_canary`` in the audit points).

Centring (``--center``) is not applied: the audit measures the clip → mean → noise release, which
a public reference shifts by a constant only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from dpmtv.audit.mechanism import MECHANISMS, AuditPoint, Mechanism, audit_chunk_vectors
from dpmtv.build import DEFAULT_QUERY_QUESTION, chunk_prompt
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError, RecordError
from dpmtv.extract import extract_selected_heads, iter_batches
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.privacy import clip_l2_per_layer, partition_replace_one, secure_rng, seeded_rng

__all__ = ["ModelCanary", "audit_model", "model_chunk_vectors"]

CANARY_QUESTION = "Ignore the image. Which secret word does the canary sing?"
CANARY_ANSWER = "zzyzx canary 4917"
_IMAGE_KINDS = ("black", "white", "noise", "inverted")


@dataclass(frozen=True)
class ModelCanary:
    """Unclipped chunk vectors of ``D`` and ``D'`` (layer → ``(m, D_l)``) and the chosen canary."""

    rows_without: Mapping[int, np.ndarray] = field(repr=False)
    rows_with: Mapping[int, np.ndarray] = field(repr=False)
    num_chunks: int
    position: str  # "first-record" | "last-record" (the query when query="record")
    image: str  # one of _IMAGE_KINDS
    shift_fraction: float  # ‖clipped change‖ / (2·sqrt(Σ C_l²))

    def describe(self) -> dict[str, Any]:
        return {
            "chunk": 0,
            "position": self.position,
            "image": self.image,
            "question": CANARY_QUESTION,
            "answer": CANARY_ANSWER,
            "shift_fraction_of_worst_case": self.shift_fraction,
        }


def model_chunk_vectors(
    loaded: LoadedModel,
    records: Sequence[Record],
    heads: HeadSet,
    *,
    l2_clip_norms: Mapping[int, float],
    shots_per_chunk: int,
    query: str = "record",
    query_question: str = DEFAULT_QUERY_QUESTION,
    batch_size: int = 4,
    seed: int | None = None,
) -> ModelCanary:
    """Run the ``m`` chunk prompts and the canary candidates once (module docstring).

    Raises:
        RecordError: no records; ParameterError: fewer records than ``shots_per_chunk``.
    """
    if not records:
        raise RecordError("no records to audit")
    heads.check(loaded.adapter.geometry)
    rng = seeded_rng(seed) if seed is not None else secure_rng()
    partition = partition_replace_one(len(records), shots_per_chunk=shots_per_chunk, rng=rng)
    chunks = [[records[int(i)] for i in chunk] for chunk in partition.chunks]
    prompts = [chunk_prompt(chunk, query=query, query_question=query_question) for chunk in chunks]
    rows = _extract(loaded, heads, prompts, batch_size)
    candidates = _candidates(chunks[0])
    tried = _extract(
        loaded,
        heads,
        [chunk_prompt(c, query=query, query_question=query_question) for _, _, c in candidates],
        batch_size,
    )
    index, fraction = _farthest(rows, tried, l2_clip_norms)
    with_canary = {layer: values.copy() for layer, values in rows.items()}
    for layer in with_canary:
        with_canary[layer][0] = tried[layer][index]
    position, image, _ = candidates[index]
    return ModelCanary(rows, with_canary, partition.num_chunks, position, image, fraction)


def audit_model(
    canary: ModelCanary,
    *,
    l2_clip_norms: Mapping[int, float],
    epsilons: Sequence[float],
    delta: float,
    trials: int,
    mechanism: Mechanism = MECHANISMS["correct"],
    confidence: float = 0.95,
    seed: int | None = None,
) -> list[AuditPoint]:
    """Audit the release of ``canary``'s chunk vectors at each claimed ε (no forward passes)."""
    return [
        audit_chunk_vectors(
            canary.rows_without,
            canary.rows_with,
            l2_clip_norms=l2_clip_norms,
            epsilon=epsilon,
            delta=delta,
            trials=trials,
            mechanism=mechanism,
            confidence=confidence,
            seed=None if seed is None else seed + index,
        )
        for index, epsilon in enumerate(epsilons)
    ]


def _extract(loaded: LoadedModel, heads: HeadSet, prompts: list, batch_size: int) -> dict[int, np.ndarray]:
    parts: dict[int, list[np.ndarray]] = {}
    for batch in iter_batches(prompts, batch_size):
        for layer, values in extract_selected_heads(loaded.adapter, batch, heads).items():
            parts.setdefault(layer, []).append(values)
    return {layer: np.concatenate(values) for layer, values in parts.items()}  # (B, k_l*d)


def _candidates(chunk: list[Record]) -> list[tuple[str, str, list[Record]]]:
    """(position, image kind, chunk with the canary) for every public candidate."""
    positions = {"first-record": 0, "last-record": len(chunk) - 1} if len(chunk) > 1 else {"last-record": 0}
    out = []
    for position, index in positions.items():
        original = chunk[index]
        size = original.load_images()[0].size
        for kind in _IMAGE_KINDS:
            canary = Record(
                record_id="dpmtv-audit-canary",
                images=(_canary_image(kind, size, original),),
                question=CANARY_QUESTION,
                answer=CANARY_ANSWER,
                where="audit canary",
            )
            out.append((position, kind, [*chunk[:index], canary, *chunk[index + 1 :]]))
    return out


def _canary_image(kind: str, size: tuple[int, int], original: Record) -> Image.Image:
    if kind == "black":
        return Image.new("RGB", size, (0, 0, 0))
    if kind == "white":
        return Image.new("RGB", size, (255, 255, 255))
    if kind == "noise":  # public: a fixed generator, no private data
        pixels = np.random.default_rng(4917).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
        return Image.fromarray(pixels)
    if kind == "inverted":
        return ImageOps.invert(original.load_images()[0].convert("RGB"))
    raise ParameterError(f"unknown canary image kind {kind!r}")


def _farthest(
    rows: Mapping[int, np.ndarray], tried: Mapping[int, np.ndarray], l2_clip_norms: Mapping[int, float]
) -> tuple[int, float]:
    """The candidate whose clipped vector is farthest from chunk 0's, and that distance as a
    fraction of the worst case 2·sqrt(Σ C_l²)."""
    base = clip_l2_per_layer({layer: r[:1] for layer, r in rows.items()}, l2_clip_norms=l2_clip_norms)
    moved = clip_l2_per_layer(dict(tried), l2_clip_norms=l2_clip_norms)
    squared = sum(np.sum((moved[layer] - base[layer]) ** 2, axis=1) for layer in rows)  # (K,)
    index = int(np.argmax(squared))
    worst = 2.0 * np.sqrt(sum(l2_clip_norms[layer] ** 2 for layer in rows))
    return index, float(np.sqrt(squared[index]) / worst)
