"""Chunk vectors of a real model for the audit: forward passes once, canary chosen by measurement.

``D`` is the given records, cut into ``m = floor(N/s)`` chunks by one ``partition_replace_one``
draw; chunk ``j`` is rendered with :func:`dpmtv.data.prompts.chunk_prompt` and its selected heads are
read with :func:`dpmtv.forward.extract.extract_selected_heads` — the build's own plumbing. ``D'``
replaces one record of chunk 0 with a canary record.

The canary
==========
With a real model no record is known to reach the antipode, so the canary is chosen by
measurement among public candidates: in each of the first ``canary_chunks`` (default 4) chunks,
any record may be replaced (a demonstration, or with ``query="record"`` the last one, the query
at whose last token the build reads the heads), and the canary's image is black, white, uniform
noise, or the colour-inverted image of the record it replaces, with an unusual question and
answer. Each candidate costs one forward pass; the one whose clipped chunk vector moves farthest
from its chunk's original (per-layer clipping, L2 over layers) is kept, and
:attr:`ModelCanary.shift_fraction` reports that distance as a fraction of the worst case
``2·sqrt(Σ C_l²)``. A fraction well below 1 means the audit cannot reach ``ε_claimed`` with this
canary whatever the number of trials (see ``epsilon_canary`` in the audit points), and
:func:`canary_power` says which broken release (σ scaled down) it would still catch.

Centering (``--center``) is not applied: the audit measures the clip → mean → noise release, which
a public reference shifts by a constant only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from dpmtv.audit.mechanism import MECHANISMS, AuditPoint, Mechanism, audit_chunk_vectors
from dpmtv.audit.stats import epsilon_lower_bound
from dpmtv.data.prompts import DEFAULT_QUERY_QUESTION, chunk_prompt
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError, RecordError
from dpmtv.forward.extract import stack_selected_heads
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.privacy import (
    CsprngNumpyGaussianSampler,
    clip_l2_per_layer,
    l2_sensitivity,
    partition_replace_one,
    plan_gaussian_release,
    secure_rng,
    seeded_rng,
)

__all__ = ["POWER_FRACTIONS", "ModelCanary", "audit_model", "canary_power", "model_chunk_vectors"]

CANARY_QUESTION = "Ignore the image. Which secret word does the canary sing?"
CANARY_ANSWER = "zzyzx canary 4917"
_IMAGE_KINDS = ("black", "white", "noise", "inverted")
POWER_FRACTIONS = (1.0, 0.9, 0.75, 0.5, 0.35, 0.25, 0.125)  # σ actually drawn / σ calibrated


@dataclass(frozen=True)
class ModelCanary:
    """Unclipped chunk vectors of ``D`` and ``D'`` (layer → ``(m, D_l)``) and the chosen canary."""

    rows_without: Mapping[int, np.ndarray] = field(repr=False)
    rows_with: Mapping[int, np.ndarray] = field(repr=False)
    num_chunks: int
    chunk: int  # the chunk whose record the canary replaces
    position: str  # "first-record" | "record-i" | "last-record" (the query when query="record")
    image: str  # one of _IMAGE_KINDS
    shift_fraction: float  # ‖clipped change‖ / (2·sqrt(Σ C_l²))

    def describe(self) -> dict[str, Any]:
        return {
            "chunk": self.chunk,
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
    canary_chunks: int = 4,
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
    candidates = [
        (j, *candidate)
        for j in range(min(canary_chunks, len(chunks)))
        for candidate in _candidates(chunks[j])
    ]
    tried = _extract(
        loaded,
        heads,
        [chunk_prompt(c, query=query, query_question=query_question) for *_, c in candidates],
        batch_size,
    )
    index, fraction = _farthest(rows, tried, [j for j, *_ in candidates], l2_clip_norms)
    chunk, position, image, _ = candidates[index]
    with_canary = {layer: values.copy() for layer, values in rows.items()}
    for layer in with_canary:
        with_canary[layer][chunk] = tried[layer][index]
    return ModelCanary(rows, with_canary, partition.num_chunks, chunk, position, image, fraction)


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


def canary_power(
    canary: ModelCanary,
    *,
    l2_clip_norms: Mapping[int, float],
    epsilon: float,
    delta: float,
    confidence: float,
    trials: int = 10_000,
    fractions: Sequence[float] = POWER_FRACTIONS,
    repetitions: int = 20,
    seed: int | None = None,
) -> dict[str, Any]:
    """How often the audit with this canary flags a release whose σ is ``fraction·σ`` (a
    calibration bug), at ``trials`` releases per dataset and the given per-claim confidence.

    The audit's statistic is the release projected on the unit shift direction; for Gaussian
    noise of std ``σ'`` that projection is exactly ``N(0, σ'²)`` on ``D`` and ``N(shift, σ'²)``
    on ``D'``, so each repetition draws those ``trials`` scores directly (1-D, no model) and runs
    the audit's own :func:`~dpmtv.audit.stats.epsilon_lower_bound`. Returns the flag rate per
    fraction and ``largest_fraction_flagged``: the largest σ fraction flagged in at least half of
    the repetitions (None if none is) — the smallest calibration bug this canary catches.
    """
    layers = sorted(l2_clip_norms)
    sensitivity = l2_sensitivity(
        l2_clip_norms=[l2_clip_norms[layer] for layer in layers],
        num_chunks=canary.num_chunks,
        relation="replace-one",
    )
    sigma = plan_gaussian_release(
        l2_sensitivity=sensitivity, epsilon=epsilon, delta=delta, sampler=CsprngNumpyGaussianSampler()
    ).noise_std
    shift = canary.shift_fraction * sensitivity
    rng = seeded_rng(seed) if seed is not None else secure_rng()
    rates = {}
    for fraction in fractions:
        std = fraction * sigma
        flagged = sum(
            epsilon_lower_bound(
                rng.normal(0.0, std, trials),
                rng.normal(shift, std, trials),
                delta=delta,
                confidence=confidence,
            ).epsilon_lower
            > epsilon
            for _ in range(repetitions)
        )
        rates[f"{fraction:g}"] = flagged / repetitions
    caught = [f for f in fractions if rates[f"{f:g}"] >= 0.5]
    return {
        "epsilon_claimed": epsilon,
        "trials": trials,
        "repetitions": repetitions,
        "flag_rate_by_sigma_fraction": rates,
        "largest_fraction_flagged": max(caught) if caught else None,
    }


def _extract(loaded: LoadedModel, heads: HeadSet, prompts: list, batch_size: int) -> dict[int, np.ndarray]:
    return stack_selected_heads(loaded.adapter, prompts, heads, batch_size=batch_size)  # (B, k_l*d)


def _candidates(chunk: list[Record]) -> list[tuple[str, str, list[Record]]]:
    """(position, image kind, chunk with the canary) for every public candidate."""
    last = len(chunk) - 1
    positions = {
        ("first-record" if i == 0 else "last-record" if i == last else f"record-{i}"): i
        for i in range(last + 1)
    }
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
    rows: Mapping[int, np.ndarray],
    tried: Mapping[int, np.ndarray],
    chunk_of: Sequence[int],
    l2_clip_norms: Mapping[int, float],
) -> tuple[int, float]:
    """The candidate whose clipped vector is farthest from its own chunk's, and that distance as
    a fraction of the worst case 2·sqrt(Σ C_l²)."""
    base = clip_l2_per_layer(
        {layer: r[list(chunk_of)] for layer, r in rows.items()}, l2_clip_norms=l2_clip_norms
    )
    moved = clip_l2_per_layer(dict(tried), l2_clip_norms=l2_clip_norms)
    squared = sum(np.sum((moved[layer] - base[layer]) ** 2, axis=1) for layer in rows)  # (K,)
    index = int(np.argmax(squared))
    worst = 2.0 * np.sqrt(sum(l2_clip_norms[layer] ** 2 for layer in rows))
    return index, float(np.sqrt(squared[index]) / worst)
