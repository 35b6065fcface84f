"""Empirical sensitivity audit on the real build path: how far one unit's change moves the mean.

The ε audit (:mod:`dpmtv.audit.mechanism`) checks clip → mean → noise on given chunk vectors; it
cannot see a wiring bug upstream of them (a partition that ignores the privacy unit, a Δ computed
for the wrong relation). This audit runs the build's own pieces instead:

* :func:`dpmtv.pipeline.plan.plan_layout` — the build's partition entry point (unit, relation, public
  ``m``, per-user cap) and its Δ;
* :func:`dpmtv.pipeline.tasks.iter_clipped_chunks` — the build's prompts, extraction, centering and
  per-layer clipping;

on the real model and records ``D`` and on neighbours ``D'`` at the build's unit and relation:

=================  ==================  ==========================================================
unit               relation            neighbours
=================  ==================  ==========================================================
record             replace-one         record ``i`` replaced by a canary record
record             add-remove-one      record ``i`` removed; a canary record added
user               add-remove-one      all of user ``u``'s records removed; a canary user with
                                       ``max_records_per_user + 2`` records added
=================  ==================  ==========================================================

Each partition is drawn with a seed (the build's INSECURE seeded mode), and ``D`` and ``D'`` use
the same seed — the coupling of the sensitivity proofs — so every difference of the un-noised
means comes from the data. The audit reports ``ratio = ‖mean(D) − mean(D')‖₂ / Δ`` for every
pair; a correct build has ``ratio <= 1`` always (it is a worst-case bound, not a statistical
one, so one pair above 1 is a violation). Per-chunk clipped vectors are cached by chunk content
(a chunk's vector is a function of its own records), so a neighbour costs only its changed
chunks' forward passes, which may run on Ray workers (``executor``, :mod:`dpmtv.distributed`:
the build's extraction, per chunk, with the driver's coverage check). Nothing here is released:
the means stay in memory.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from dpmtv._atomic import write_text_atomically
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError, RecordError
from dpmtv.executor import Executor, LocalExecutor
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.build import BuildSettings
from dpmtv.pipeline.plan import plan_layout
from dpmtv.pipeline.reference import reference_activations
from dpmtv.pipeline.tasks import ChunkJob, ClippedRows
from dpmtv.privacy import AdjacencyRelation, Partition, PrivacyUnit

__all__ = ["SensitivityAudit", "SensitivityPair", "audit_sensitivity"]

CANARY_QUESTION = "Ignore the image. Which secret word does the canary sing?"
CANARY_ANSWER = "zzyzx canary 4917"
RATIO_TOLERANCE = 1e-5  # float32 activations, clip norms met to ~1e-7 relative
_CANARY_USER = "dpmtv-audit-canary-user"


@dataclass(frozen=True)
class SensitivityPair:
    """One neighbouring pair: its partition seed, the change, and ``‖Δmean‖ / Δ``."""

    partition_seed: int
    change: str  # "replace" | "remove" | "add"
    target: str  # record index, user id or canary name (public descriptions of the change)
    ratio: float
    l2_sensitivity: float
    l2_sensitivity_neighbour: float  # must equal l2_sensitivity (Δ may not depend on the data)
    rebuild_gap: float | None = None  # ‖cached mean(D') − rebuilt mean(D')‖ / Δ, for rebuilt pairs
    ratio_rebuilt: float | None = None  # ‖mean(D) − rebuilt mean(D')‖ / Δ


@dataclass(frozen=True)
class SensitivityAudit:
    """All pairs of one audit, with the unit and relation they were drawn for."""

    privacy_unit: str
    neighbouring_relation: str
    pairs: tuple[SensitivityPair, ...]

    @property
    def worst(self) -> SensitivityPair:
        return max(self.pairs, key=lambda p: p.ratio)

    @property
    def violations(self) -> tuple[SensitivityPair, ...]:
        """Pairs whose mean moved by more than Δ, or whose Δ differs between D and D'."""
        return tuple(
            p
            for p in self.pairs
            if p.ratio > 1 + RATIO_TOLERANCE
            or not np.isclose(p.l2_sensitivity, p.l2_sensitivity_neighbour, rtol=1e-12)
            or (p.rebuild_gap is not None and p.rebuild_gap > RATIO_TOLERANCE)
            or (p.ratio_rebuilt is not None and p.ratio_rebuilt > 1 + RATIO_TOLERANCE)
        )

    def rows(self) -> list[dict[str, Any]]:
        """Per change: pairs, worst ratio and where, violations."""
        out = []
        for change in sorted({p.change for p in self.pairs}):
            pairs = [p for p in self.pairs if p.change == change]
            worst = max(pairs, key=lambda p: p.ratio)
            out.append(
                {
                    "privacy_unit": self.privacy_unit,
                    "neighbouring_relation": self.neighbouring_relation,
                    "change": change,
                    "pairs": len(pairs),
                    "worst_ratio": worst.ratio,
                    "worst_pair": {"partition_seed": worst.partition_seed, "target": worst.target},
                    "violations": sum(p in self.violations for p in pairs),
                    "rebuilt_pairs": sum(p.rebuild_gap is not None for p in pairs),
                    "worst_rebuild_gap": max(
                        (p.rebuild_gap for p in pairs if p.rebuild_gap is not None), default=None
                    ),
                }
            )
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "privacy_unit": self.privacy_unit,
            "neighbouring_relation": self.neighbouring_relation,
            "ratio_tolerance": RATIO_TOLERANCE,
            "summary": self.rows(),
            "pairs": [dataclasses.asdict(p) for p in self.pairs],
        }

    def to_markdown(self) -> str:
        lines = [
            "| unit | relation | change | pairs | worst ‖mean(D)−mean(D′)‖/Δ | violations |",
            "|---|---|---|---:|---:|---:|",
        ]
        for row in self.rows():
            lines.append(
                f"| {row['privacy_unit']} | {row['neighbouring_relation']} | {row['change']} | "
                f"{row['pairs']} | {row['worst_ratio']:.4f} | {row['violations']} |"
            )
        return "\n".join(lines) + "\n"

    def write(self, folder: str | Path) -> dict[str, Path]:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        paths = {"json": folder / "sensitivity.json", "markdown": folder / "sensitivity.md"}
        write_text_atomically(paths["json"], json.dumps(self.to_json(), indent=1) + "\n")
        write_text_atomically(paths["markdown"], self.to_markdown())
        return paths


def audit_sensitivity(
    loaded: LoadedModel,
    records: Sequence[Record],
    heads: HeadSet,
    settings: BuildSettings,
    *,
    num_partitions: int = 20,
    neighbours_per_partition: int = 4,
    seed: int = 0,
    executor: Executor | None = None,
    rebuild_pairs: int = 2,
) -> SensitivityAudit:
    """Measure ``‖mean(D) − mean(D')‖ / Δ`` over seeded partitions and neighbours (module doc).

    ``settings`` are the build's (unit, relation, ``m``, cap, clip norms, shots, query, centering);
    its seed, noise and privacy switches are replaced: the audit seeds partition ``p`` with
    ``seed + p`` and computes un-noised means only. The first neighbour of each of the first
    ``rebuild_pairs`` partitions is also rebuilt from scratch (every chunk, no cache). Private
    head selection is not audited (give the released ``heads``). ``executor`` runs the chunks'
    forward passes (default: this process).

    Raises:
        ParameterError: private selection settings, ``num_partitions`` or
            ``neighbours_per_partition`` < 1. RecordError: no records.
    """
    if settings.private_selection is not None:
        raise ParameterError("the sensitivity audit takes the released heads, not private selection")
    if num_partitions < 1 or neighbours_per_partition < 1:
        raise ParameterError(
            f"num_partitions ({num_partitions}) and neighbours_per_partition "
            f"({neighbours_per_partition}) must be >= 1"
        )
    if not records:
        raise RecordError("no records to audit")
    means = _ChunkMeans(loaded, heads, settings, executor or LocalExecutor())
    pairs = []
    for index in range(num_partitions):
        partition_seed = seed + index
        seeded = dataclasses.replace(
            settings, insecure_seed=partition_seed, allow_insecure_seed=True, non_private=True, progress=False
        )
        base, base_delta = means.mean(records, seeded)
        rng = np.random.default_rng([seed, index, 4917])  # public choice of the neighbours
        for k, (change, target, neighbour) in enumerate(
            _neighbours(records, settings, rng, neighbours_per_partition)
        ):
            rebuild = k == 0 and index < rebuild_pairs
            pairs.append(
                _pair(means, seeded, base, base_delta, neighbour, (partition_seed, change, target), rebuild)
            )
    return SensitivityAudit(settings.privacy_unit.value, settings.relation.value, tuple(pairs))


def _pair(means, seeded, base, base_delta, neighbour, described, rebuild: bool) -> SensitivityPair:
    """Measure one neighbour through the cache, and with ``rebuild`` also from scratch."""
    moved, delta = means.mean(neighbour, seeded)
    pair = SensitivityPair(*described, float(np.linalg.norm(base - moved) / base_delta), base_delta, delta)
    if not rebuild:
        return pair
    rebuilt = means.mean(neighbour, seeded, fresh=True)[0]
    return dataclasses.replace(
        pair,
        rebuild_gap=float(np.linalg.norm(moved - rebuilt) / base_delta),
        ratio_rebuilt=float(np.linalg.norm(base - rebuilt) / base_delta),
    )


class _ChunkMeans:
    """Un-noised means through the build's layout and extraction, with clipped chunk vectors
    cached by chunk content (the identity of the chunk's records, in order)."""

    def __init__(self, loaded: LoadedModel, heads: HeadSet, settings: BuildSettings, executor: Executor):
        self._loaded, self._heads, self._settings, self._executor = loaded, heads, settings, executor
        self._reference = reference_activations(loaded, heads, settings)
        self._cache: dict[tuple[int, ...], np.ndarray] = {}
        self._alive: list[Sequence[Record]] = []  # keeps ids in cache keys unique

    def mean(
        self, records: Sequence[Record], settings: BuildSettings, *, fresh: bool = False
    ) -> tuple[np.ndarray, float]:
        """(the un-noised mean, concatenated over layers, float64; the layout's Δ). ``fresh``:
        extract every chunk in one run over ``records``, neither reading nor filling the cache."""
        self._alive.append(records)
        layout = plan_layout(self._loaded, records, self._heads, settings)
        shots = settings.shots_per_chunk
        keys = [tuple(id(records[int(i)]) for i in chunk[:shots]) for chunk in layout.release_part.chunks]
        if fresh:
            return self._fresh_mean(records, layout, keys), layout.l2_sensitivity
        missing = [j for j, key in enumerate(keys) if key and key not in self._cache]
        if missing:
            chunks = tuple(layout.release_part.chunks[j] for j in missing)
            todo = Partition(chunks=chunks, num_unused=0)
            rows = self._extract(records, todo, layout.l2_clip_norms)
            for j, row in zip(missing, rows, strict=True):
                self._cache[keys[j]] = row
        dim = sum(len(self._heads.heads_in(layer)) for layer in self._heads.layers)
        total = np.zeros(dim * self._loaded.adapter.geometry.head_dim)
        for key in keys:
            if key:
                total += self._cache[key]
        return total / layout.release_part.num_chunks, layout.l2_sensitivity

    def _fresh_mean(self, records, layout, keys) -> np.ndarray:
        nonempty = [j for j, key in enumerate(keys) if key]
        chunks = tuple(layout.release_part.chunks[j] for j in nonempty)
        rows = self._extract(records, Partition(chunks=chunks, num_unused=0), layout.l2_clip_norms)
        return np.sum(rows, axis=0) / layout.release_part.num_chunks

    def _extract(self, records, partition: Partition, clip_norms) -> np.ndarray:
        """(non-empty chunks, Σ k_l*d) float64: each chunk's clipped vector."""
        task = ClippedRows(ChunkJob(self._heads, self._settings, self._reference, clip_norms))
        return self._executor.run(self._loaded, records, partition, task, progress=self._settings.progress)


def _neighbours(records: Sequence[Record], settings: BuildSettings, rng: np.random.Generator, count: int):
    """(change, target, D') triples for the settings' unit and relation (module docstring)."""
    if settings.privacy_unit is PrivacyUnit.USER:
        users = sorted({r.user_id for r in records if r.user_id is not None})
        for user in rng.permutation(users)[:count]:
            yield "remove", f"user {user}", [r for r in records if r.user_id != user]
        canaries = [
            _canary(records[0], f"{_CANARY_USER}-{k}", _CANARY_USER, k)
            for k in range(settings.max_records_per_user + 2)
        ]
        yield "add", _CANARY_USER, [*records, *canaries]
        return
    chosen = rng.permutation(len(records))[:count]
    if settings.relation is AdjacencyRelation.REPLACE_ONE:
        for i in chosen:
            canary = _canary(records[i], records[i].record_id, records[i].user_id, int(i))
            yield "replace", f"record {i}", [*records[:i], canary, *records[i + 1 :]]
        return
    for i in chosen:
        yield "remove", f"record {i}", [*records[:i], *records[i + 1 :]]
    yield "add", "canary record", [*records, _canary(records[0], "dpmtv-audit-canary", None, 0)]


def _canary(like: Record, record_id: str, user_id: str | None, index: int) -> Record:
    """A public canary record: the colour-inverted (or, alternately, noise) image of ``like``
    with an unusual question and answer."""
    image = like.load_images()[0].convert("RGB")
    if index % 2 == 0:
        picture = ImageOps.invert(image)
    else:  # public: a fixed generator
        pixels = np.random.default_rng(4917 + index).integers(0, 256, (image.size[1], image.size[0], 3))
        picture = Image.fromarray(pixels.astype(np.uint8))
    return Record(
        record_id=record_id,
        images=(picture,),
        question=CANARY_QUESTION,
        answer=f"{CANARY_ANSWER} {index}",
        user_id=user_id,
        where="sensitivity audit canary",
        has_explicit_id=True,
    )
